#!/usr/bin/env bash
# `kubectl nfguard` on a real cluster. Installs the nfguard binary as the
# kubectl plugin (a copy named kubectl-nfguard in a temporary directory put
# first on PATH), then checks through kubectl itself: `kubectl plugin list`
# finds it; `kubectl nfguard status` and `-o json` list every Ready node with
# the host iptables backend its NodeNetfilterProfile states ("-" / null on a
# node without iptables); `-o wide` works; `--all-contexts` beside a hung API
# server is one table, the hung cluster a row, exit 2; `kubectl nfguard check` reads the
# cluster of the current context by default: a pod that writes no rules is
# allowed, and the incident DaemonSet (iptables-nft 1.8.7, hostNetwork +
# NET_ADMIN; e2e scenario 2) is denied with exit status 1 and
# [OldReaderNewRules] naming exactly the Ready nft nodes whose profiles need a
# reader >= 1.8.8.
# Provider-agnostic: needs KUBECONFIG, kubectl and jq on PATH (e2e/local-cluster.sh up
# exports KUBECONFIG and its kubectl).
# Env: NFGUARD_BIN         the binary (default target/release/nfguard)
#      NFGUARD_E2E_REGISTRY the test registry as this machine reaches it
#                          (loopback, plain HTTP), holding nfguard-e2e/incident:1.8.7-nft
#      NFGUARD_E2E_EXPECT_BACKENDS "node=backend ..." whose active backend
#                          (where the rules live) -o json must show; the local
#                          cluster's (e2e-nft=nft e2e-legacy=legacy
#                          e2e-nftables=nft) by default when
#                          NFGUARD_E2E_PROVIDER=local
set -euo pipefail
cd "$(dirname "$0")/.."
# incident_ds (its own log and fail below).
# shellcheck source=e2e/lifecycle-lib.sh
. e2e/lifecycle-lib.sh

log() { printf 'plugin-status: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

bin="${NFGUARD_BIN:-target/release/nfguard}"
[ -x "$bin" ] || fail "no nfguard binary at $bin (cargo build --release --bin nfguard)"
command -v kubectl >/dev/null || fail "kubectl is not on PATH"
command -v jq >/dev/null || fail "jq is not on PATH"
[ -n "${KUBECONFIG:-}" ] || fail "KUBECONFIG is not set"
registry="${NFGUARD_E2E_REGISTRY:-}"
[ -n "$registry" ] || fail "NFGUARD_E2E_REGISTRY is not set (the test registry holding nfguard-e2e/incident:1.8.7-nft)"
expected="${NFGUARD_E2E_EXPECT_BACKENDS:-}"
if [ -z "$expected" ] && [ "${NFGUARD_E2E_PROVIDER:-}" = local ]; then
  expected="e2e-nft=nft e2e-legacy=legacy e2e-nftables=nft"
fi

plugins="$(mktemp -d)"
work="$(mktemp -d)"
trap 'rm -rf "$plugins" "$work"' EXIT
cp "$bin" "$plugins/kubectl-nfguard"
export PATH="$plugins:$PATH"

# kubectl finds the plugin (plugin list exits non-zero on unrelated warnings).
kubectl plugin list >"$work/plugins" 2>&1 || true
grep -qx "$plugins/kubectl-nfguard" "$work/plugins" || fail "kubectl plugin list does not show it: $(cat "$work/plugins")"
log "kubectl plugin list: $plugins/kubectl-nfguard"

# Ready nodes a reporter runs on by default: not those with the control-plane
# taint (kind's control plane; docs/reporter.md, "Control-plane nodes").
mapfile -t ready < <(kubectl get nodes -o json | jq -r '.items[]
  | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))
  | select(all(.spec.taints[]?; .key != "node-role.kubernetes.io/control-plane" or .effect == "PreferNoSchedule"))
  | .metadata.name' | sort)
