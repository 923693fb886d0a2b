# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 11: a reporter token of node A is refused for node B's profile, A's spec.nodeName and the controller's status fields; A's heartbeat advances.
#
# a token bound to node A's reporter pod is refused, for real (not a
# dry run): node B's profile, A's spec.nodeName set to B, and the
# controller's status.writers / newestWriterVersion; the reporter's own
# writes go on (A's heartbeat advances, the controller's fields intact)
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - kubectl patch nodenetfilterprofile "$a" --type=merge -p "{\"spec\":{\"nodeName\":\"$a\"}}"

SCENARIO_TITLE="a reporter token of node A is refused for node B's profile, A's spec.nodeName and the controller's status fields; A's heartbeat advances"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s11_node_identity

s11_refused() { # OUTPUT WHAT TEXT...: OUTPUT refuses WHAT and names every TEXT
  local out=$1 what=$2 t
  shift 2
  for t in "$@"; do
    grep -qF "$t" <<<"$out" || fail "$what was refused, but not with '$t': $out"
  done
  ok "$what refused: $out"
}
s11_probed_after() { # NODE EPOCH
  local t
  t=$(nnp "$1" '{.status.lastProbeTime}')
  WHY="lastProbeTime of $1 is ${t:-unset}"
  [ "$(epoch "$t")" -gt "$2" ]
}

s11_node_identity() {
  local a b pod_a kc out t0 start writers newest other interval logs
  local vap="ValidatingAdmissionPolicy 'nfguard-reporter-own-node'"
  start=$SECONDS
  a=${NODES[0]}
  b=${NODES[1]}
  reporter_kubeconfig "$a"
  read -r kc pod_a <<<"$REPORTER"
  writers=$(nnp "$a" '{.status.writers}')
  newest=$(nnp "$a" '{.status.newestWriterVersion}')
  interval=$(nnp "$a" '{.status.probeIntervalSeconds}')
  say "a token bound to reporter pod $pod_a (node $a); node B is $b; none of these writes is a dry run"

  # Node B's profile: its status, and creating it.
  if out=$(as_token "$kc" PATCH "/$b/status" "$MERGE" '{"status":{"lastProbeTime":"2001-01-01T00:00:00Z"}}'); then
    fail "node $a's reporter token wrote node $b's profile status: $out"
  fi
  s11_refused "$out" "writing node $b's status" "$vap" "named after its own node, not $b"
  if out=$(as_token "$kc" POST "" application/json \
    "{\"apiVersion\":\"nfguard.io/v1alpha1\",\"kind\":\"NodeNetfilterProfile\",\"metadata\":{\"name\":\"$b\"},\"spec\":{\"nodeName\":\"$b\"}}"); then
    fail "node $a's reporter token created node $b's profile: $out"
  fi
  s11_refused "$out" "creating a profile named $b" "$vap" "named after its own node, not $b"

  # Node A's own profile pointed at node B: RBAC (no patch on the object),
  # and the CRD for everyone (the admin too).
  defer kubectl patch nodenetfilterprofile "$a" --type=merge -p "{\"spec\":{\"nodeName\":\"$a\"}}"
  if out=$(as_token "$kc" PATCH "/$a" "$MERGE" "{\"spec\":{\"nodeName\":\"$b\"}}"); then
    fail "node $a's reporter token changed its profile's spec.nodeName to $b: $out"
  fi
  s11_refused "$out" "the reporter setting $a's spec.nodeName to $b" 'cannot patch resource "nodenetfilterprofiles"'
  if out=$(kubectl patch nodenetfilterprofile "$a" --type=merge -p "{\"spec\":{\"nodeName\":\"$b\"}}" 2>&1); then
    fail "the admin changed $a's spec.nodeName to $b: $out"
  fi
  s11_refused "$out" "the admin setting $a's spec.nodeName to $b" "spec.nodeName must equal metadata.name" \
    "spec.nodeName is immutable"
  [ "$(nnp "$a" '{.spec.nodeName}')" = "$a" ] || fail "$a's spec.nodeName is now $(nnp "$a" '{.spec.nodeName}')"

  # The controller's fields of A's own status.
  if out=$(as_token "$kc" PATCH "/$a/status" "$MERGE" \
    '{"status":{"writers":[{"pod":"kube-system/forged","container":"c","image":"forged:1.8.11"}]}}'); then
    fail "node $a's reporter token wrote status.writers: $out"
  fi
  s11_refused "$out" "the reporter writing $a's status.writers" "$vap" "may not write status.writers"
  other=1.8.11
  [ "$newest" != "$other" ] || other=1.8.10
  if out=$(as_token "$kc" PATCH "/$a/status" "$MERGE" "{\"status\":{\"newestWriterVersion\":\"$other\"}}"); then
    fail "node $a's reporter token wrote status.newestWriterVersion: $out"
  fi
  s11_refused "$out" "the reporter writing $a's status.newestWriterVersion" "$vap" "may not write status.newestWriterVersion"
  # As the reporter itself applies, taking the field over by force.
  if out=$(as_token "$kc" PATCH "/$a/status?fieldManager=nfguard-reporter&force=true" application/apply-patch+yaml \
    "{\"apiVersion\":\"nfguard.io/v1alpha1\",\"kind\":\"NodeNetfilterProfile\",\"metadata\":{\"name\":\"$a\"},\"status\":{\"newestWriterVersion\":\"$other\"}}"); then
    fail "node $a's reporter token applied status.newestWriterVersion: $out"
  fi
  s11_refused "$out" "the reporter's server-side apply of $a's status.newestWriterVersion" "$vap" \
    "may not write status.newestWriterVersion"
  [ "$(nnp "$a" '{.status.writers}')" = "$writers" ] || fail "status.writers of $a changed: $(nnp "$a" '{.status.writers}')"
  [ "$(nnp "$a" '{.status.newestWriterVersion}')" = "$newest" ] ||
    fail "status.newestWriterVersion of $a changed: $(nnp "$a" '{.status.newestWriterVersion}')"
  ok "the controller's fields of $a are as they were (writers: ${writers:-none}; newestWriterVersion: ${newest:-none})"

  # Its own writes go on: a heartbeat as the reporter sends it, with the
  # token, then the reporter pod's own.
  t0=$(date -u +%s)
  out=$(as_token "$kc" PATCH "/$a/status" "$MERGE" \
    "{\"status\":{\"lastProbeTime\":\"$(date -u -d "@$t0" +%Y-%m-%dT%H:%M:%SZ)\"}}") ||
    fail "the reporter token of $a may not send its own heartbeat: $out"
  ok "the same token sends $a's heartbeat: $out"
  wait_for $((${interval:-30} * 3 + 30)) "the reporter on $a to write a heartbeat after $t0" s11_probed_after "$a" "$t0"
  ok "the reporter pod's heartbeat advanced after ${WAITED} s: $(nnp "$a" '{.status.lastProbeTime}')"
  logs=$(kubectl -n "$NS" logs "$pod_a" --since=$((SECONDS - start + 5))s 2>&1)
  if grep -i 'forbidden' <<<"$logs" >/dev/null; then
    fail "reporter $pod_a logged Forbidden errors: $(grep -i forbidden <<<"$logs" | sed -n 1,5p)"
  fi
  ok "reporter $pod_a logged no Forbidden meanwhile"
}
