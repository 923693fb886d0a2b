# shellcheck shell=bash disable=SC2034 # WHY is read by scenarios.sh's wait_for
# Scenario 24, sourced by e2e/scenarios.sh (its helpers and state): the
# what-if checked against the same node change done for real.
#
# Two nodes move to Debian trixie's iptables (1.8.11, nft): the nft node
# whose rules need a reader >= 1.8.8 (local: e2e-nft, today 1.8.9) and the
# node without iptables (NFGUARD_E2E_NFTABLES_NODE). An iptables-nft 1.8.7
# writer runs on each (named by the loopback registry address, as in
# scenario 23: admission only warns, the CLI here reads the image). The
# what-if's prediction is kept, the nodes are changed for real
# (`e2e/local-cluster.sh node-iptables NODE 1.8.11`: the release's files in
# the node's mount namespace, kubelet and kube-proxy restarted, so the rules
# are written by 1.8.11), their reporters restarted (a hostPath is bound at
# container start; a real upgrade reboots), and once each profile reports
# 1.8.11 every "after" source must give exactly the predicted findings:
# same workloads, verdicts, reason codes and nodes. Restored at the end,
# also on failure. Local provider only.

S24_RELEASE=1.8.11
S24_PATCH="iptables=$S24_RELEASE/nft"
S24_NODES=()
S24_BEFORE=""

# The "after" sources: each writes the findings it sees now, in
# s24_findings' form, to the file $1. The comparison runs over all of them;
# another source (the policy reports) is one more name here.
S24_AFTER_SOURCES=(s24_after_check)

