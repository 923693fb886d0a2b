#!/usr/bin/env bash
# `kubectl nfguard` on a real cluster. Installs the nfguard binary as the
# kubectl plugin (a copy named kubectl-nfguard in a temporary directory put
# first on PATH), then checks through kubectl itself: `kubectl plugin list`
# finds it; `kubectl nfguard status` and `-o json` list every Ready node with
# the host iptables backend its NodeNetfilterProfile states ("-" / null on a
# node without iptables); `-o wide` works; `kubectl nfguard check` reads the
# cluster of the current context by default.
# Provider-agnostic: needs KUBECONFIG, kubectl and jq on PATH (e2e/local-cluster.sh up
# exports KUBECONFIG and its kubectl).
# Env: NFGUARD_BIN         the binary (default target/release/nfguard)
#      NFGUARD_E2E_EXPECT_BACKENDS "node=backend ..." whose active backend
#                          (where the rules live) -o json must show; the local
#                          cluster's (e2e-nft=nft e2e-legacy=legacy
#                          e2e-nftables=nft) by default when
#                          NFGUARD_E2E_PROVIDER=local
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'plugin-status: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

bin="${NFGUARD_BIN:-target/release/nfguard}"
[ -x "$bin" ] || fail "no nfguard binary at $bin (cargo build --release --bin nfguard)"
command -v kubectl >/dev/null || fail "kubectl is not on PATH"
command -v jq >/dev/null || fail "jq is not on PATH"
[ -n "${KUBECONFIG:-}" ] || fail "KUBECONFIG is not set"
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
log "ok"
