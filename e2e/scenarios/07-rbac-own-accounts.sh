# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 7: RBAC: own ServiceAccounts; a reporter cannot write another node's profile.
#
# every component under its own ServiceAccount without Forbidden errors;
# a reporter token bound to node A cannot write node B's profile
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes: nothing to undo (it changes nothing it leaves).

SCENARIO_TITLE="RBAC: own ServiceAccounts; a reporter cannot write another node's profile"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s7_rbac

s7_rbac() {
  local c pod sa restarts logs a b pod_a kc who val other out applied
  for c in reporter controller webhook; do
    while read -r pod sa restarts; do
      [ -n "$pod" ] || continue
      [ "$sa" = "nfguard-$c" ] || fail "pod $pod runs as ServiceAccount '$sa', not nfguard-$c"
      logs=$(kubectl -n "$NS" logs "$pod" --all-containers 2>&1)
      if [ "${restarts:-0}" != 0 ]; then
        logs+=$'\n'$(kubectl -n "$NS" logs "$pod" --all-containers --previous 2>&1 || true)
      fi
      if grep -i 'forbidden' <<<"$logs" >/dev/null; then
        fail "pod $pod logged Forbidden errors: $(grep -i forbidden <<<"$logs" | sed -n 1,5p)"
      fi
      ok "$pod runs as ServiceAccount $sa; its log has no Forbidden"
    done < <(kubectl -n "$NS" get pods -l "app.kubernetes.io/component=$c" \
      -o jsonpath='{range .items[*]}{.metadata.name} {.spec.serviceAccountName} {.status.containerStatuses[0].restartCount}{"\n"}{end}')
    [ -n "$(kubectl -n "$NS" get pods -l "app.kubernetes.io/component=$c" -o name)" ] || fail "no $c pod"
  done

  a=${NODES[0]}
  b=${NODES[1]}
  reporter_kubeconfig "$a"
  read -r kc pod_a <<<"$REPORTER"
  who=$(kubectl --kubeconfig "$kc" auth whoami \
    -o jsonpath='{.status.userInfo.username} {.status.userInfo.extra.authentication\.kubernetes\.io/node-name[0]}')
  [ "$who" = "system:serviceaccount:$NS:nfguard-reporter $a" ] ||
    fail "the token bound to $pod_a should authenticate as nfguard-reporter on node $a, got: $who"
  ok "a token bound to reporter pod $pod_a authenticates as $who (node-name claim)"

  val=$(nnp "$b" '{.status.probeIntervalSeconds}')
  [ -n "$val" ] || fail "profile $b has no probeIntervalSeconds to patch"
  other=$((val + 1))
  if out=$(as_token "$kc" PATCH "/$b/status?dryRun=All" "$MERGE" "{\"status\":{\"probeIntervalSeconds\":$other}}"); then
    fail "node $a's reporter token may patch node $b's profile status: $out"
  fi
  s7_refused "$out" "$b" "merge patch of $b's status"
  if out=$(as_token "$kc" PATCH "/$b/status" "$MERGE" "{\"status\":{\"probeIntervalSeconds\":$val}}"); then
    fail "node $a's reporter token may patch node $b's profile status (unchanged value): $out"
  fi
  s7_refused "$out" "$b" "merge patch (unchanged value, not dry-run) of $b's status"
  applied="apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: $b}
status: {probeIntervalSeconds: $other}"
  # As the reporter itself would apply it (its field manager, taking the fields over).
  if out=$(as_token "$kc" PATCH "/$b/status?fieldManager=nfguard-reporter&force=true&dryRun=All" \
    application/apply-patch+yaml "$applied"); then
    fail "node $a's reporter token may server-side apply node $b's profile status: $out"
  fi
  s7_refused "$out" "$b" "server-side apply of $b's status"

  val=$(nnp "$a" '{.status.probeIntervalSeconds}')
  other=$((val + 1))
  out=$(as_token "$kc" PATCH "/$a/status?dryRun=All" "$MERGE" "{\"status\":{\"probeIntervalSeconds\":$other}}") ||
    fail "the reporter token of node $a may not patch its own profile's status: $out"
  ok "the same token may patch $a's own profile status (server dry-run): $out"
  out=$(as_token "$kc" PATCH "/$a/status" "$MERGE" "{\"status\":{\"probeIntervalSeconds\":$val}}") ||
    fail "the reporter token of node $a may not patch its own profile's status (unchanged value): $out"
  ok "the same token may patch $a's own profile status (unchanged value): $out"
}

s7_refused() { # OUTPUT NODE WHAT
  grep -qF "ValidatingAdmissionPolicy 'nfguard-reporter-own-node'" <<<"$1" ||
    fail "$3 was refused, but not by the ValidatingAdmissionPolicy nfguard-reporter-own-node: $1"
  grep -qF "the nfguard reporter may write only the NodeNetfilterProfile named after its own node, not $2" <<<"$1" ||
    fail "$3 was refused without the policy's message: $1"
  ok "$3 refused: $1"
}
