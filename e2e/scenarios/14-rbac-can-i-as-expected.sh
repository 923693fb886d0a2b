# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 14: RBAC: kubectl auth can-i --list of each ServiceAccount equals e2e/rbac-expected/.
#
# `kubectl auth can-i --list` of each ServiceAccount's token equals
# e2e/rbac-expected/<sa>.txt (NFGUARD_E2E_UPDATE_RBAC=1 rewrites them)
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes: nothing to undo (it changes nothing it leaves).

SCENARIO_TITLE="RBAC: kubectl auth can-i --list of each ServiceAccount equals e2e/rbac-expected/"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s14_rbac_can_i

RBAC_EXPECTED=$REPO/e2e/rbac-expected
# s14_can_i SA: `kubectl auth can-i --list` of SA's own token, in the
# default namespace and in nfguard's, one normalized rule a line.
s14_can_i() {
  local kc ns out rc=0
  kc=$(mktemp)
  token_kubeconfig "$kc" "$(kubectl -n "$NS" create token "$1" --duration=10m)"
  for ns in default "$NS"; do
    out=$(kubectl --kubeconfig "$kc" auth can-i --list -n "$ns" 2>&1) || { rc=1; printf '%s\n' "$out"; break; }
    echo "== namespace $ns"
    tail -n +2 <<<"$out" | tr -s ' ' | sed 's/ *$//' | LC_ALL=C sort
  done
  rm -f "$kc"
  return "$rc"
}

s14_rbac_can_i() {
  local sa got file out
  for sa in nfguard-reporter nfguard-controller nfguard-webhook; do
    file=$RBAC_EXPECTED/$sa.txt
    got=$(s14_can_i "$sa") || fail "kubectl auth can-i --list as $sa failed: $got"
    if [ "${NFGUARD_E2E_UPDATE_RBAC:-}" = 1 ]; then
      mkdir -p "$RBAC_EXPECTED"
      printf '%s\n' "$got" >"$file"
      say "NFGUARD_E2E_UPDATE_RBAC=1: wrote $file"
      continue
    fi
    [ -f "$file" ] || fail "no $file (NFGUARD_E2E_UPDATE_RBAC=1 writes it)"
    if ! out=$(diff -u "$file" <(printf '%s\n' "$got")); then
      fail "$sa may do other things than $file says (- expected, + live):"$'\n'"$out"
    fi
    ok "$sa: kubectl auth can-i --list equals e2e/rbac-expected/$sa.txt ($(grep -vc '^==' "$file") rules)"
  done
}
