# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 3: a compatible DaemonSet (1.8.11, iptables-wrapper) runs on every node with an iptables command.
#
# a compatible DaemonSet (1.8.11 behind iptables-wrapper) is admitted and
# runs Ready on every node with an iptables command (not on
# NFGUARD_E2E_NFTABLES_NODE); the writer inventory lists it
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)

SCENARIO_TITLE="a compatible DaemonSet (1.8.11, iptables-wrapper) runs on every node with an iptables command"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s3_compatible_runs

s3_writer_listed() { # NODE POD: the profile's writer inventory lists POD with iptables 1.8.11
  local v
  v=$(nnp "$1" "{.status.writers[?(@.pod==\"$2\")].version}")
  WHY="$1: writer $2 has version '${v}'"
  [ "$v" = 1.8.11 ]
}

s3_compatible_runs() {
  local ns=nfguard-e2e-s3 out line node pod ready nodes=()
  # iptables-wrapper picks its backend by kubelet's marker chains: the nodes
  # with an iptables command (kubelet writes none where there is none:
  # NFT_NODE, kept out by node affinity; scenario 22 covers that node).
  for node in "${NODES[@]}"; do
    [ "$node" = "$NFT_NODE" ] || nodes+=("$node")
  done
  scenario_ns "$ns"
  out=$(ds_yaml compatible "$IMG_COMPATIBLE" "" "$NFT_NODE" | kubectl -n "$ns" apply -f - 2>&1) ||
    fail "the compatible DaemonSet was not admitted: $out"
  if grep -q 'ImageUnresolved' <<<"$out"; then
    fail "admitted only because the webhook could not resolve the image in time: $out"
  fi
  ok "the compatible DaemonSet was admitted: $out"
  audit_checked daemonsets "$ns" compatible allow "$IMG_COMPATIBLE"
  wait_for 180 "compatible pods Ready on all ${#nodes[@]} nodes with iptables" ds_running "$ns" compatible "${#nodes[@]}"
  if [ -n "$NFT_NODE" ] && grep -q "^$NFT_NODE=" <<<"$(pods_by_node "$ns" compatible)"; then
    fail "a compatible pod runs on $NFT_NODE, which the node affinity keeps out"
  fi
  for node in "${nodes[@]}"; do
    line=$(pods_by_node "$ns" compatible | grep "^$node=" || true)
    pod=${line#*=}
    pod=${pod%% *}
    ready=${line##* }
    if [ -z "$line" ] || [ "$ready" != True ]; then
      fail "no Ready compatible pod on node $node: $(pods_by_node "$ns" compatible | tr '\n' ' ')"
    fi
    wait_for 120 "$node's writer inventory to list $ns/$pod with iptables 1.8.11" s3_writer_listed "$node" "$ns/$pod"
    ok "$node: pod $pod Ready; writer inventory: $ns/$pod iptables $(nnp "$node" "{.status.writers[?(@.pod==\"$ns/$pod\")].version}") $(nnp "$node" "{.status.writers[?(@.pod==\"$ns/$pod\")].backend}")"
  done
}
