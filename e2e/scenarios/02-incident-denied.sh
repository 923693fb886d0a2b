# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 2: the incident DaemonSet (iptables-nft 1.8.7) is denied.
#
# the incident DaemonSet (iptables-nft 1.8.7, hostNetwork + NET_ADMIN) is
# denied by the API server, with nfguard's reason naming node and rule
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)

SCENARIO_TITLE="the incident DaemonSet (iptables-nft 1.8.7) is denied"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s2_incident_denied

s2_incident_denied() {
  local ns=nfguard-e2e-s2 out part n mr named=0 legacy
  scenario_ns "$ns"
  incident_denied "$ns"
  out=$DENIAL
  grep -qF "nfguard denied DaemonSet/$ns/incident" <<<"$out" || fail "the denial is not nfguard's: $out"
  part=$(reason_part "$out" OldReaderNewRules)
  [ -n "$part" ] || fail "the denial has no [OldReaderNewRules] reason: $out"
  grep -qF 'iptables-nft 1.8.7 in the image cannot read native nftables expressions' <<<"$part" ||
    fail "the [OldReaderNewRules] reason does not name the image's iptables-nft 1.8.7: $part"
  for n in "${NODES[@]}"; do
    mr=$(nnp "$n" '{.status.minReaderVersion}')
    [ -n "$mr" ] || continue
    names_node "$part" "$n" || fail "node $n needs a reader >= $mr but the denial does not name it: $part"
    grep -qF "the node's live rules need a reader >= $mr" <<<"$part" ||
      fail "the denial does not give node $n's minimum reader $mr: $part"
    ok "the denial names node $n and its minimum reader $mr (native nftables expressions)"
    named=$((named + 1))
  done
  [ "$named" -ge 1 ] || fail "no node reports rules that need iptables >= 1.8.8 (status.minReaderVersion): nothing for the denial to name"
  for n in "${!EXPECT[@]}"; do
    [ "${EXPECT[$n]}" = legacy ] || continue
    legacy=$(reason_part "$out" BackendMismatch)
    names_node "$legacy" "$n" || fail "the nft image on the legacy node $n is not denied as [BackendMismatch]: $out"
    ok "the denial also names the legacy node $n: [BackendMismatch]"
  done
  if kubectl -n "$ns" get daemonset incident >/dev/null 2>&1; then
    fail "the DaemonSet incident exists after the denial"
  fi
  ok "the incident DaemonSet was denied by the API server:"
  show <<<"$out"
  audit_checked daemonsets "$ns" incident deny "$IMG_INCIDENT"
}
