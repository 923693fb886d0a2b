# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 31: the gate without the pod network: the webhook on the node's network; routes to the pod ranges blackholed; under Ignore and Fail a compatible CNI repair pod is admitted and judged, the incident pod denied by nfguard's verdict, an ordinary pod created; look-ups and watches keep working.
#
# (local provider) the gate without the pod network: the webhook on
# the node's network; the control plane's and the nodes' routes to the
# pod ranges blackholed; under failurePolicy Ignore and Fail a
# compatible CNI repair pod in kube-system is admitted and judged, the
# incident pod denied by nfguard's verdict, an ordinary pod created, with
# registry look-ups made during the outage; a policy change still
# reaches the webhook (e2e/scenarios/31-gate-without-pod-network.sh)
#
# Runs on: local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - s31_delete_pod kube-system "cni-repair-$lower"
#   - s31_delete_pod "$S31_NS" "ordinary-$lower"
#   - namespace "$S31_NS" (scenario_ns)
#   - kubectl delete netfilterpolicy "$S31_POLICY" --ignore-not-found
#   - set_failure_policy "$policy"
#   - "$REPO/e2e/local-cluster.sh" pod-network up

SCENARIO_TITLE="the gate without the pod network: the webhook on the node's network; routes to the pod ranges blackholed; under Ignore and Fail a compatible CNI repair pod is admitted and judged, the incident pod denied by nfguard's verdict, an ordinary pod created; look-ups and watches keep working"
SCENARIO_PROVIDERS="local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s31_gate_without_pod_network

# the gate
# holds while the pod network is down. Local provider only: the outage is
# made for real with `e2e/local-cluster.sh pod-network down` (the control
# plane's and the nodes' routes to the pod ranges become blackholes inside
# the cluster's own namespaces), restored by the clean-up also on failure.
#
# Premise: the webhook serves on the node's network (the install's default,
# docs/install.md "Which network the gate needs"): the Service's endpoints
# are node addresses. Proof of the outage: the API server's proxy to the
# controller's pod (on the pod network) fails, where it answered before.
# Then, under failurePolicy Ignore and again under Fail:
#   - a compatible CNI repair pod (iptables 1.8.11 with the wrapper,
#     hostNetwork + NET_ADMIN) in kube-system is admitted and judged: the API
#     server's call to nfguard succeeded (its admission count rose, its
#     fail-open count did not) and its audit event carries nfguard's verdict
#     and the digest it judged;
#   - the incident pod (iptables-nft 1.8.7) on the node whose rules need a
#     newer reader is denied by nfguard's verdict ([OldReaderNewRules]), not
#     "failed calling webhook", not admitted unjudged;
#   - an ordinary pod is created.
# Each round names its images by a tag pushed just before (never looked up
# before), so the verdicts need registry look-ups during the outage; and the
# scenario's NetfilterPolicy is switched from Deny to Warn during the outage:
# the incident pod is then admitted with the [OldReaderNewRules] warning, so
# the webhook's watches still see changes.

S31_NS=nfguard-e2e-s31
S31_POLICY=nfguard-e2e-s31
S31_HOOK=validate.nfguard.io

s31_pod() { # NAME IMAGE NODE [ordinary]
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  nodeName: $3
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
YAML
  if [ "${4:-}" = ordinary ]; then
    printf '  containers: [{name: app, image: %s, command: ["sleep", "infinity"]}]\n' "$2"
    return
  fi
  cat <<YAML
  hostNetwork: true
  containers:
    - name: cni
      image: $2
      command: ["sleep", "infinity"]
      securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}

# A tag of REPO:TAG the webhook has never looked up: copied in the registry
# (as this machine reaches it) under a fresh name; prints the pull name.
s31_fresh_tag() { # REPO TAG SUFFIX
  local fresh="$2-s31-$3-$RANDOM"
  skopeo copy --quiet --src-tls-verify=false --dest-tls-verify=false \
    "docker://$S31_PUSH/$1:$2" "docker://$S31_PUSH/$1:$fresh" >&2 ||
    fail "cannot copy $1:$2 to $1:$fresh in the registry at $S31_PUSH"
  echo "$REGISTRY/$1:$fresh"
}

