# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 33: the webhook's and the controller's own tokens: no Secret created, of the gate only its caBundle, only nfguard's reports, only the controller's profile status fields; their own writes pass.
#
# what the webhook's and the controller's own tokens may write beyond
# RBAC (e2e/scenarios/33-write-fences.sh): no Secret created; of the gate only
# its caBundle; only nfguard's reports; only the controller's own
# profile status fields; their own writes pass
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - rm -f "$kc"
#   - delete_report_crds "$crd"
#   - kubectl delete csr e2e-s33-other-signer --ignore-not-found
#   - namespace "$S33_NS" (scenario_ns)

SCENARIO_TITLE="the webhook's and the controller's own tokens: no Secret created, of the gate only its caBundle, only nfguard's reports, only the controller's profile status fields; their own writes pass"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s33_write_fences

# what the
# webhook's and the controller's own tokens may write, beyond RBAC, tried
# with tokens bound to their running pods (docs/install.md, "RBAC"):
#   - the webhook creates no Secret (RBAC: none to create; its Secret
#     nfguard-webhook-cert, provided empty by the install, holds its
#     certificate) and may change only clientConfig.caBundle of its
#     ValidatingWebhookConfiguration (ValidatingAdmissionPolicy
#     nfguard-webhook-ca-bundle): failurePolicy, rules, service and owner
#     references refused, the caBundle write passes;
#   - the controller may write only reports labelled
#     app.kubernetes.io/managed-by=nfguard (nfguard-controller-report-writes,
#     on the wgpolicyk8s.io PolicyReport CRD this scenario applies and
#     removes) and only its own status fields of a NodeNetfilterProfile
#     (nfguard-controller-profile-writes), and may approve certificate
#     requests for its own signer only (RBAC, checked by the API server);
#   - neither component logged a refusal by these policies: their own writes
#     pass.
# Writes that are meant to pass are server-side dry runs where a real write
# would change nfguard's state; the refused ones are real requests.

S33_NS=nfguard-e2e-s33
JSON_PATCH=application/json-patch+json
VWC_API=/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/nfguard
S33_REPORTS_API=/apis/wgpolicyk8s.io/v1alpha2/namespaces/$S33_NS/policyreports

# s33_refused KUBECONFIG WHAT POLICY TEXT METHOD PATH CTYPE BODY: refused by
# POLICY (a ValidatingAdmissionPolicy name, or "RBAC") with TEXT.
s33_refused() {
  local kc=$1 what=$2 policy=$3 text=$4 out
  if out=$(api_as_token "$kc" "$5" "$6" "$7" "$8"); then
    fail "$what was allowed: $out"
  fi
  if [ "$policy" != RBAC ]; then
    grep -qF "ValidatingAdmissionPolicy '$policy'" <<<"$out" || fail "$what was refused, but not by $policy: $out"
  fi
  grep -qF "$text" <<<"$out" || fail "$what was refused without '$text': $out"
  ok "$what: refused: $out"
}

# s33_token_for COMPONENT KUBECONFIG: a kubeconfig with a token bound to a
# running pod of COMPONENT, as that pod's own token is.
s33_token_for() {
  local pod who sa=nfguard-$1
  pod=$(kubectl -n "$NS" get pods -l "app.kubernetes.io/component=$1" --field-selector=status.phase=Running \
    -o jsonpath='{.items[0].metadata.name}')
  [ -n "$pod" ] || fail "no running $1 pod"
  token_kubeconfig "$2" "$(kubectl -n "$NS" create token "$sa" --bound-object-kind Pod \
    --bound-object-name "$pod" --duration=10m)"
  who=$(kubectl --kubeconfig "$2" auth whoami -o jsonpath='{.status.userInfo.username}')
  [ "$who" = "system:serviceaccount:$NS:$sa" ] || fail "the token bound to $pod should be $sa's, got: $who"
  ok "a token bound to $1 pod $pod authenticates as $who"
}

# The gate as the webhook must not change it: everything but the caBundle.
s33_gate() {
  kubectl get validatingwebhookconfiguration nfguard -o json |
    jq -c '{labels: .metadata.labels, owners: .metadata.ownerReferences, webhooks: [.webhooks[] | .clientConfig |= del(.caBundle)]}'
}

