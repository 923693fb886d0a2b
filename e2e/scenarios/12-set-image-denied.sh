# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 12: kubectl set image swapping iptables-nft 1.8.7 into a running hostNetwork + NET_ADMIN pod is denied.
#
# `kubectl set image` swapping iptables-nft 1.8.7 into a running
# hostNetwork + NET_ADMIN pod is denied; relabelling the pod is not judged,
# shown with a pod nfguard would deny now (admitted while an exemption
# counted, then relabelled once it no longer does)
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)
#   - kubectl -n "$ns" delete pod router --ignore-not-found --grace-period=0 --force --wait=false
#   - kubectl delete netfilterpolicy nfguard-e2e-s12 --ignore-not-found
#   - namespace nfguard-e2e-s12-exempt (scenario_ns) and its pod exempt-router

SCENARIO_TITLE="kubectl set image swapping iptables-nft 1.8.7 into a running hostNetwork + NET_ADMIN pod is denied"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s12_set_image

s12_set_image() {
  local ns=nfguard-e2e-s12 node out part img
  new_rules_node
  node=$RULES_NODE
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete pod router --ignore-not-found --grace-period=0 --force --wait=false
  out=$(pod_yaml router "$IMG_COMPATIBLE" | sed "s/^spec:$/spec:\n  nodeName: $node/" | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the compatible hostNetwork + NET_ADMIN pod was refused on $node: $out"
  wait_for 120 "pod router to run on $node" pod_running "$ns" router
  ok "pod router (iptables 1.8.11, hostNetwork + NET_ADMIN) runs on $node"

  if out=$(kubectl -n "$ns" set image pod/router cni="$IMG_INCIDENT" 2>&1); then
    fail "kubectl set image swapped iptables-nft 1.8.7 into the running pod: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the image swap failed, but not by nfguard's webhook: $out"
  grep -qF "nfguard denied Pod/$ns/router" <<<"$out" || fail "the denial is not nfguard's: $out"
  part=$(reason_part "$out" OldReaderNewRules)
  names_node "$part" "$node" || fail "the denial does not name node $node as [OldReaderNewRules]: $out"
  img=$(get pod router '{.spec.containers[0].image}' -n "$ns")
  [ "$img" = "$IMG_COMPATIBLE" ] || fail "the pod's image is now $img"
  ok "kubectl set image pod/router cni=<iptables-nft 1.8.7> denied; the pod still runs $img:"
  show <<<"$out"
  out=$(kubectl -n "$ns" label pod router tier=net 2>&1) || fail "relabelling the pod was refused: $out"
  ok "relabelling the same pod is admitted (no image changed): $out"
  s12_relabel_not_judged "$node"
}

# A relabelling that nfguard would deny if it judged it: the incident pod,
# admitted while its namespace let nfguard.io/exempt count, is relabelled
# once the exemption no longer counts (a create of the same pod is denied).
s12_relabel_not_judged() { # NODE
  local ns=nfguard-e2e-s12-exempt out
  S12_NODE=$1
  e2e_policy nfguard-e2e-s12 Deny "{kubernetes.io/metadata.name: $ns}" "{nfguard.io/exemptions: allowed}"
  scenario_ns "$ns"
  kubectl label namespace "$ns" nfguard.io/exemptions=allowed >/dev/null
  wait_for 60 "the webhook to honour nfguard.io/exempt in $ns" exempt_honoured "$ns" s12_pod
  defer kubectl -n "$ns" delete pod exempt-router --ignore-not-found --grace-period=0 --force --wait=false
  out=$(s12_pod exempt-router | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the exempt incident pod was refused in $ns: $out"
  ok "the incident pod exempt-router (iptables-nft 1.8.7) is admitted by exemption in $ns"
  kubectl label namespace "$ns" nfguard.io/exemptions- >/dev/null
  wait_for 60 "a create of the same pod in $ns to be denied (the exemption no longer counts)" s12_denied "$ns"
  ok "the exemption no longer counts in $ns: the same pod is denied now (server dry-run)"
  out=$(kubectl -n "$ns" label pod exempt-router tier=net 2>&1) ||
    fail "relabelling exempt-router was refused (a relabelling was judged): $out"
  ok "relabelling exempt-router is admitted although nfguard would deny the pod now: not judged ($out)"
}
S12_NODE=""
s12_pod() { # NAME
  incident_pod "$1" "$S12_NODE" '{nfguard.io/exempt: "e2e: scenario 12"}' '["sleep", "infinity"]'
}
s12_denied() { # NS
  local out
  if out=$(s12_pod probe | kubectl -n "$1" create --dry-run=server -f - 2>&1); then
    WHY="still admitted: $out"
    return 1
  fi
  WHY="refused, but not by nfguard: $out"
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out"
}
