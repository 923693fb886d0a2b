# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 8: two controller replicas: hand-over without double writes, and the new leader sweeps an orphaned profile.
#
# two controller replicas: the standby takes the Lease over when the
# leader's pod is deleted (no replacement created to race it) and wrote
# nothing before
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - s8_restore "$log_before" "$S8_REPLICAS"
#   - kubectl delete nodenetfilterprofile "$S8_GHOST" --ignore-not-found

SCENARIO_TITLE="two controller replicas: hand-over without double writes, and the new leader sweeps an orphaned profile"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON="kind"
SCENARIO_RUN=s8_leader_election

S8_REPLICAS=""
s8_holder() { kubectl -n "$NS" get lease nfguard-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
s8_controller_pods() {
  kubectl -n "$NS" get pods -l app.kubernetes.io/component=controller \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}'
}
s8_two_ready() {
  local ready holder
  ready=$(s8_controller_pods | awk '$2 == "True" && $3 == "" { print $1 }')
  holder=$(s8_holder)
  WHY="ready: $(tr '\n' ' ' <<<"$ready"); holder: $holder"
  [ "$(grep -c . <<<"$ready")" = 2 ] && grep -qxF "$holder" <<<"$ready"
}
s8_holder_is() {
  WHY="holder: $(s8_holder)"
  [ "$(s8_holder)" = "$1" ]
}
# Write markers in the controller's log (src/controller/{apply,run,cli}.rs).
S8_WRITES='node labels updated|nfguard taint changed|orphaned profiles deleted|reconcile failed|leading: reconciling nodes|safety brake'

s8_restore() { # NFGUARD_LOG (empty: was not set) REPLICAS
  local log=$1 replicas=$2 rc=0
  if [ -n "$log" ]; then
    kubectl -n "$NS" set env deployment/nfguard-controller "NFGUARD_LOG=$log" >/dev/null || rc=1
  else
    kubectl -n "$NS" set env deployment/nfguard-controller NFGUARD_LOG- >/dev/null || rc=1
  fi
  kubectl -n "$NS" scale deployment/nfguard-controller --replicas="$replicas" >/dev/null || rc=1
  kubectl -n "$NS" rollout status deployment/nfguard-controller --timeout=240s >/dev/null || rc=1
  return "$rc"
}