s33_webhook() {
  local kc out before after bundle pem changed secret policy other
  kc=$(mktemp)
  defer rm -f "$kc"
  s33_token_for webhook "$kc"
  secret=$(get secret nfguard-webhook-cert '{.data.tls\.crt}' -n "$NS")
  [ -n "$secret" ] || fail "the install's Secret nfguard-webhook-cert holds no certificate: the webhook did not fill it"
  out=$(kubectl -n "$NS" get secret nfguard-webhook-tls -o name 2>&1) &&
    fail "a Secret nfguard-webhook-tls exists on a fresh install: $out"
  ok "the webhook serves the certificate it wrote into the install's Secret nfguard-webhook-cert; no other Secret of its own"
  s33_refused "$kc" "the webhook's token creating a Secret in $NS" RBAC 'cannot create resource "secrets"' \
    POST "/api/v1/namespaces/$NS/secrets" application/json \
    '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"nfguard-e2e-s33-minted"},"type":"Opaque"}'

  before=$(s33_gate)
  policy=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].failurePolicy}')
  case "$policy" in Fail) other=Ignore ;; Ignore) other=Fail ;; *) fail "the gate's failurePolicy is '$policy'" ;; esac
  s33_refused "$kc" "the webhook turning its failurePolicy from $policy to $other" nfguard-webhook-ca-bundle \
    "may change only clientConfig.caBundle of nfguard" PATCH "$VWC_API" "$JSON_PATCH" \
    "[{\"op\":\"replace\",\"path\":\"/webhooks/0/failurePolicy\",\"value\":\"$other\"}]"
  s33_refused "$kc" "the webhook emptying its rules" nfguard-webhook-ca-bundle \
    "may change only clientConfig.caBundle of nfguard" PATCH "$VWC_API" "$JSON_PATCH" \
    '[{"op":"replace","path":"/webhooks/0/rules","value":[]}]'
  s33_refused "$kc" "the webhook pointing the gate at another Service" nfguard-webhook-ca-bundle \
    "not where it is called" PATCH "$VWC_API" "$JSON_PATCH" \
    '[{"op":"replace","path":"/webhooks/0/clientConfig/service/name","value":"nfguard-e2e-elsewhere"}]'
  s33_refused "$kc" "the webhook adding an owner reference to its configuration (the garbage collector would delete the gate)" \
    nfguard-webhook-ca-bundle "may not change the owner references or finalizers of nfguard" PATCH "$VWC_API" "$JSON_PATCH" \
    '[{"op":"add","path":"/metadata/ownerReferences","value":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000033"}]}]'
  after=$(s33_gate)
  [ "$after" = "$before" ] || fail "the gate changed although every write was refused: before $before, after $after"
  ok "the webhook configuration is as it was (everything but the caBundle)"

  # Its own write: the caBundle, as the webhook writes it (a JSON patch),
  # changed in a dry run (its first CA once more at the end), then the
  # current one for real.
  bundle=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}')
  [ -n "$bundle" ] || fail "the gate has no caBundle"
  pem=$(base64 -d <<<"$bundle")
  changed=$(printf '%s\n%s\n' "$pem" "$(sed -n '1,/END CERTIFICATE/p' <<<"$pem")" | base64 -w0)
  out=$(api_as_token "$kc" PATCH "$VWC_API?dryRun=All" "$JSON_PATCH" \
    "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$changed\"}]") ||
    fail "the webhook's token may not change the caBundle (dry run): $out"
  ok "the webhook changing the caBundle (a dry run): $out"
  out=$(api_as_token "$kc" PATCH "$VWC_API" "$JSON_PATCH" \
    "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$bundle\"}]") ||
    fail "the webhook's token may not write the caBundle: $out"
  ok "the webhook writing the current caBundle: $out"
}

S33_PROFILE=""
# The reporter's facts the refused writes below aim at, one line.
s33_facts() {
  kubectl get nodenetfilterprofile "$S33_PROFILE" -o json |
    jq -c '{node: .spec.nodeName, minReaderVersion: .status.minReaderVersion, hazards: (.status.hazards | length), kernel: .status.kernel.release}'
}
s33_report() { # NAME MANAGED_BY: a PolicyReport in S33_NS
  printf '{"apiVersion":"wgpolicyk8s.io/v1alpha2","kind":"PolicyReport","metadata":{"name":"%s","namespace":"%s","labels":{"app.kubernetes.io/managed-by":"%s"}},"results":[]}' \
    "$1" "$S33_NS" "$2"
}
s33_reports_served() { kubectl get --raw "$S33_REPORTS_API" >/dev/null 2>&1; }

