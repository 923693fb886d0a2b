# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 17: a controller token may write only nfguard.io/ labels and NoSchedule taints of a Node; the controller's own writes pass.
#
# a token bound to the controller's pod is refused, for real, by the
# ValidatingAdmissionPolicy nfguard-controller-node-writes: a label that
# is not nfguard's, a kubelet label removed, another taint changed or
# removed, a NoExecute nfguard.io/ taint, spec.unschedulable, an
# annotation; its server-side apply of an nfguard.io/ label, the label's
# removal and a NoSchedule nfguard.io/ taint land, and the controller
# removes that taint itself
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - rm -f "$kc"
#   - s17_cleanup
#   - rm -f "$answer"

SCENARIO_TITLE="a controller token may write only nfguard.io/ labels and NoSchedule taints of a Node; the controller's own writes pass"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s17_controller_node_writes

NODES_API=/api/v1/nodes
S17_NODE=""
S17_VAP="ValidatingAdmissionPolicy 'nfguard-controller-node-writes'"
s17_refused() { # KUBECONFIG WHAT TEXT BODY: a merge patch of S17_NODE with BODY is refused with TEXT
  local out
  if out=$(api_as_token "$1" PATCH "$NODES_API/$S17_NODE" "$MERGE" "$4"); then
    fail "the controller's token could $2: $out"
  fi
  grep -qF "$S17_VAP" <<<"$out" || fail "$2 was refused, but not by the $S17_VAP: $out"
  grep -qF "$3" <<<"$out" || fail "$2 was refused without the policy's message '$3': $out"
  ok "$2: refused: $out"
}
# What the policy protects on S17_NODE, in one line per part.
s17_guarded() {
  kubectl get node "$S17_NODE" -o jsonpath='{.metadata.annotations}{"\n"}{.spec.unschedulable}{"\n"}{.spec.taints}{"\n"}{.spec.podCIDR}{"\n"}' &&
    kubectl get node "$S17_NODE" -o json | jq -c '.metadata.labels | with_entries(select(.key | startswith("nfguard.io/") | not))'
}
s17_probe_taint() { node_taint "$S17_NODE" 'nfguard.io/netfilter-degraded=E2EProbe:NoSchedule' "$1"; } # YES|NO
s17_cleanup() { # whatever a failed step may have left on S17_NODE
  kubectl label node "$S17_NODE" nfguard.io/e2e-probe- nfguard-e2e/foreign- >/dev/null 2>&1 || true
  kubectl annotate node "$S17_NODE" nfguard-e2e/s17- >/dev/null 2>&1 || true
  kubectl uncordon "$S17_NODE" >/dev/null 2>&1 || true
  kubectl taint node "$S17_NODE" nfguard.io/netfilter-degraded- >/dev/null 2>&1 || true
  kubectl taint node "$S17_NODE" nfguard-e2e/other- >/dev/null 2>&1 || true
}

