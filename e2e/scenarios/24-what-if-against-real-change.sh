# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 24: the what-if against the change done for real: two nodes moved to iptables 1.8.11 give exactly the predicted findings.
#
# (local provider) the what-if checked against the change done for real:
# with a 1.8.7 writer on the nft node with new rules and on the node
# without iptables, the what-if's prediction for both moved to
# iptables 1.8.11 (nft) is kept; both are moved for real
# (`e2e/local-cluster.sh node-iptables`), and once their profiles report
# 1.8.11, `nfguard check --running` gives exactly the predicted
# workloads, verdicts, reason codes and nodes (e2e/scenarios/24-what-if-against-real-change.sh)
#
# Runs on: local. Needs: nftables-node.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - rm -rf "$work"
#   - namespace "$ns" (scenario_ns)
#   - delete_report_crds "$crd"
#   - kubectl delete netfilterpolicy nfguard-e2e-s24 --ignore-not-found
#   - kubectl -n "$ns" delete pod "writer-187-$n" --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
#   - s24_restore "$n" "$S24_BEFORE"

SCENARIO_TITLE="the what-if against the change done for real: two nodes moved to iptables 1.8.11 give exactly the predicted findings"
SCENARIO_PROVIDERS="local"
SCENARIO_NEEDS="nftables-node"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s24_real_node_change

# the
# what-if checked against the same node change done for real.
#
# Two nodes move to Debian trixie's iptables (1.8.11, nft): the nft node
# whose rules need a reader >= 1.8.8 (local: e2e-nft, today 1.8.9) and the
# node without iptables (NFGUARD_E2E_NFTABLES_NODE). An iptables-nft 1.8.7
# writer runs on each, named by the registry address the cluster pulls
# from, so the webhook, the controller (its policy reports) and the CLI all
# read the image: the CLI runs in the control plane's network namespace
# (`e2e/local-cluster.sh cp`), where that registry and the API server are.
# A NetfilterPolicy `action: Warn` for the scenario's namespace (and
# no other policy there) lets the writers run where they are unsafe. The
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
S24_KUBECONFIG=""

# The "after" sources: each writes the findings it sees now, in
# s24_findings' form, to the file $1, and may write to $1.scope the object
# prefix it can see (the prediction is compared on those lines only). The
# comparison runs over all of them.
S24_AFTER_SOURCES=(s24_after_check s24_after_reports)
S24_NS=nfguard-e2e-s24

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

# s24_check OUT [ARGS...]: `nfguard check --running` as scenario 23 runs it,
# but in the control plane's network namespace, against the API server and
# the registry as the cluster reaches them (the exit status is returned).
s24_check() {
  local out=$1 rc=0
  shift
  "$REPO/e2e/local-cluster.sh" cp "$S23_BIN" check --kubeconfig "$S24_KUBECONFIG" --running \
    --insecure-registry "$REGISTRY" --registry-allow-cidr "${REGISTRY%:*}/32" --timeout 60 -o json "$@" \
    >"$out" 2>"$out.err" </dev/null || rc=$?
  return "$rc"
}

# The CLI without assumptions (the same command the what-if ran).
s24_after_check() {
  local rc=0
  s24_check "$1.json" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || fail "nfguard check --running exited $rc: $(cat "$1.json.err")"
  echo "$rc" >"$1.rc"
  s24_findings "$1.json" >"$1"
}