s33_controller() {
  local kc out crd before after
  kc=$(mktemp)
  defer rm -f "$kc"
  s33_token_for controller "$kc"
  S33_PROFILE=${NODES[0]}
  before=$(s33_facts)
  s33_refused "$kc" "the controller changing the reporter's minReaderVersion of $S33_PROFILE" nfguard-controller-profile-writes \
    "the reporter owns the node facts" PATCH "$PROFILES_API/$S33_PROFILE/status" "$MERGE" \
    '{"status":{"minReaderVersion":"1.8.0"}}'
  s33_refused "$kc" "the controller removing the hazards of $S33_PROFILE" nfguard-controller-profile-writes \
    "the reporter owns the node facts" PATCH "$PROFILES_API/$S33_PROFILE/status" "$MERGE" \
    '{"status":{"hazards":null,"kernel":null}}'
  s33_refused "$kc" "the controller moving the reporter's heartbeat of $S33_PROFILE" nfguard-controller-profile-writes \
    "the reporter owns the node facts" PATCH "$PROFILES_API/$S33_PROFILE/status" "$MERGE" \
    '{"status":{"lastProbeTime":"2000-01-01T00:00:00Z"}}'
  after=$(s33_facts)
  [ "$after" = "$before" ] || fail "the facts of $S33_PROFILE changed although every write was refused: before $before, after $after"
  ok "the node facts of $S33_PROFILE are as they were: $after"
  out=$(api_as_token "$kc" PATCH "$PROFILES_API/$S33_PROFILE/status?dryRun=All" "$MERGE" \
    '{"status":{"oldestReaderVersion":"1.8.0","writers":[]}}') ||
    fail "the controller's token may not write its own status fields (dry run): $out"
  ok "the controller writing its own oldestReaderVersion and writers (a dry run): $out"

  # Reports: the PolicyReport CRD, a report of another tool, the controller's token.
  crd=$(report_crd kyverno "$WG_MODULE" config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml)
  defer delete_report_crds "$crd"
  kubectl apply --server-side -f "$crd" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/policyreports.wgpolicyk8s.io >/dev/null
  scenario_ns "$S33_NS"
  wait_for 30 "the PolicyReport API to be served" s33_reports_served
  s33_report kyverno-pod-a kyverno | kubectl create -f - >/dev/null
  s33_refused "$kc" "the controller rewriting Kyverno's PolicyReport" nfguard-controller-report-writes \
    "only reports labelled app.kubernetes.io/managed-by=nfguard, not $S33_NS/kyverno-pod-a" \
    PATCH "$S33_REPORTS_API/kyverno-pod-a" "$MERGE" '{"results":null,"summary":{"pass":1}}'
  s33_refused "$kc" "the controller adopting Kyverno's PolicyReport" nfguard-controller-report-writes \
    "only reports labelled app.kubernetes.io/managed-by=nfguard" \
    PATCH "$S33_REPORTS_API/kyverno-pod-a" "$MERGE" '{"metadata":{"labels":{"app.kubernetes.io/managed-by":"nfguard"}}}'
  s33_refused "$kc" "the controller deleting Kyverno's PolicyReport" nfguard-controller-report-writes \
    "may DELETE only reports labelled app.kubernetes.io/managed-by=nfguard" \
    DELETE "$S33_REPORTS_API/kyverno-pod-a" application/json ''
  s33_refused "$kc" "the controller creating a report labelled as another tool's" nfguard-controller-report-writes \
    "may CREATE only reports labelled app.kubernetes.io/managed-by=nfguard" \
    POST "$S33_REPORTS_API" application/json "$(s33_report posing kyverno)"
  [ "$(get policyreport kyverno-pod-a '{.metadata.labels.app\.kubernetes\.io/managed-by}' -n "$S33_NS")" = kyverno ] ||
    fail "Kyverno's PolicyReport changed or went although every write was refused"
  out=$(api_as_token "$kc" POST "$S33_REPORTS_API?dryRun=All" application/json "$(s33_report nfguard-pod-a nfguard)") ||
    fail "the controller's token may not create a report of its own (dry run): $out"
  ok "the controller creating a report of its own (a dry run): $out"

  # Certificates: it approves for nfguard's signer only (RBAC's approve verb
  # names that signer; the API server checks it on every approval).
  s33_other_signer_csr | kubectl create -f - >/dev/null
  defer kubectl delete csr e2e-s33-other-signer --ignore-not-found
  s33_refused "$kc" "the controller approving a kube-apiserver-client certificate request" RBAC \
    'user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client"' \
    PATCH /apis/certificates.k8s.io/v1/certificatesigningrequests/e2e-s33-other-signer/approval "$MERGE" \
    '{"status":{"conditions":[{"type":"Approved","status":"True","reason":"E2E","message":"e2e"}]}}'
  [ -z "$(get csr e2e-s33-other-signer '{.status.conditions}')" ] ||
    fail "the kube-apiserver-client request has a condition after the refused approval"
}

# A client-certificate request for the API server's own signer, as an
# administrator would make it (a throwaway P-256 key).
s33_other_signer_csr() {
  local key pem
  key=$(mktemp)
  pem=$(openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$key" \
    -subj "/CN=e2e-s33" 2>/dev/null) || fail "openssl could not make a request"
  rm -f "$key"
  cat <<YAML
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: e2e-s33-other-signer, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  signerName: kubernetes.io/kube-apiserver-client
  request: $(base64 -w0 <<<"$pem")
  usages: [client auth]
YAML
}

s33_write_fences() {
  local since logs component
  since=$(kubectl -n "$NS" get pods -l app.kubernetes.io/name=nfguard -o json |
    jq -r '[.items[].status.startTime] | min')
  s33_webhook
  s33_controller
  for component in webhook controller; do
    logs=$(kubectl -n "$NS" logs -l "app.kubernetes.io/component=$component" --tail=-1 --prefix 2>&1)
    if grep -E "ValidatingAdmissionPolicy '?nfguard-(webhook-ca-bundle|controller-(report|profile)-writes)" <<<"$logs" >/dev/null; then
      fail "the $component logged a refusal by its own policy: $(grep -E 'nfguard-(webhook-ca-bundle|controller-(report|profile)-writes)' <<<"$logs" | sed -n 1,3p)"
    fi
    ok "the ${component}'s log (its pods started from $since) has no refusal by nfguard's write policies: its own writes pass"
  done
}