s17_controller_node_writes() {
  local pod kc who since before after taints out logs answer
  S17_NODE=${NODES[0]}
  pod=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=controller -o jsonpath='{.items[0].metadata.name}')
  [ -n "$pod" ] || fail "no controller pod"
  kc=$(mktemp)
  defer rm -f "$kc"
  token_kubeconfig "$kc" "$(kubectl -n "$NS" create token nfguard-controller --bound-object-kind Pod \
    --bound-object-name "$pod" --duration=10m)"
  who=$(kubectl --kubeconfig "$kc" auth whoami -o jsonpath='{.status.userInfo.username}')
  [ "$who" = "system:serviceaccount:$NS:nfguard-controller" ] ||
    fail "the token bound to $pod should authenticate as nfguard-controller, got: $who"
  ok "a token bound to controller pod $pod authenticates as $who; node $S17_NODE; none of these writes is a dry run"
  since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  defer s17_cleanup
  # A taint of another component (its effect keeps pods where they are).
  kubectl taint node "$S17_NODE" nfguard-e2e/other=s17:PreferNoSchedule >/dev/null
  [ -n "$(get node "$S17_NODE" '{.metadata.labels.kubernetes\.io/hostname}')" ] ||
    fail "node $S17_NODE has no kubernetes.io/hostname label to remove"
  taints=$(kubectl get node "$S17_NODE" -o json | jq -c '.spec.taints')
  before=$(s17_guarded)

  s17_refused "$kc" "add the label nfguard-e2e/foreign" "may change only nfguard.io/ labels of Node $S17_NODE" \
    '{"metadata":{"labels":{"nfguard-e2e/foreign":"s17"}}}'
  s17_refused "$kc" "remove the kubelet's label kubernetes.io/hostname" "may change only nfguard.io/ labels of Node $S17_NODE" \
    '{"metadata":{"labels":{"kubernetes.io/hostname":null}}}'
  s17_refused "$kc" "change another component's taint (PreferNoSchedule -> NoExecute)" \
    "may change only nfguard.io/ taints of Node $S17_NODE" \
    "{\"spec\":{\"taints\":$(jq -c 'map(if .key == "nfguard-e2e/other" then .effect = "NoExecute" else . end)' <<<"$taints")}}"
  s17_refused "$kc" "remove another component's taint" "may change only nfguard.io/ taints of Node $S17_NODE" \
    "{\"spec\":{\"taints\":$(jq -c 'map(select(.key != "nfguard-e2e/other"))' <<<"$taints")}}"
  s17_refused "$kc" "set an nfguard.io/ taint with effect NoExecute" "may set only NoSchedule taints on Node $S17_NODE" \
    "{\"spec\":{\"taints\":$(jq -c '. + [{"key":"nfguard.io/netfilter-degraded","value":"E2EProbe","effect":"NoExecute"}]' <<<"$taints")}}"
  s17_refused "$kc" "mark the node unschedulable" "may not change spec fields of Node $S17_NODE other than nfguard.io/ taints" \
    '{"spec":{"unschedulable":true}}'
  s17_refused "$kc" "annotate the node" "may not change the annotations of Node $S17_NODE" \
    '{"metadata":{"annotations":{"nfguard-e2e/s17":"x"}}}'
  after=$(s17_guarded)
  [ "$after" = "$before" ] || fail "node $S17_NODE changed although every write was refused: before $before, after $after"
  ok "node $S17_NODE is as it was (labels other than nfguard.io/, annotations, spec.unschedulable, taints, podCIDR)"

  # The controller's own writes: a server-side apply of an nfguard.io/ label
  # under its field manager, its removal, and its NoSchedule taint.
  out=$(api_as_token "$kc" PATCH "$NODES_API/$S17_NODE?fieldManager=nfguard-controller" application/apply-patch+yaml \
    "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$S17_NODE\",\"labels\":{\"nfguard.io/e2e-probe\":\"s17\"}}}") ||
    fail "the controller's server-side apply of an nfguard.io/ label was refused: $out"
  [ "$(get node "$S17_NODE" '{.metadata.labels.nfguard\.io/e2e-probe}')" = s17 ] ||
    fail "the apply answered $out but the label nfguard.io/e2e-probe is not on $S17_NODE"
  ok "server-side apply (field manager nfguard-controller) of the label nfguard.io/e2e-probe=s17: $out"
  out=$(api_as_token "$kc" PATCH "$NODES_API/$S17_NODE" "$MERGE" '{"metadata":{"labels":{"nfguard.io/e2e-probe":null}}}') ||
    fail "the controller's removal of its nfguard.io/ label was refused: $out"
  [ -z "$(get node "$S17_NODE" '{.metadata.labels.nfguard\.io/e2e-probe}')" ] || fail "nfguard.io/e2e-probe is still on $S17_NODE"
  ok "its removal (merge patch): $out"
  answer=$(mktemp)
  defer rm -f "$answer"
  out=$(API_ANSWER=$answer api_as_token "$kc" PATCH "$NODES_API/$S17_NODE" "$MERGE" \
    "{\"metadata\":{\"resourceVersion\":\"$(get node "$S17_NODE" '{.metadata.resourceVersion}')\"},\"spec\":{\"taints\":$(kubectl get node "$S17_NODE" -o json | jq -c '.spec.taints + [{"key":"nfguard.io/netfilter-degraded","value":"E2EProbe","effect":"NoSchedule"}]')}}") ||
    fail "the controller's taint write was refused: $out"
  # The Node as written (the running controller may lift the taint at once).
  taints=$(jq -r '.spec.taints[] | "\(.key)=\(.value // ""):\(.effect)"' "$answer")
  grep -qxF 'nfguard.io/netfilter-degraded=E2EProbe:NoSchedule' <<<"$taints" ||
    fail "the taint write answered $out, but the Node it returned carries: $taints"
  ok "nfguard.io/netfilter-degraded=E2EProbe:NoSchedule set as the controller sets its taints (merge patch of spec.taints with a resourceVersion precondition): $out"
  # The controller itself sees a taint nothing asks for and removes it: its
  # own write goes through the policy too.
  wait_for 120 "the controller to remove the taint nothing asks for from $S17_NODE" s17_probe_taint NO
  ok "the controller removed it after ${WAITED} s: $(nfguard_taints "$S17_NODE" | tr '\n' ' ')"
  logs=$(kubectl -n "$NS" logs -l app.kubernetes.io/component=controller --since-time="$since" --tail=-1 2>&1)
  if grep -F 'nfguard-controller-node-writes' <<<"$logs" >/dev/null; then
    fail "the controller logged a refusal by its own policy: $(grep -F 'nfguard-controller-node-writes' <<<"$logs" | sed -n 1,3p)"
  fi
  ok "the controller's log since $since has no refusal by nfguard-controller-node-writes"
}
