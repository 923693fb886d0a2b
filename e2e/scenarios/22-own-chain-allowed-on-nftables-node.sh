# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 22: the node without iptables: an iptables-nft 1.8.7 writer of its own chain pinned to it is admitted and adds that chain in table ip filter, the only table beside kube-proxy's.
#
# an iptables-nft 1.8.7 hostNetwork + NET_ADMIN writer that only adds a
# chain of its own, pinned to that node, is admitted (no iptables-owned
# rule there needs a newer reader) and writes its chain
#
# Runs on: kind, local. Needs: nftables-node.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)
#   - s22_drop_table
#   - kubectl -n "$ns" delete pod own-rules --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s

SCENARIO_TITLE="the node without iptables: an iptables-nft 1.8.7 writer of its own chain pinned to it is admitted and adds that chain in table ip filter, the only table beside kube-proxy's"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS="nftables-node"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s22_own_rules_allowed

# Expected verdict: allowed. The minimum reader is computed over
# iptables-owned rules only, and the node has none: kube-proxy's rules are
# in its native table ip kube-proxy, which iptables-nft never lists (its
# save and restore read and write only the tables filter, nat, mangle, raw
# and security), so a 1.8.7 reader cannot mangle them; and the image's
# backend (nft) is the node's. The pod adds a chain of its own, jumped to
# from nowhere, and nothing else.
S22_CHAIN=NFGUARD-E2E-OWN
s22_written() {
  local t
  t=$(node_exec "$NFT_NODE" nft list table ip filter 2>&1) || { WHY="no table ip filter: $t"; return 1; }
  WHY="table ip filter: $(tr '\n' ' ' <<<"$t")"
  grep -qF "chain $S22_CHAIN {" <<<"$t" && grep -qE 'ip saddr 127\.0\.0\.2 .*return' <<<"$t"
}
s22_drop_table() { # the table the pod's iptables-nft made (the node had none)
  node_exec "$NFT_NODE" nft delete table ip filter 2>/dev/null || true
}

s22_own_rules_allowed() {
  local ns=nfguard-e2e-s22 out tables code
  nftables_node
  tables=$(node_exec "$NFT_NODE" nft list tables)
  if grep -qxF 'table ip filter' <<<"$tables"; then
    fail "$NFT_NODE already has table ip filter: the scenario could not remove what it adds"
  fi
  scenario_ns "$ns"
  defer s22_drop_table
  defer kubectl -n "$ns" delete pod own-rules --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
  out=$(incident_pod own-rules "$NFT_NODE" '{}' \
    "[\"sh\", \"-c\", \"iptables-nft -N $S22_CHAIN && iptables-nft -A $S22_CHAIN -s 127.0.0.2/32 -j RETURN && echo written; sleep infinity\"]" |
    kubectl -n "$ns" create -f - 2>&1) ||
    fail "the iptables-nft 1.8.7 writer of its own rules was denied on $NFT_NODE: $out"
  for code in OldReaderNewRules BackendMismatch; do
    if grep -qF "[$code]" <<<"$out"; then fail "admitted, but with a [$code] warning: $out"; fi
  done
  ok "the iptables-nft 1.8.7 hostNetwork + NET_ADMIN pod pinned to $NFT_NODE is admitted: $out"
  audit_checked pods "$ns" own-rules allow "$IMG_INCIDENT"
  kubectl -n "$ns" wait --for=condition=Ready pod/own-rules --timeout=120s >/dev/null || fail "pod own-rules is not Ready"
  wait_for 60 "iptables-nft 1.8.7's chain $S22_CHAIN in $NFT_NODE's table ip filter" s22_written
  out=$(node_exec "$NFT_NODE" nft list tables)
  [ "$(sort <<<"$out")" = "$(printf '%s\ntable ip filter\n' "$tables" | sort)" ] ||
    fail "the tables of $NFT_NODE went from '$(tr '\n' ' ' <<<"$tables")' to '$(tr '\n' ' ' <<<"$out")'"
  ok "it wrote its own chain in table ip filter, the only table added beside kube-proxy's:"
  node_exec "$NFT_NODE" nft list table ip filter | show
}
