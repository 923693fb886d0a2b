# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 10: a Taint policy selecting namespaces by label; an invalid policy is shown and ignored.
#
# an `action: Taint` policy selecting namespaces labelled team=net: a
# hostNetwork + NET_ADMIN pod with iptables-nft 1.8.7 in such a namespace
# is admitted with nfguard's warning and its node gets
# nfguard.io/iptables-incompatible:NoSchedule; relabelling the namespace
# team=web removes the taint. An invalid policy beside it (bad
# exemptImages glob) gets Valid=False naming the field, and admission
# judges with the valid policy, warning that it ignored the invalid one
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - kubectl delete netfilterpolicy nfguard-e2e-team-net nfguard-e2e-broken --ignore-not-found
#   - namespace "$ns" (scenario_ns)
#   - kubectl -n "$ns" delete pod router --ignore-not-found --grace-period=0 --force --wait=false

SCENARIO_TITLE="a Taint policy selecting namespaces by label; an invalid policy is shown and ignored"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s10_namespace_selector

# The pod the webhook judges: hostNetwork + NET_ADMIN with iptables-nft
# 1.8.7, on node $S10_NODE only.
s10_pod() { # NAME
  pod_yaml "$1" "$IMG_INCIDENT" | sed "s/^spec:$/spec:\n  nodeName: $S10_NODE/"
}
S10_NODE=""
S10_OUT=""
s10_warned() { # NS: a server dry-run shows both warnings (the webhook's reflectors caught up)
  S10_OUT=$(s10_pod probe | kubectl -n "$1" create --dry-run=server -f - 2>&1) || {
    WHY="the dry-run was refused: $S10_OUT"
    return 1
  }
  WHY="the dry-run was admitted without both warnings: $S10_OUT"
  grep -qF '[OldReaderNewRules]' <<<"$S10_OUT" && grep -qF '[InvalidPolicyIgnored]' <<<"$S10_OUT"
}
s10_tainted() { node_taint "$S10_NODE" 'nfguard.io/iptables-incompatible=:NoSchedule' "$1"; } # YES|NO

s10_namespace_selector() {
  local ns=nfguard-e2e-s10 out message
  new_rules_node
  S10_NODE=$RULES_NODE
  say "the node: $S10_NODE (minReaderVersion $(nnp "$S10_NODE" '{.status.minReaderVersion}'))"

  defer kubectl delete netfilterpolicy nfguard-e2e-team-net nfguard-e2e-broken --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-team-net, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Taint
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: {team: net}}
  maxTaintedNodesPercent: 100
---
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-broken, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Warn
  namespaceSelector: {matchLabels: {team: net}}
  exemptImages: ["a["]
YAML
  lift_brake nfguard-e2e-team-net
  keep_out_of_namespace "$ns" nfguard-e2e-team-net nfguard-e2e-broken
  on_dump kubectl get netfilterpolicies -o wide

  # The invalid policy is shown, the valid one accepted.
  wait_for 60 "nfguard-e2e-broken to be Valid=False (InvalidExemptImages)" policy_is nfguard-e2e-broken False InvalidExemptImages
  message=$(policy_condition nfguard-e2e-broken Valid message)
  grep -qF 'exemptImages[0] "a["' <<<"$message" || fail "Valid=False does not name the field and pattern: $message"
  [ "$(policy_condition nfguard-e2e-broken Accepted status)" = False ] ||
    fail "nfguard-e2e-broken is invalid but Accepted=$(policy_condition nfguard-e2e-broken Accepted status)"
  ok "nfguard-e2e-broken: Valid=False, reason InvalidExemptImages: $message"
  wait_for 60 "nfguard-e2e-team-net to be Valid=True" policy_is nfguard-e2e-team-net True
  ok "nfguard-e2e-team-net: Valid=True, Accepted=$(policy_condition nfguard-e2e-team-net Accepted status)"

  scenario_ns "$ns"
  kubectl label namespace "$ns" team=net >/dev/null
  wait_for 60 "the webhook to judge namespace $ns (team=net) with both policies" s10_warned "$ns"
  defer kubectl -n "$ns" delete pod router --ignore-not-found --grace-period=0 --force --wait=false
  out=$(s10_pod router | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the pod was denied in a team=net namespace under action: Taint: $out"
  [ -n "$(reason_part "$out" OldReaderNewRules)" ] ||
    fail "admitted without nfguard's [OldReaderNewRules] warning: $out"
  grep -qF 'NetfilterPolicy nfguard-e2e-broken: exemptImages[0] "a["' <<<"$(reason_part "$out" InvalidPolicyIgnored)" ||
    fail "the admission does not name the ignored policy and its field: $out"
  ok "admitted under action: Taint with nfguard's warnings (judged with nfguard-e2e-team-net, nfguard-e2e-broken ignored and named):"
  show <<<"$out"

  wait_for 120 "pod router to run on $S10_NODE" pod_running "$ns" router
  wait_for 120 "the controller to taint $S10_NODE nfguard.io/iptables-incompatible:NoSchedule" s10_tainted YES
  ok "$S10_NODE tainted after ${WAITED} s: $(nfguard_taints "$S10_NODE" | tr '\n' ' ')"

  kubectl label namespace "$ns" team=web --overwrite >/dev/null
  wait_for 120 "the taint on $S10_NODE to go once $ns is relabelled team=web" s10_tainted NO
  ok "namespace relabelled team=web: no policy selects it any more, taint removed after ${WAITED} s"
}