[ ${#ready[@]} -gt 0 ] || fail "the cluster has no Ready node"
total="$(kubectl get nodes -o name | wc -l)"

# What each profile states, read by kubectl: status must show the same. The
# reporter may still be writing its first profiles: wait up to 60 s.
profile_backend() {
  kubectl get nodenetfilterprofile "$1" -o jsonpath='{.status.iptables.backend}' 2>/dev/null || true
}
profile_probed() {
  kubectl get nodenetfilterprofile "$1" -o jsonpath='{.status.lastProbeTime}' 2>/dev/null || true
}
for node in "${ready[@]}"; do
  for _ in $(seq 60); do
    [ -n "$(profile_probed "$node")" ] && break
    sleep 1
  done
  [ -n "$(profile_probed "$node")" ] || fail "no probed NodeNetfilterProfile for Ready node $node after 60 s"
done

kubectl nfguard status >"$work/table" || fail "kubectl nfguard status exited $?"
log "kubectl nfguard status:"
sed 's/^/  /' "$work/table" >&2
kubectl nfguard status -o json >"$work/json" || fail "kubectl nfguard status -o json exited $?"
kubectl nfguard status -o wide >"$work/wide" || fail "kubectl nfguard status -o wide exited $?"

# First lines read whole (no early-exit reader after a pipe).
table_head=$(sed -n 1p "$work/table")
wide_head=$(sed -n 1p "$work/wide")
grep -q '^NODE  *BACKEND  *IPTABLES  *MIN-READER  *HAZARDS  *TAINTED  *WRITERS  *HEARTBEAT$' <<<"$table_head" \
  || fail "unexpected table header: $table_head"
grep -q ' READY  *ACTIVE ' <<<"$wide_head" || fail "-o wide lacks its extra columns"
table_tail=$(tail -n1 "$work/table")
grep -Eq "^$total nodes?, [0-9]+ degraded, [0-9]+ stale, [0-9]+ without profile$" <<<"$table_tail" \
  || fail "unexpected summary for $total nodes: $table_tail"
# The policy reports' line sits above the summary; -o json has the section.
table_reports=$(tail -n2 "$work/table")
table_reports=${table_reports%%$'\n'*}
grep -Eq '^policy reports(: not served| \((openreports\.io/v1alpha1|wgpolicyk8s\.io/v1alpha2)\): )' <<<"$table_reports" \
  || fail "no policy reports line above the summary: $table_reports"
[ "$(jq -c '.reports | keys' "$work/json")" = '["api","error","namespaces"]' ] \
  || fail "-o json lacks the reports section: $(jq -c .reports "$work/json")"
[ "$(jq '.summary.nodes' "$work/json")" = "$total" ] || fail "-o json counts $(jq '.summary.nodes' "$work/json") nodes, the cluster has $total"

for node in "${ready[@]}"; do
  # A node without an iptables command has no host backend: "-" and null.
  want="$(profile_backend "$node")"
  in_table="$(awk -v n="$node" '$1 == n {print $2}' "$work/table")"
  in_json="$(jq -r --arg n "$node" '.nodes[] | select(.name == $n) | .backend' "$work/json")"
  [ "$in_table" = "${want:--}" ] || fail "table shows $node with backend '$in_table', its profile says '${want:-none}'"
  [ "$in_json" = "${want:-null}" ] || fail "-o json shows $node with backend '$in_json', its profile says '${want:-none}'"
done
for pair in $expected; do
  node="${pair%%=*}"
  want="${pair#*=}"
  got="$(jq -r --arg n "$node" '.nodes[] | select(.name == $n) | .activeBackend' "$work/json")"
  [ "$got" = "$want" ] || fail "$node should show active backend $want, -o json shows '$got'"
done
log "every Ready node (${ready[*]}) shows its profile's backend${expected:+; active backends $expected}"
# Several clusters in one table: this cluster's context beside one whose
# API server (a loopback listener that accepts and never answers) hangs;
# the hung one is cut at the request timeout and shown as a row, exit 2.
kubectl config view --raw >"$work/kubeconfig"
here=$(kubectl config current-context)
python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
held = []
while True: held.append(s.accept())' >"$work/silent.port" &
silent=$!
trap 'kill "$silent" 2>/dev/null; rm -rf "$plugins" "$work"' EXIT
for _ in $(seq 50); do [ -s "$work/silent.port" ] && break; sleep 0.1; done
port=$(cat "$work/silent.port")
kubectl config --kubeconfig "$work/kubeconfig" set-cluster silent --server "http://127.0.0.1:$port" >/dev/null
kubectl config --kubeconfig "$work/kubeconfig" set-context silent --cluster silent --user "$(kubectl config view --minify -o jsonpath='{.contexts[0].context.user}')" >/dev/null
rc=0
kubectl nfguard status --kubeconfig "$work/kubeconfig" --all-contexts --request-timeout 3s >"$work/clusters" 2>&1 || rc=$?
log "kubectl nfguard status --all-contexts (exit $rc):"
sed 's/^/  /' "$work/clusters" >&2
[ "$rc" = 2 ] || fail "status over a hung cluster exited $rc, want 2"
listed=$(awk -v c="$here" '$1 == c' "$work/clusters")
[ "$(grep -c . <<<"$listed")" = "$total" ] || fail "the table lists $(grep -c . <<<"$listed") rows of $here, the cluster has $total nodes"
silent_row=$(awk '$1 == "silent"' "$work/clusters")
[[ "$silent_row" == *"no status: no answer within 3s" ]] || fail "no row saying the hung cluster did not answer: $silent_row"
clusters_tail=$(tail -n1 "$work/clusters")
[[ "$clusters_tail" == "2 clusters (1 answered, 1 without status): $total node"* ]] || fail "unexpected summary: $clusters_tail"
log "two contexts, one hung: one table, $total rows of $here, the hung one a row, exit 2"

# check, in plugin mode, reads the current context's cluster by default: a
# pod that writes no netfilter rules is allowed against the live profiles.
cat >"$work/pod.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: plugin-check, namespace: default}
spec:
  containers:
  - {name: app, image: registry.invalid/app:1}
YAML
kubectl nfguard check -f "$work/pod.yaml" -o json >"$work/check" || fail "kubectl nfguard check exited $? ($(cat "$work/check"))"
[ "$(jq -r '.verdict' "$work/check")" = allow ] || fail "kubectl nfguard check: $(cat "$work/check")"
log "kubectl nfguard check (cluster of the current context): allow"

# A workload the cluster denies: the incident DaemonSet, its image read from
# the test registry (plain HTTP).
incident_ds plugin-check-incident default "$registry/nfguard-e2e/incident:1.8.7-nft" >"$work/incident.yaml"
export NFGUARD_INSECURE_REGISTRIES="$registry"
rc=0
kubectl nfguard check -f "$work/incident.yaml" -o json >"$work/denied" 2>"$work/denied.err" || rc=$?
[ "$rc" = 1 ] || fail "kubectl nfguard check of the incident DaemonSet exited $rc, want 1 (deny): $(cat "$work/denied" "$work/denied.err")"
verdict="$(jq -r '.verdict' "$work/denied")" || fail "kubectl nfguard check -o json printed no JSON: $(cat "$work/denied" "$work/denied.err")"
[ "$verdict" = deny ] || fail "kubectl nfguard check of the incident DaemonSet: $(cat "$work/denied")"
named="$(jq -r '[.results[].reasons[]? | select(.code == "OldReaderNewRules" and .effect == "deny") | .nodes[]?] | unique | .[]' "$work/denied")" ||
  fail "unexpected JSON from kubectl nfguard check: $(cat "$work/denied")"
[ -n "$named" ] || fail "the denial has no [OldReaderNewRules] reason with nodes: $(cat "$work/denied")"
version="$(jq -r '[.results[].reasons[]? | select(.code == "OldReaderNewRules")][0].imageVersion' "$work/denied")" || version=""
[ "$version" = 1.8.7 ] || fail "the [OldReaderNewRules] reason names iptables '$version', not the image's 1.8.7: $(cat "$work/denied")"
# What the live profiles say: the Ready nft nodes that need a reader >= 1.8.8.
profiles="$(kubectl get nodenetfilterprofiles -o json)" || fail "cannot list the NodeNetfilterProfiles"
want="$(jq -r --arg ready " ${ready[*]} " '.items[]
  | select(.status.minReaderVersion != null and .status.activeBackend == "nft")
  | .metadata.name as $n | select($ready | contains(" \($n) ")) | $n' <<<"$profiles" | sort)"
[ -n "$want" ] || fail "no Ready node's profile needs a reader >= 1.8.8: nothing for the denial to name"
[ "$named" = "$want" ] ||
  fail "[OldReaderNewRules] names nodes '$(tr '\n' ' ' <<<"$named")', the profiles say '$(tr '\n' ' ' <<<"$want")'"
# The text a user reads says the same.
rc=0
kubectl nfguard check -f "$work/incident.yaml" >"$work/denied.txt" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "kubectl nfguard check (text) of the incident DaemonSet exited $rc, want 1: $(cat "$work/denied.txt")"
text="$(cat "$work/denied.txt")"
grep -q '^DENY  DaemonSet/default/plugin-check-incident ' <<<"$text" || fail "no DENY line for the DaemonSet: $text"
grep -qF '[OldReaderNewRules] container cni' <<<"$text" || fail "the text does not give [OldReaderNewRules] for container cni: $text"
grep -qx 'verdict: deny' <<<"$text" || fail "the text does not end in 'verdict: deny': $text"
log "kubectl nfguard check of the incident DaemonSet: exit 1, deny, [OldReaderNewRules] on $(tr '\n' ' ' <<<"$named")(what the profiles say)"
log "ok"