# The controller's policy reports (the openreports CRD installed by this
# scenario) of the scenario's pods, in s24_findings' form: a workload's
# verdict is its worst result (fail: deny, warn: warn, else allow), a
# finding is a result on a changed node. The reports see only the pods
# they are of, so the prediction is compared on this namespace's lines.
s24_after_reports() {
  local nodes json
  nodes=$(printf '%s\n' "${S24_NODES[@]}" | jq -R . | jq -sc .)
  json=$(kubectl -n "$S24_NS" get reports.openreports.io -o json) || fail "cannot list the Reports in $S24_NS"
  jq -r --argjson nodes "$nodes" '
    .items[] | (.results // []) as $res | select($res | length > 0)
    | ($res | map(.result)
       | if index("fail") then "deny" elif index("warn") then "warn" else "allow" end) as $v
    | ($res[0].resources[0] | "\(.kind)/\(.namespace)/\(.name)") as $obj
    | ([$obj, $v] | @tsv),
      ($res[] | select(.rule != "Compatible") | select(.properties.node as $n | $nodes | index($n))
       | [$obj, $v, .rule, .properties.node] | @tsv)' <<<"$json" | sort -u >"$1"
  echo "Pod/$S24_NS/" >"$1.scope"
}

# s24_agrees SOURCE WORK: SOURCE's findings now equal the prediction (on
# its scope); the diff is left in WORK/diff-SOURCE.
s24_agrees() {
  local src=$1 work=$2 predicted=$2/predicted scope
  "$src" "$work/after-$src"
  if [ -f "$work/after-$src.scope" ]; then
    scope=$(cat "$work/after-$src.scope")
    grep -F -- "$scope" "$work/predicted" >"$work/predicted-$src" || true
    predicted=$work/predicted-$src
  fi
  diff -u "$predicted" "$work/after-$src" >"$work/diff-$src" && return 0
  WHY="$src differs from the prediction (- predicted, + after):
$(cat "$work/diff-$src")"
  return 1
}

# s24_status_agrees TODAY_JSON PREDICTED_JSON STATUS_JSON: `status` with the
# what-if's flags names the workloads `check` predicts a change for (a new
# finding on a changed node, or another verdict), with the same verdicts
# today and as assumed and the same reason codes: its count equals check's,
# and each line it lists is one of check's (it lists at most 10).
# s24_profile_lists FROM N: the audit log, after its first FROM lines, shows
# exactly N completed lists of the profiles by someone other than nfguard.
s24_profile_lists() {
  local lists
  lists=$(tail -n "+$(($1 + 1))" "$NFGUARD_E2E_AUDIT_LOG" | jq -r 'select(.stage == "ResponseComplete" and .verb == "list"
    and (.requestURI | startswith("/apis/nfguard.io/v1alpha1/nodenetfilterprofiles"))
    and (.user.username | startswith("system:serviceaccount:nfguard-system:") | not)) | .requestURI')
  WHY="$(grep -c . <<<"$lists" || true) lists of the profiles, want $2"
  [ "$(grep -c . <<<"$lists" || true)" = "$2" ]
}

s24_status_agrees() {
  local from_check from_status
  from_check=$(jq -r --slurpfile today "$1" '
    .whatIf.nodes as $nodes
    | ($today[0].results | map({(.object): .}) | add // {}) as $t
    | .results[] | . as $r | $t[$r.object] as $b
    | [$r.reasons[] | select(.message | startswith("what-if [") and (contains("], as today: ") | not))] as $new
    | select(($new | length) > 0 or $b.verdict != $r.verdict)
    | (if ($new | length) > 0 then $new else [$b.reasons[] | select((.nodes // []) | any(. as $n | $nodes | index($n)))] end) as $why
    | [$r.object, $b.verdict, $r.verdict, ([$why[].code] | unique | join(","))] | @tsv' "$2" | sort)
  from_status=$(jq -r '.whatIf.workloads[] | [.object, .today, .assumed, (.codes | join(","))] | @tsv' "$3" | sort)
  [ "$(jq -r '.whatIf.changed' "$3")" = "$(printf '%s' "$from_check" | grep -c . || true)" ] ||
    fail "status's what-if counts $(jq -r '.whatIf.changed' "$3") changed workloads, check predicts:
$from_check"
  [ -z "$(comm -23 <(printf '%s\n' "$from_status") <(printf '%s\n' "$from_check"))" ] ||
    fail "status's what-if lists (< status, > check):
$(diff <(printf '%s\n' "$from_status") <(printf '%s\n' "$from_check") || true)"
}

s24_admit() { # NODE: the 1.8.7 writer created on NODE (retried until the webhook has the policy)
  local out
  out=$(incident_pod "writer-187-$1" "$1" '{}' '["sleep", "infinity"]' | kubectl -n "$S24_NS" create -f - 2>&1) || {
    WHY="not admitted: $out"
    return 1
  }
}

s24_reporter_restart() { # NODE: its reporter pod replaced (sees the node's mounts anew)
  deleted_pods app.kubernetes.io/component=reporter "spec.nodeName=$1"
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
  local ns=$S24_NS work rc n sel pod src changed=0 t0 crd hint o fmt audit_from
  S23_BIN=${NFGUARD_BIN:-$REPO/target/release/nfguard}
  [ -x "$S23_BIN" ] || fail "NFGUARD_BIN=$S23_BIN is not an executable nfguard"
  nftables_node
  new_rules_node
  S24_NODES=("$RULES_NODE" "$NFT_NODE")
  sel="kubernetes.io/hostname in ($RULES_NODE,$NFT_NODE)"
  work=$(mktemp -d)
  defer rm -rf "$work"
  # The API server as the control plane's namespace reaches it (the
  # registry's host: both are the control plane's address).
  S24_KUBECONFIG=$work/kubeconfig
  sed "s#server: .*#server: https://${REGISTRY%:*}:6443#" "$KUBECONFIG" >"$S24_KUBECONFIG"
  scenario_ns "$ns"
  on_dump kubectl get nodenetfilterprofiles "${S24_NODES[@]}" -o yaml
  on_dump kubectl -n "$ns" get reports.openreports.io -o yaml
  # The policy reports are one of the "after" sources: their API served for
  # this scenario (scenario 30's CRD file; removed at the end).
  no_report_crd reports.openreports.io || fail "the cluster already serves reports.openreports.io: this scenario installs and removes it itself"
  crd=$(report_crd openreports "$REPORTS_MODULE" config/crd/openreports.io_reports.yaml)
  defer delete_report_crds "$crd"
  kubectl apply --server-side -f "$crd" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/reports.openreports.io >/dev/null

  # Warn, not the install's Deny: the writers must run where they are unsafe.
  e2e_policy nfguard-e2e-s24 Warn "{kubernetes.io/metadata.name: $ns}"
  keep_out_of_namespace "$ns" nfguard-e2e-s24
  for n in "${S24_NODES[@]}"; do
    defer kubectl -n "$ns" delete pod "writer-187-$n" --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
    wait_for 60 "the iptables-nft 1.8.7 writer admitted on $n (action: Warn)" s24_admit "$n"
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
  s24_check "$work/predicted.json" --assume-nodes "$sel" --assume "$S24_PATCH" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || fail "the what-if exited $rc: $(cat "$work/predicted.json.err")"
  echo "$rc" >"$work/predicted.rc"
  s24_findings "$work/predicted.json" >"$work/predicted"
  grep -qxF "$(printf '%s\twarn\tOldReaderNewRules\t%s' "$pod" "$NFT_NODE")" "$work/predicted" ||
    fail "the what-if does not predict $pod warned of [OldReaderNewRules] on $NFT_NODE (action: Warn): $(cat "$work/predicted")"
  ok "the what-if [$sel: $S24_PATCH] (exit $rc) predicts, for the workloads on ${S24_NODES[*]}:"
  show <"$work/predicted"
  # `status` with the same flags: the same prediction, in its section.
  t0=$SECONDS
  audit_from=$(wc -l <"${NFGUARD_E2E_AUDIT_LOG:?the local cluster exports NFGUARD_E2E_AUDIT_LOG}")
  for o in json table; do
    fmt=()
    [ "$o" = table ] || fmt=(-o "$o")
    "$REPO/e2e/local-cluster.sh" cp "$S23_BIN" status --kubeconfig "$S24_KUBECONFIG" "${fmt[@]}" \
      --insecure-registry "$REGISTRY" --registry-allow-cidr "${REGISTRY%:*}/32" --timeout 60 \
      --assume-nodes "$sel" --assume "$S24_PATCH" >"$work/status.$o" 2>"$work/status.$o.err" </dev/null ||
      fail "nfguard status with the what-if's flags failed: $(cat "$work/status.$o.err")"
  done
  s24_status_agrees "$work/today.json" "$work/predicted.json" "$work/status.json"
  # The table and the what-if judge one snapshot: each run lists the
  # profiles once, as the API server's audit log counts.
  wait_for 10 "the two status runs' lists of profiles in the audit log" s24_profile_lists "$audit_from" 2
  sleep 2
  s24_profile_lists "$audit_from" 2 || fail "$WHY"
  ok "the API server's audit log: 2 lists of the profiles for the 2 status runs (the what-if reuses the table's)"
  ok "status --assume-nodes ... --assume $S24_PATCH predicts what check does ($(jq -r .whatIf.changed "$work/status.json") changed workloads; two runs in $((SECONDS - t0)) s):"
  show <"$work/status.table"
  jq .whatIf "$work/status.json" | show

  # The change, for real.
  t0=$SECONDS
  for n in "${S24_NODES[@]}"; do
    S24_BEFORE=$(nnp "$n" '{.status.iptables.version}')
    defer s24_restore "$n" "$S24_BEFORE"
    # The node's kube-proxy and reporter restart: a write of the reporter
    # through the API server's Service can fail until kube-proxy is back
    # (seen once on the node without iptables, in a full run).
    caused_alert NfguardReporterWriteFailures "node=$n"
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
  hint=$(node_exec "$NFT_NODE" iptables-save -t mangle)
  [[ $'\n'$hint == *$'\n:KUBE-IPTABLES-HINT'* ]] ||
    fail "no KUBE-IPTABLES-HINT chain on $NFT_NODE after kubelet's restart with iptables $S24_RELEASE"

  # After: every source must see what was predicted (the reports follow
  # the profiles within a pass, so each source is given a little time).
  for src in "${S24_AFTER_SOURCES[@]}"; do
    wait_for 90 "$src to give exactly the predicted findings" s24_agrees "$src" "$work"
    changed=$((changed + 1))
    ok "$src after the change: exactly the predicted workloads, verdicts, reason codes and nodes:"
    show <"$work/after-$src"
  done
  [ "$(cat "$work/after-s24_after_check.rc")" = "$(cat "$work/predicted.rc")" ] ||
    fail "check exits $(cat "$work/after-s24_after_check.rc") after the change, the what-if exited $(cat "$work/predicted.rc")"

  # What the finding implies for the nodes: it is about a workload (under
  # action: Warn a running one is warned of and reported, not tainted
  # for), and the host's 1.8.11 reads its own rules.
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
