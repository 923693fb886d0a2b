# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 5: restarting the reporter keeps every profile.
#
# a reporter restart keeps every profile (same uid), fresh heartbeats follow
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes: nothing to undo (it changes nothing it leaves).

SCENARIO_TITLE="restarting the reporter keeps every profile"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s5_reporter_restart

declare -A S5_UID=() S5_PROBE=()
s5_fresh_heartbeats() {
  local n t
  for n in "${NODES[@]}"; do
    [ "$(nnp "$n" '{.metadata.uid}')" = "${S5_UID[$n]}" ] || { WHY="$n: profile uid changed"; return 1; }
    t=$(nnp "$n" '{.status.lastProbeTime}')
    [ "$(epoch "$t")" -gt "$(epoch "${S5_PROBE[$n]}")" ] || { WHY="$n: lastProbeTime still $t"; return 1; }
  done
}

s5_reporter_restart() {
  local n pods_before pods_after
  for n in "${NODES[@]}"; do
    S5_UID[$n]=$(nnp "$n" '{.metadata.uid}')
    S5_PROBE[$n]=$(nnp "$n" '{.status.lastProbeTime}')
    [ -n "${S5_UID[$n]}" ] || fail "no profile for $n"
  done
  pods_before=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter -o jsonpath='{.items[*].metadata.uid}')
  # The heartbeat is stamped with whole seconds: make sure a new one differs.
  sleep 1
  kubectl -n "$NS" rollout restart daemonset/nfguard-reporter >/dev/null
  kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=240s >/dev/null
  pods_after=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter -o jsonpath='{.items[*].metadata.uid}')
  for n in $pods_after; do
    if [[ " $pods_before " == *" $n "* ]]; then fail "reporter pod $n survived the restart"; fi
  done
  ok "every reporter pod was replaced"
  wait_for 120 "the same profiles with fresh heartbeats" s5_fresh_heartbeats
  for n in "${NODES[@]}"; do
    ok "$n: profile uid ${S5_UID[$n]} kept; lastProbeTime ${S5_PROBE[$n]} -> $(nnp "$n" '{.status.lastProbeTime}')"
  done
}