# The API server's own count of calls to nfguard's webhook ("ok fail-open").
s31_apiserver_calls() {
  local metrics
  metrics=$(kubectl get --raw /metrics) || { echo "unreadable"; return 0; }
  awk -v n="name=\"$S31_HOOK\"" '
    /^apiserver_admission_webhook_admission_duration_seconds_count\{/ && index($0, n) && /rejected="false"/ { ok += $NF }
    /^apiserver_admission_webhook_fail_open_count\{/ && index($0, n) { open += $NF }
    END { print ok + 0, open + 0 }' <<<"$metrics"
}

# The API server reaches no pod: its proxy to the controller's pod fails.
s31_pods_unreachable() {
  local out
  if out=$(kubectl --request-timeout=5s get --raw "/api/v1/namespaces/$NS/pods/$S31_CONTROLLER:9090/proxy/healthz" 2>&1); then
    WHY="the API server still reaches pod $S31_CONTROLLER: $out"
    return 1
  fi
}

s31_delete_pod() { # NS NAME
  kubectl -n "$1" delete pod "$2" --ignore-not-found --grace-period=0 --force >/dev/null 2>&1
}

s31_policy_action() { # ACTION
  kubectl patch netfilterpolicy "$S31_POLICY" --type=merge -p "{\"spec\":{\"action\":\"$1\"}}" >/dev/null
}

# Incident pod NAME, probed by a server dry-run, is warned (not denied).
s31_warned() { # NAME IMAGE
  local out
  out=$(s31_pod "$1" "$2" "$RULES_NODE" | kubectl -n "$S31_NS" create --dry-run=server -f - 2>&1) || {
    WHY="still refused: $out"
    return 1
  }
  WHY="admitted without the [OldReaderNewRules] warning: $out"
  grep -qF '[OldReaderNewRules]' <<<"$out"
}

s31_round() { # FAILURE_POLICY
  local policy=$1 lower compatible incident before after out calls_before open_before calls open
  lower=$(tr '[:upper:]' '[:lower:]' <<<"$policy")
  set_failure_policy "$policy"
  compatible=$(s31_fresh_tag nfguard-e2e/compatible 1.8.11-wrapper "$lower")
  incident=$(s31_fresh_tag nfguard-e2e/incident 1.8.7-nft "$lower")

  # The CNI's repair: admitted and judged.
  read -r calls_before open_before <<<"$(s31_apiserver_calls)"
  [ "$calls_before" != unreadable ] || fail "the API server's /metrics is not readable"
  defer s31_delete_pod kube-system "cni-repair-$lower"
  out=$(s31_pod "cni-repair-$lower" "$compatible" "$RULES_NODE" | kubectl -n kube-system create -f - 2>&1) ||
    fail "failurePolicy $policy, pod network down: the compatible CNI repair pod was refused: $out"
  read -r calls open <<<"$(s31_apiserver_calls)"
  [ "$calls" -gt "$calls_before" ] ||
    fail "the API server counted no successful call to $S31_HOOK for the repair pod ($calls_before -> $calls)"
  [ "$open" = "$open_before" ] ||
    fail "the API server failed open on $S31_HOOK ($open_before -> $open): the repair pod was admitted unjudged"
  audit_checked pods kube-system "cni-repair-$lower" allow "$compatible"
  ok "failurePolicy $policy, pod network down: the compatible CNI repair pod ($compatible) in kube-system is admitted and judged (API server calls to $S31_HOOK $calls_before -> $calls, fail-open $open_before -> $open; nfguard's verdict and digest in the audit log)"

  # The incident: nfguard's verdict, from a look-up made now.
  if out=$(s31_pod "incident-$lower" "$incident" "$RULES_NODE" | kubectl -n "$S31_NS" create -f - 2>&1); then
    fail "failurePolicy $policy, pod network down: the incident pod was admitted: $out"
  fi
  grep -qF "admission webhook \"$S31_HOOK\" denied the request" <<<"$out" ||
    fail "failurePolicy $policy, pod network down: the incident pod was refused, but not by nfguard's verdict: $out"
  grep -qF '[OldReaderNewRules]' <<<"$out" ||
    fail "the denial has no [OldReaderNewRules] (was $incident looked up?): $out"
  names_node "$(reason_part "$out" OldReaderNewRules)" "$RULES_NODE" ||
    fail "the denial does not name $RULES_NODE: $out"
  audit_checked pods "$S31_NS" "incident-$lower" deny "$incident"
  ok "failurePolicy $policy, pod network down: the incident pod ($incident) is denied by nfguard's verdict: $(reason_part "$out" OldReaderNewRules)"

  # Ordinary pods are never the gate's.
  defer s31_delete_pod "$S31_NS" "ordinary-$lower"
  out=$(s31_pod "ordinary-$lower" "$IMG_COMPATIBLE" "$RULES_NODE" ordinary | kubectl -n "$S31_NS" create -f - 2>&1) ||
    fail "failurePolicy $policy, pod network down: an ordinary pod was refused: $out"
  ok "failurePolicy $policy, pod network down: an ordinary pod is created ($out)"
}

s31_gate_without_pod_network() {
  local hostnet endpoints ip out policy incident
  S31_PUSH=${NFGUARD_E2E_REGISTRY:?the local cluster exports NFGUARD_E2E_REGISTRY (the registry as this machine reaches it)}
  new_rules_node

  # ---- (a) the premise: the gate is on the node's network.
  hostnet=$(get deployment nfguard-webhook '{.spec.template.spec.hostNetwork}' -n "$NS")
  [ "$hostnet" = true ] || fail "the webhook is not on the node's network (hostNetwork '$hostnet'), the install's default"
  endpoints=$(kubectl -n "$NS" get endpointslices -l kubernetes.io/service-name=nfguard-webhook \
    -o jsonpath='{range .items[*].endpoints[*]}{.addresses[0]}{"\n"}{end}')
  [ -n "$endpoints" ] || fail "the Service nfguard-webhook has no endpoints"
  for ip in $endpoints; do
    [[ "$ip" != 10.88.* ]] || fail "endpoint $ip of nfguard-webhook is a pod address"
    grep -qxF "$ip" <<<"$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')" ||
      fail "endpoint $ip of nfguard-webhook is not a node address"
  done
  ok "the webhook serves on the node's network: endpoints $(tr '\n' ' ' <<<"$endpoints")are node addresses"
  S31_CONTROLLER=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=controller \
    --field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}')
  [ -n "$S31_CONTROLLER" ] || fail "no running controller pod"
  out=$(kubectl --request-timeout=10s get --raw "/api/v1/namespaces/$NS/pods/$S31_CONTROLLER:9090/proxy/healthz" 2>&1) ||
    fail "before the outage the API server cannot reach pod $S31_CONTROLLER: $out"
  ok "before the outage the API server reaches pod $S31_CONTROLLER ($(get pod "$S31_CONTROLLER" '{.status.podIP}' -n "$NS")): $out"

  scenario_ns "$S31_NS"
  defer kubectl delete netfilterpolicy "$S31_POLICY" --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: $S31_POLICY, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Deny
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $S31_NS}}
YAML
  keep_out_of_namespace "$S31_NS" "$S31_POLICY"
  policy=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].failurePolicy}')
  defer set_failure_policy "$policy"

  # ---- (b) the outage, for real.
  defer "$REPO/e2e/local-cluster.sh" pod-network up
  # Prometheus (in the control plane's namespace) loses the pod targets.
  caused_alert NfguardTargetDown
  "$REPO/e2e/local-cluster.sh" pod-network down
  wait_for 30 "the API server to lose the pod network" s31_pods_unreachable
  ok "pod network down: the API server's proxy to pod $S31_CONTROLLER fails"
  on_dump ip -n nfguard-e2e-cp route show

  # ---- (c) both failure policies.
  s31_round Ignore
  s31_round Fail

  # ---- (d) the webhook's watches still work: a policy change reaches it.
  incident=$(s31_fresh_tag nfguard-e2e/incident 1.8.7-nft watch)
  s31_policy_action Warn
  wait_for 60 "the webhook to see $S31_POLICY turn Warn" s31_warned incident-warned "$incident"
  ok "pod network down: $S31_POLICY switched to Warn reaches the webhook in ${WAITED} s (the incident pod is warned [OldReaderNewRules], not denied)"

  "$REPO/e2e/local-cluster.sh" pod-network up
  wait_for 60 "the API server to reach pod $S31_CONTROLLER again" kubectl --request-timeout=5s get --raw \
    "/api/v1/namespaces/$NS/pods/$S31_CONTROLLER:9090/proxy/healthz"
  ok "pod network restored"
}