# s24_findings CHECK_JSON: one line per workload (`object verdict`) and one
# per finding on a changed node (`object verdict code node`), sorted: what a
# prediction and the state after must agree on (the messages differ by the
# what-if's label and name the host's release; the codes, verdicts and nodes
# may not).
s24_findings() {
  local nodes
  nodes=$(printf '%s\n' "${S24_NODES[@]}" | jq -R . | jq -sc .)
  jq -r --argjson nodes "$nodes" '
    .results[] | . as $r
    | ([$r.object, $r.verdict] | @tsv),
      ($r.reasons[] | . as $x | ($x.nodes // [])[] | select(. as $n | $nodes | index($n))
       | [$r.object, $r.verdict, $x.code, .] | @tsv)' "$1" | sort -u
}

# The CLI without assumptions (the same command the what-if ran).
s24_after_check() {
  local rc=0
  s23_check "$1.json" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || fail "nfguard check --running exited $rc: $(cat "$1.json.err")"
  echo "$rc" >"$1.rc"
  s24_findings "$1.json" >"$1"
}

s24_reporter_restart() { # NODE: its reporter pod replaced (sees the node's mounts anew)
  kubectl -n "$NS" delete pod -l app.kubernetes.io/component=reporter \
    --field-selector "spec.nodeName=$1" --wait=true --timeout=60s >/dev/null
}

# s24_reports NODE VERSION (empty: none): the profile's host iptables, and
# the controller's newest writer from it, say so.
s24_reports() {
  local v w
  v=$(nnp "$1" '{.status.iptables.version}')
  w=$(nnp "$1" '{.status.newestWriterVersion}')
  WHY="$1: status.iptables.version '${v}', newestWriterVersion '${w}', want '$2'"
  [ "$v" = "$2" ] && { [ -z "$2" ] || [ "$w" = "$2" ]; }
}

s24_restore() { # NODE VERSION_BEFORE
  "$REPO/e2e/local-cluster.sh" node-iptables "$1" restore </dev/null || return 1
  s24_reporter_restart "$1" || return 1
  wait_for 120 "$1's profile to report its iptables as before (${2:-none})" s24_reports "$1" "$2"
}

s24_real_node_change() {
  local ns=nfguard-e2e-s24 work rc n sel pod src changed=0 t0
  if [ "$PROVIDER" != local ]; then
    skip "scenario 24 changes a node's iptables for real: only the local provider can (e2e/local-cluster.sh node-iptables)"
    return 0
  fi
  S23_BIN=${NFGUARD_BIN:-$REPO/target/release/nfguard}
  [ -x "$S23_BIN" ] || fail "NFGUARD_BIN=$S23_BIN is not an executable nfguard"
  S23_REGISTRY=${NFGUARD_E2E_REGISTRY:-}
  [ -n "$S23_REGISTRY" ] || fail "scenario 24 needs NFGUARD_E2E_REGISTRY (the registry as this machine reaches it)"
  nftables_node
  new_rules_node
  S24_NODES=("$RULES_NODE" "$NFT_NODE")
  sel="kubernetes.io/hostname in ($RULES_NODE,$NFT_NODE)"
  work=$(mktemp -d)
  defer rm -rf "$work"
  scenario_ns "$ns"
  on_dump kubectl get nodenetfilterprofiles "${S24_NODES[@]}" -o yaml

  for n in "${S24_NODES[@]}"; do
    defer kubectl -n "$ns" delete pod "writer-187-$n" --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
    incident_pod "writer-187-$n" "$n" '{}' '["sleep", "infinity"]' |
      sed "s|image: $IMG_INCIDENT|image: $S23_REGISTRY/nfguard-e2e/incident:1.8.7-nft|" |
      kubectl -n "$ns" create -f - >/dev/null || fail "the iptables-nft 1.8.7 writer was not admitted on $n"
  done
  for n in "${S24_NODES[@]}"; do
    kubectl -n "$ns" wait --for=condition=Ready "pod/writer-187-$n" --timeout=120s >/dev/null ||
      fail "pod writer-187-$n is not Ready"
  done

  # Today, and the prediction.
  s24_after_check "$work/today"
  pod="Pod/$ns/writer-187-$NFT_NODE"
  grep -qxF "$pod"$'\t'allow "$work/today" ||
    fail "today $pod should be allowed: $(cat "$work/today")"
  rc=0
  s23_check "$work/predicted.json" --assume-nodes "$sel" --assume "$S24_PATCH" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || fail "the what-if exited $rc: $(cat "$work/predicted.json.err")"
  echo "$rc" >"$work/predicted.rc"
  s24_findings "$work/predicted.json" >"$work/predicted"
  grep -qxF "$(printf '%s\tdeny\tOldReaderNewRules\t%s' "$pod" "$NFT_NODE")" "$work/predicted" ||
    fail "the what-if does not predict $pod denied as [OldReaderNewRules] on $NFT_NODE: $(cat "$work/predicted")"
  ok "the what-if [$sel: $S24_PATCH] (exit $rc) predicts, for the workloads on ${S24_NODES[*]}:"
  show <"$work/predicted"

  # The change, for real.
  t0=$SECONDS
  for n in "${S24_NODES[@]}"; do
    S24_BEFORE=$(nnp "$n" '{.status.iptables.version}')
    defer s24_restore "$n" "$S24_BEFORE"
    "$REPO/e2e/local-cluster.sh" node-iptables "$n" "$S24_RELEASE" </dev/null ||
      fail "e2e/local-cluster.sh node-iptables $n $S24_RELEASE failed"
    s24_reporter_restart "$n"
  done
  for n in "${S24_NODES[@]}"; do
    wait_for 120 "$n's profile to report iptables $S24_RELEASE" s24_reports "$n" "$S24_RELEASE"
    ok "$n: $(node_exec "$n" iptables --version) for real; profile: iptables $(nnp "$n" '{.status.iptables.version}') $(nnp "$n" '{.status.iptables.backend}'), newestWriterVersion $(nnp "$n" '{.status.newestWriterVersion}'), kubeletMarkers $(nnp "$n" '{.status.kubeletMarkers.state}'), minReaderVersion '$(nnp "$n" '{.status.minReaderVersion}')'"
  done
  ok "both nodes changed and reported in $((SECONDS - t0)) s"
  # kubelet wrote its marker chains through 1.8.11 on the node that had no iptables.
  node_exec "$NFT_NODE" iptables-save -t mangle | grep -q '^:KUBE-IPTABLES-HINT' ||
    fail "no KUBE-IPTABLES-HINT chain on $NFT_NODE after kubelet's restart with iptables $S24_RELEASE"

  # After: every source must see what was predicted.
  for src in "${S24_AFTER_SOURCES[@]}"; do
    "$src" "$work/after-$src"
    if ! diff -u "$work/predicted" "$work/after-$src" >"$work/diff-$src"; then
      fail "$src after the change differs from the prediction (- predicted, + after):
$(cat "$work/diff-$src")"
    fi
    changed=$((changed + 1))
    ok "$src after the change: exactly the predicted workloads, verdicts, reason codes and nodes"
  done
  [ "$(cat "$work/after-s24_after_check.rc")" = "$(cat "$work/predicted.rc")" ] ||
    fail "check exits $(cat "$work/after-s24_after_check.rc") after the change, the what-if exited $(cat "$work/predicted.rc")"

  # What the finding implies for the nodes: it is about a workload (the gate
  # denies it; under the default Deny policy a running one is reported, not
  # tainted for), and the host's 1.8.11 reads its own rules.
  for n in "${S24_NODES[@]}"; do
    [ "$(condition "$n" Healthy status)" = True ] ||
      fail "$n: Healthy=$(condition "$n" Healthy status) ($(condition "$n" Healthy message))"
    [ "$(condition "$n" Consistent status)" = True ] ||
      fail "$n: Consistent=$(condition "$n" Consistent status) ($(condition "$n" Consistent message))"
    [ -z "$(nfguard_taints "$n")" ] || fail "$n carries $(nfguard_taints "$n" | tr '\n' ' ')"
  done
  [ "$(nnp "$NFT_NODE" '{.status.kubeletMarkers.state}')" = present ] ||
    fail "$NFT_NODE: kubeletMarkers $(nnp "$NFT_NODE" '{.status.kubeletMarkers.state}'), the what-if assumed present"
  ok "${S24_NODES[*]}: Healthy and Consistent True, no nfguard taint; $NFT_NODE's marker chains present, as assumed"
  [ "$changed" -ge 1 ] || fail "no after source ran"
}