s8_leader_election() {
  local log_before leader standby holder t0 took logs head events transitions r
  S8_REPLICAS=$(get deployment nfguard-controller '{.spec.replicas}' -n "$NS")
  log_before=$(get deployment nfguard-controller '{.spec.template.spec.containers[0].env[?(@.name=="NFGUARD_LOG")].value}' -n "$NS")
  defer s8_restore "$log_before" "$S8_REPLICAS"
  # info shows taking the lease and leading; the lease module's debug line
  # "lease held by another replica" shows a replica standing by.
  kubectl -n "$NS" set env deployment/nfguard-controller 'NFGUARD_LOG=info,nfguard::controller::lease=debug' >/dev/null
  kubectl -n "$NS" scale deployment/nfguard-controller --replicas=2 >/dev/null
  kubectl -n "$NS" rollout status deployment/nfguard-controller --timeout=240s >/dev/null
  wait_for 120 "two Ready controller replicas, one holding the Lease" s8_two_ready
  say "controller replicas: $S8_REPLICAS -> 2 (log level info, lease debug)"
  leader=$(s8_holder)
  standby=$(s8_controller_pods | awk -v l="$leader" '$2 == "True" && $3 == "" && $1 != l { print $1 }')
  ok "Lease nfguard-controller held by $leader; $standby stands by"
  transitions=$(get lease nfguard-controller '{.spec.leaseTransitions}' -n "$NS")

  # The standby must not have written anything.
  sleep 5
  logs=$(s8_logs "$standby")
  grep -q 'nfguard controller starting' <<<"$logs" || fail "$standby's log lacks its start line: $logs"
  grep -q 'lease held by another replica' <<<"$logs" || fail "$standby's log does not show it standing by: $logs"
  if grep -E "$S8_WRITES|taking the lease" <<<"$logs"; then
    fail "the standby $standby led or wrote while $leader held the Lease"
  fi
  ok "$standby's log: started, 'lease held by another replica' $(grep -c 'lease held by another replica' <<<"$logs") times, no lease taken, no write"
  events=$(kubectl get events.v1.events.k8s.io -A -o jsonpath='{range .items[*]}{.reportingInstance}{"\n"}{end}' | grep -cxF "$standby" || true)
  [ "$events" = 0 ] || fail "the standby $standby published $events events"
  ok "no event reported by $standby"
  r=$(pod_metric "$standby" nfguard_controller_leader)
  if [ -n "$r" ]; then
    [ "$r" = 0 ] || fail "$standby's nfguard_controller_leader is $r while standing by"
    r=$(pod_metric "$standby" nfguard_controller_reconcile_duration_seconds_count)
    [ "${r:-0}" = 0 ] || fail "$standby reconciled $r node(s) while standing by"
    ok "$standby's metrics: nfguard_controller_leader 0, no reconcile"
  else
    skip "the controller's metrics are not reachable through the apiserver's pod proxy here"
  fi

  # An orphan for the next leader's first sweep: the profile of a node that
  # does not exist, without the ownerReference the garbage collector goes by
  # (the leader swept when its term began; its next sweep is 600 s away).
  kubectl apply -f - >/dev/null <<EOF
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata:
  name: $S8_GHOST
spec:
  nodeName: $S8_GHOST
EOF
  defer kubectl delete nodenetfilterprofile "$S8_GHOST" --ignore-not-found
  s8_ghost_gone && fail "the profile $S8_GHOST was deleted while $leader led (its next sweep is 600 s away)"
  ok "a profile of the node $S8_GHOST, which does not exist, is in place"

  # The leader goes and no replacement can race the standby for the Lease:
  # the leader's pod gets the lowest pod-deletion-cost and the Deployment is
  # scaled to 1, so its ReplicaSet deletes exactly that pod (SIGTERM, on which
  # the leader releases the Lease) and creates none; then the pod is deleted
  # at once. The standby, running all along, must be the next holder.
  kubectl -n "$NS" annotate pod "$leader" controller.kubernetes.io/pod-deletion-cost=-1000 >/dev/null
  sleep 1 # the ReplicaSet controller's informer sees the annotation before the scale
  t0=$SECONDS
  kubectl -n "$NS" scale deployment/nfguard-controller --replicas=1 >/dev/null
  wait_for 30 "the ReplicaSet to delete the leader $leader" s8_deleting "$leader"
  deleted_pod "$leader"
  kubectl -n "$NS" delete pod "$leader" --grace-period=0 --force >/dev/null 2>&1 || true
  wait_for 30 "another replica to take the Lease over from $leader" s8_holder_moved "$leader"
  took=$((SECONDS - t0))
  holder=$(s8_holder)
  [ "$holder" = "$standby" ] ||
    fail "the Lease went to $holder, not to the standby $standby (controller pods: $(s8_controller_pods | tr '\n' ';'))"
  ok "the standby $standby holds the Lease ${took} s after $leader was deleted (limit: lease 15 s + retry 2 s, allowed 30 s; leaseTransitions $transitions -> $(get lease nfguard-controller '{.spec.leaseTransitions}' -n "$NS"))"
  r=$(s8_controller_pods | awk '$3 == "" { print $1 }')
  [ "$r" = "$standby" ] || fail "live controller pods besides the standby: $(tr '\n' ' ' <<<"$r")"
  ok "no other controller pod was created: the standby won without a race"
  wait_for 30 "$holder to log that it leads" s8_logged "$holder" 'leading: reconciling nodes'
  logs=$(s8_logs "$holder")
  head=$(awk '/taking the lease/ { exit } { print }' <<<"$logs")
  grep -q 'taking the lease' <<<"$logs" || fail "$holder leads without having logged 'taking the lease': $logs"
  if grep -E "$S8_WRITES" <<<"$head"; then
    fail "$holder wrote before it took the Lease"
  fi
  ok "$holder's log: nothing written before '$(grep -m1 'taking the lease' <<<"$logs" | sed -E 's/^[^ ]+ +//')', then '$(grep -m1 'leading: reconciling nodes' <<<"$logs" | sed -E 's/^[^ ]+ +//')'"
  if grep -q 'taking the lease from=None' <<<"$logs"; then
    say "($leader released the Lease on SIGTERM, so it was taken over at the next attempt, not after expiry)"
  fi
  r=$(pod_metric "$holder" nfguard_controller_leader)
  if [ -n "$r" ]; then
    [ "$r" = 1 ] || fail "$holder leads but its nfguard_controller_leader is $r"
    ok "$holder's nfguard_controller_leader is 1"
  fi

  # The new leader's first sweep (from its caches, each candidate's Node
  # looked up by name) deletes the orphan and no profile of a real node.
  wait_for 150 "$holder's first orphan sweep to delete the profile $S8_GHOST" s8_ghost_gone
  logs=$(s8_logs "$holder")
  r=$(grep 'deleted the profile of a node that no longer exists' <<<"$logs" || true)
  grep -qF "$S8_GHOST" <<<"$r" || fail "$holder's log does not name the orphan it deleted: $r"
  [ "$(grep -c . <<<"$r")" = 1 ] || fail "$holder deleted more than the one orphan: $r"
  list_nodes
  for n in "${NODES[@]}" "${CP_NODES[@]}"; do
    [ "$(nnp "$n" '{.metadata.name}')" = "$n" ] || fail "the profile of node $n went with the sweep"
  done
  ok "$holder's first sweep deleted the profile $S8_GHOST and no other; every node's profile ($((${#NODES[@]} + ${#CP_NODES[@]}))) is in place"
}
# A node name no node has.
S8_GHOST=nfguard-e2e-ghost-node
s8_ghost_gone() { # the orphan's profile is gone (NotFound, not an API error)
  local out
  if out=$(kubectl get nodenetfilterprofile "$S8_GHOST" -o name 2>&1); then
    WHY="$out is still there"
    return 1
  fi
  WHY=$out
  grep -q NotFound <<<"$out"
}
s8_deleting() { # POD: the pod is being deleted or gone
  local pods
  pods=$(s8_controller_pods)
  WHY="controller pods: $(tr '\n' ';' <<<"$pods")"
  [ "$(awk -v p="$1" '$1 == p && $3 == "" { n++ } END { print n + 0 }' <<<"$pods")" = 0 ]
}
s8_holder_moved() { # OLD
  local h
  h=$(s8_holder)
  WHY="holder: ${h:-none}"
  [ -n "$h" ] && [ "$h" != "$1" ]
}
s8_logged() { # POD TEXT
  local logs
  logs=$(s8_logs "$1") || true
  grep -qF -- "$2" <<<"$logs"
}
# A controller's log without terminal colour codes.
s8_logs() { kubectl -n "$NS" logs "$1" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g'; }
