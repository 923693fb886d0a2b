# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 1: a NodeNetfilterProfile per node, owned by its Node, with its backend.
#
# every node has a NodeNetfilterProfile owned by its Node, probed, with
# its backend, and the matching nfguard.io/iptables-backend label
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes: nothing to undo (it changes nothing it leaves).

SCENARIO_TITLE="a NodeNetfilterProfile per node, owned by its Node, with its backend"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON="kind"
SCENARIO_RUN=s1_profiles

s1_profile_rules() { # NODE BACKEND: the rules the profile counts in BACKEND
  local rules
  rules=$(nnp "$1" "{.status.backends.$2.rules}")
  if [ "${rules:-0}" = 0 ] && [ "$2" = nft ]; then
    # A node without iptables (kube-proxy in nftables mode): its rules are
    # all in native tables, which iptables does not own.
    rules=$(nnp "$1" '{range .status.nativeTables[*]}{.rules}{"\n"}{end}' | awk '{s += $1} END {print s + 0}')
  fi
  echo "${rules:-0}"
}

s1_profile_complete() { # NODE
  local n=$1 uid owner backend label want rules
  uid=$(get node "$n" '{.metadata.uid}')
  [ -n "$(nnp "$n" '{.status.lastProbeTime}')" ] || { WHY="$n: no profile with lastProbeTime"; return 1; }
  [ "$(nnp "$n" '{.spec.nodeName}')" = "$n" ] || { WHY="$n: spec.nodeName is not $n"; return 1; }
  owner=$(nnp "$n" '{range .metadata.ownerReferences[?(@.kind=="Node")]}{.name}/{.uid}{"\n"}{end}')
  [ "$owner" = "$n/$uid" ] || { WHY="$n: owner Node references '$owner', want '$n/$uid'"; return 1; }
  backend=$(nnp "$n" '{.status.activeBackend}')
  case "$backend" in
    nft | legacy) ;;
    *) WHY="$n: activeBackend '${backend}' (a node running kube-proxy has rules in exactly one backend)"; return 1 ;;
  esac
  want=${EXPECT[$n]:-}
  if [ -n "$want" ] && [ "$backend" != "$want" ]; then
    WHY="$n: activeBackend $backend, NFGUARD_E2E_EXPECT_BACKENDS says $want"
    return 1
  fi
  rules=$(s1_profile_rules "$n" "$backend")
  [ "$rules" -gt 0 ] || { WHY="$n: backends.$backend.rules (or its nativeTables' rules) is ${rules:-absent}"; return 1; }
  label=$(get node "$n" '{.metadata.labels.nfguard\.io/iptables-backend}')
  [ "$label" = "$backend" ] || { WHY="$n: label nfguard.io/iptables-backend='$label', profile says $backend"; return 1; }
  [ "$(condition "$n" Fresh status)" = True ] || { WHY="$n: condition Fresh is not True"; return 1; }
  [ "$(condition "$n" Consistent status)" = True ] || { WHY="$n: condition Consistent is not True"; return 1; }
}
s1_all_profiles_complete() {
  local n
  for n in "${NODES[@]}"; do s1_profile_complete "$n" || return 1; done
}

s1_profiles() {
  local n uid b
  for n in "${!EXPECT[@]}"; do
    [[ " ${NODES[*]} " == *" $n "* ]] || fail "NFGUARD_E2E_EXPECT_BACKENDS names $n, which is not a node"
  done
  wait_for 180 "a complete profile for each of ${#NODES[@]} nodes" s1_all_profiles_complete
  for n in "${NODES[@]}"; do
    uid=$(get node "$n" '{.metadata.uid}')
    b=$(nnp "$n" '{.status.activeBackend}')
    ok "$n: NodeNetfilterProfile owned by Node $n (uid $uid), lastProbeTime $(nnp "$n" '{.status.lastProbeTime}'), activeBackend $b ($(s1_profile_rules "$n" "$b") rules), label nfguard.io/iptables-backend=$b${EXPECT[$n]:+ (expected $b)}, Fresh and Consistent"
  done
  [ "${#EXPECT[@]}" -gt 0 ] || skip "NFGUARD_E2E_EXPECT_BACKENDS is not set: each backend was checked against its label only"
  kubectl get nodenetfilterprofiles | show
  kubectl get nodes -L nfguard.io/iptables-backend,nfguard.io/iptables-version,nfguard.io/min-reader | show
}
