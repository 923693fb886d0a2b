# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 15: a forged AdmissionReview from a pod is refused (no client certificate); the API server's own call is judged.
#
# only the API server may call /validate: a pod POSTing a forged
# AdmissionReview (naming kube-system and a pull secret there) to the
# webhook's Service gets 401 before its body is read, counted as
# no_client_certificate; the API server's own call (its client
# certificate, AdmissionConfiguration) still judges and denies the
# incident DaemonSet
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)

SCENARIO_TITLE="a forged AdmissionReview from a pod is refused (no client certificate); the API server's own call is judged"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON="kind"
SCENARIO_RUN=s15_forged_review_refused

# Refusals for want of a client certificate, summed over the webhook's pods
# (the Service picks one).
s15_refused_total() {
  local pod v total=0
  for pod in $(kubectl -n "$NS" get pods -l app.kubernetes.io/component=webhook -o jsonpath='{.items[*].metadata.name}'); do
    v=$(pod_metric "$pod" 'nfguard_webhook_refused_requests_total{cause="no_client_certificate"}')
    [ -n "$v" ] || { echo "unreadable"; return 0; }
    total=$((total + ${v%.*}))
  done
  echo "$total"
}
s15_finished() { # NS POD
  local phase
  phase=$(get pod "$2" '{.status.phase}' -n "$1")
  WHY="phase ${phase:-none}"
  [ "$phase" = Succeeded ] || [ "$phase" = Failed ]
}

s15_forged_review_refused() {
  local ns=nfguard-e2e-s15 ca ip before after review out
  ca=$(get deployment nfguard-webhook '{.spec.template.spec.containers[0].env[?(@.name=="NFGUARD_CLIENT_CA_FILE")].value}' -n "$NS")
  if [ -z "$ca" ]; then
    if [ "$PROVIDER" = kind ]; then
      skip "kind's API server presents no client certificate to webhooks (e2e/run.sh installs manifests/ without the webhook-client-ca component)"
      return 0
    fi
    fail "the webhook does not require a client certificate (no NFGUARD_CLIENT_CA_FILE): e2e/local-cluster.sh installs it with one"
  fi
  ok "the webhook requires a client certificate chained to $ca ($(get deployment nfguard-webhook '{.spec.template.spec.containers[0].env[?(@.name=="NFGUARD_CLIENT_CERT_NAMES")].value}' -n "$NS"))"
  scenario_ns "$ns"
  ip=$(get service nfguard-webhook '{.spec.clusterIP}' -n "$NS")
  [ -n "$ip" ] || fail "the Service nfguard-webhook has no cluster IP"
  before=$(s15_refused_total)
  [ "$before" != unreadable ] || fail "the webhook's refused_requests_total is not readable through the pod proxy"

  # What a tenant would forge: a privileged pod of kube-system naming a pull
  # secret there, so that the webhook would read it for the look-up.
  review=$(jq -cn --arg img "$IMG_INCIDENT" '{apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
    request: {uid: "00000000-0000-0000-0000-000000000015",
      kind: {group: "", version: "v1", kind: "Pod"}, resource: {group: "", version: "v1", resource: "pods"},
      namespace: "kube-system", name: "forged", operation: "CREATE",
      userInfo: {username: "system:serviceaccount:kube-system:default"},
      object: {apiVersion: "v1", kind: "Pod", metadata: {name: "forged", namespace: "kube-system"},
        spec: {hostNetwork: true, imagePullSecrets: [{name: "kube-system-registry"}],
          containers: [{name: "c", image: $img, securityContext: {capabilities: {add: ["NET_ADMIN"]}}}]}}}}')
  # An ordinary pod on the pod network (not gated), no client certificate.
  # Its TLS client is the node's curl, run through a read-only hostPath of
  # the node's root (the node_exec contract: every node has curl): the
  # workload images' busybox wget, with its own TLS, gets alert 40
  # (handshake_failure) from any rustls server, RSA or ECDSA key (no cipher
  # suite in common). HTTP/1.1: over HTTP/2 curl reported error 92 (HTTP/2
  # framing) instead of the early 401 here, the answer given while the body
  # is still unread. It prints what the webhook answered; its deadline
  # bounds it.
  jq -n --arg img "$IMG_COMPATIBLE" --arg review "$review" --arg url "https://$ip/validate" '{
    apiVersion: "v1", kind: "Pod", metadata: {name: "forger", labels: {"app.kubernetes.io/part-of": "nfguard-e2e"}},
    spec: {restartPolicy: "Never", activeDeadlineSeconds: 60, terminationGracePeriodSeconds: 1, tolerations: [{operator: "Exists"}],
      volumes: [{name: "node", hostPath: {path: "/", type: "Directory"}}],
      containers: [{name: "forger", image: $img, env: [{name: "REVIEW", value: $review}, {name: "URL", value: $url}],
        volumeMounts: [{name: "node", mountPath: "/node", readOnly: true}],
        command: ["sh", "-c", "busybox chroot /node curl -sS -k --http1.1 -m 20 -w \"\\nHTTP %{http_code}\\n\" -H \"Content-Type: application/json\" --data-binary \"$REVIEW\" \"$URL\" 2>&1; echo \"curl exit $?\""]}]}}' |
    kubectl -n "$ns" apply -f - >/dev/null || fail "cannot create the pod forger"
  wait_for 120 "the pod forger to finish" s15_finished "$ns" forger
  out=$(kubectl -n "$ns" logs forger 2>&1) || fail "no log of the pod forger: $out"
  if grep -qF '"allowed"' <<<"$out"; then
    fail "the forged review was judged (an AdmissionReview answer came back): $out"
  fi
  grep -qxF 'HTTP 401' <<<"$out" || fail "the forged review was not refused with 401: $out"
  ok "a pod's forged AdmissionReview (kube-system, a pull secret there) to https://$ip/validate was refused:"
  show <<<"$out"
  after=$(s15_refused_total)
  if [ "$after" = unreadable ] || [ "$after" -le "$before" ]; then
    fail "nfguard_webhook_refused_requests_total{cause=\"no_client_certificate\"} did not rise ($before -> $after)"
  fi
  ok "counted: nfguard_webhook_refused_requests_total{cause=\"no_client_certificate\"} $before -> $after"

  # The API server's own call presents its certificate: the incident is
  # judged and denied (a refused call would be admitted under Ignore).
  incident_denied "$ns"
  ok "the API server's own call (its client certificate) is judged: the incident DaemonSet is denied"

  # On the node's network (the default) no NetworkPolicy can hold the
  # webhook: the client certificate is its only guard, proven above.
  out=$(get deployment nfguard-webhook '{.spec.template.spec.hostNetwork}' -n "$NS")
  [ "$out" = true ] || fail "the webhook is not on the node's network (hostNetwork: '$out'): the install's default"
  out=$(kubectl -n "$NS" get networkpolicy -o name)
  [ -z "$out" ] || fail "a NetworkPolicy is installed for pods on the node's network, where it has no effect: $out"
  ok "the webhook serves on the node's network with no NetworkPolicy (none could hold it): the client certificate is what refused the pod"
}
