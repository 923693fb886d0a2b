# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 21: the node without iptables: a legacy hostNetwork + NET_ADMIN writer pinned to it is denied as [BackendMismatch] naming it.
#
# a legacy hostNetwork + NET_ADMIN writer pinned to that node is denied
# as [BackendMismatch] naming it
#
# Runs on: kind, local. Needs: nftables-node.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)
#   - kubectl -n "$ns" delete pod legacy-writer --ignore-not-found --grace-period=0 --force --wait=false

SCENARIO_TITLE="the node without iptables: a legacy hostNetwork + NET_ADMIN writer pinned to it is denied as [BackendMismatch] naming it"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS="nftables-node"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s21_legacy_denied

s21_legacy_denied() {
  local ns=nfguard-e2e-s21 out part
  nftables_node
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete pod legacy-writer --ignore-not-found --grace-period=0 --force --wait=false
  if out=$(pod_yaml legacy-writer "$IMG_LEGACY" | sed "s/^spec:$/spec:\n  nodeName: $NFT_NODE/" |
    kubectl -n "$ns" create -f - 2>&1); then
    fail "the legacy hostNetwork + NET_ADMIN pod was admitted on $NFT_NODE: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the legacy pod failed, but not by nfguard's webhook: $out"
  part=$(reason_part "$out" BackendMismatch)
  [ -n "$part" ] || fail "the denial has no [BackendMismatch] reason: $out"
  names_node "$part" "$NFT_NODE" || fail "the [BackendMismatch] reason does not name $NFT_NODE: $part"
  grep -qF "image writes through iptables-legacy but the node's rules live in nft" <<<"$part" ||
    fail "the [BackendMismatch] reason does not say legacy image against nft rules: $part"
  if kubectl -n "$ns" get pod legacy-writer >/dev/null 2>&1; then fail "the pod legacy-writer exists after the denial"; fi
  ok "the legacy writer pinned to $NFT_NODE (whose rules live only in kube-proxy's native tables) is denied:"
  show <<<"$out"
}
