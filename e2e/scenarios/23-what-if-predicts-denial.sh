# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 23: the what-if: the 1.8.7 writer running on the node without iptables is allowed today and predicted denied if the node gets iptables 1.8.11 (nft).
#
# the what-if: with that 1.8.7 writer running on that node, `nfguard
# check --running` allows it today, and `--assume-nodes` (that node)
# `--assume iptables=1.8.11/nft` (what installing Debian trixie's
# iptables there would bring) predicts its denial as [OldReaderNewRules]
# naming the node, labelled as a prediction, exit status 1
# (NFGUARD_BIN: the CLI, default target/release/nfguard, scripts/test.sh sets the dev build; the pod's image
# is named by NFGUARD_E2E_REGISTRY, the registry as this machine
# reaches it on loopback)
#
# Runs on: kind, local. Needs: nftables-node.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - rm -rf "$work"
#   - namespace "$ns" (scenario_ns)
#   - kubectl -n "$ns" delete pod writer-187 --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s

SCENARIO_TITLE="the what-if: the 1.8.7 writer running on the node without iptables is allowed today and predicted denied if the node gets iptables 1.8.11 (nft)"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS="nftables-node"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s23_what_if

# s23_check OUT [ARGS...]: `nfguard check --running` against this cluster, its
# JSON report in OUT; the exit status is returned (1 is a denial, not an error).
s23_check() {
  local out=$1 rc=0
  shift
  # The cluster's images are looked up with the in-cluster egress policy:
  # the test registry is on loopback, so it is allowed here by name.
  "$S23_BIN" check --kubeconfig "$KUBECONFIG" --running \
    --insecure-registry "$S23_REGISTRY" --registry-allow-cidr "${S23_REGISTRY%:*}/32" \
    --timeout 60 -o json "$@" \
    >"$out" 2>"$out.err" || rc=$?
  return "$rc"
}

s23_what_if() {
  local ns=nfguard-e2e-s23 work rc pod verdict message sel
  S23_BIN=${NFGUARD_BIN:-$REPO/target/release/nfguard}
  [ -x "$S23_BIN" ] || fail "NFGUARD_BIN=$S23_BIN is not an executable nfguard"
  nftables_node
  command -v jq >/dev/null || fail "jq is not on PATH"
  work=$(mktemp -d)
  defer rm -rf "$work"
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete pod writer-187 --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
  # Named by the loopback address this machine reads the registry at (the
  # nodes pull that name through their mirror): the CLI reads what runs from
  # here, and only loopback is dialled. The webhook cannot read that name in
  # its pod, so admission only warns ([ImageUnresolved]).
  S23_REGISTRY=${NFGUARD_E2E_REGISTRY:-}
  [ -n "$S23_REGISTRY" ] || fail "scenario 23 needs NFGUARD_E2E_REGISTRY (the registry as this machine reaches it)"
  incident_pod writer-187 "$NFT_NODE" '{}' '["sleep", "infinity"]' |
    sed "s|image: $IMG_INCIDENT|image: $S23_REGISTRY/nfguard-e2e/incident:1.8.7-nft|" |
    kubectl -n "$ns" create -f - >/dev/null ||
    fail "the iptables-nft 1.8.7 writer was not admitted on $NFT_NODE"
  kubectl -n "$ns" wait --for=condition=Ready pod/writer-187 --timeout=120s >/dev/null || fail "pod writer-187 is not Ready"
  pod="Pod/$ns/writer-187"

  rc=0
  s23_check "$work/today" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || fail "nfguard check --running exited $rc: $(cat "$work/today.err")"
  verdict=$(jq -r --arg o "$pod" '.results[] | select(.object == $o) | .verdict' "$work/today")
  [ "$verdict" = allow ] || fail "today the running 1.8.7 writer on $NFT_NODE should be allowed, got '$verdict': $(cat "$work/today")"
  ok "today (no iptables on $NFT_NODE) nfguard check --running allows $pod"

  sel="kubernetes.io/hostname=$NFT_NODE"
  rc=0
  s23_check "$work/assumed" --assume-nodes "$sel" --assume iptables=1.8.11/nft || rc=$?
  [ "$rc" = 1 ] || fail "the what-if exited $rc, want 1 (deny): $(cat "$work/assumed" "$work/assumed.err")"
  verdict=$(jq -r --arg o "$pod" '.results[] | select(.object == $o) | .verdict' "$work/assumed")
  [ "$verdict" = deny ] || fail "the what-if should deny $pod, got '$verdict': $(cat "$work/assumed")"
  message=$(jq -r --arg o "$pod" --arg n "$NFT_NODE" \
    '.results[] | select(.object == $o) | .reasons[] | select(.code == "OldReaderNewRules" and (.nodes | index($n))) | .message' \
    "$work/assumed")
  [ -n "$message" ] || fail "no [OldReaderNewRules] naming $NFT_NODE for $pod: $(cat "$work/assumed")"
  [[ "$message" == "what-if [$sel: iptables=1.8.11/nft]: "* ]] ||
    fail "the finding is not labelled as a prediction under the assumption: $message"
  [ "$(jq -r '.whatIf.nodes | join(" ")' "$work/assumed")" = "$NFT_NODE" ] ||
    fail "the assumed nodes are not just $NFT_NODE: $(jq -c .whatIf "$work/assumed")"
  [ "$(jq -r '.whatIf.denied' "$work/assumed")" -ge 1 ] || fail "the what-if counts no denial: $(jq -c .whatIf "$work/assumed")"
  ok "with $NFT_NODE assumed to get Debian trixie's iptables (1.8.11, nft), the what-if denies $pod: $message"
  ok "the what-if: $(jq -c '.whatIf | {selector, assume, nodes, denied, warned}' "$work/assumed")"
}
