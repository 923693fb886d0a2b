#!/usr/bin/env bash
# nfguard's e2e scenarios (e2e/scenarios.sh) on the local cluster
# (e2e/local-cluster.sh): up, push the workload images, run every scenario,
# print diagnostics on failure, down; then check that the machine is as it was
# (network namespaces, mounts, the root namespace's links, routes and
# netfilter rules). scripts/test.sh runs it; it never skips.
# Both install paths: the scenarios run on the Helm install (charts/nfguard);
# then helm upgrade and helm uninstall are checked (e2e/helm-lifecycle.sh),
# nfguard is installed again from manifests/ (kustomize), scenarios 1 and 2
# prove that install and `kubectl delete -k manifests/` removes it
# (e2e/kustomize-lifecycle.sh; docs/e2e.md, "Install paths"); then an earlier
# nfguard is installed and upgraded to this checkout, with kustomize and with
# Helm (e2e/upgrade.sh), each uninstalled again. Last, the controller's
# correctness on 200 hollow nodes (scripts/bench-cluster.sh --check).
# The live Prometheus of the monitoring checks (e2e/lib/monitoring.sh: scenario
# 27, scenario 6's alerts) is built from the Go module proxy while the
# cluster comes up (scripts/go-tool.sh prometheus; cached afterwards).
# Env: KEEP_CLUSTER=1 leaves the cluster up afterwards (no final check);
#      NFGUARD_E2E_ONLY="1 5" runs only those scenarios.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'e2e-local: %s\n' "$*" >&2; }

# What the cluster must not change in the machine's own namespaces.
machine_state() {
  # Each line may legitimately find nothing (grep's exit 1): never fatal here.
  ip netns list | sort || true
  grep -E 'nsfs|nfguard|kubelet|containerd' /proc/self/mountinfo | awk '{print $5}' | sort || true
  ip -o link show | awk -F': ' '{print $2}' | sort || true
  ip -4 route show table all | sort || true
  iptables-legacy-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' || true
  nft list ruleset 2>/dev/null || true
  # Zombies (<defunct>) are dead, only not yet reaped by their parent. The
  # name must be the command itself (argv[0], with or without its path), not
  # a word of another's arguments (a compiler's `--features kubelet-debug`).
  pgrep -a -f '^(/[^ ]*/)?(kube-apiserver|kubelet|kube-proxy|containerd[^ ]*|etcd|docker-registry)( |$)' |
    grep -v '<defunct>' || true
}

before=$(mktemp)
machine_state >"$before"

prom_build=""
prom_out=$(mktemp)
old_build=""
old_out=$(mktemp)
finish() {
  local rc=$? b
  for b in "$prom_build" "$old_build"; do
    if [ -n "$b" ] && kill -0 "$b" 2>/dev/null; then
      kill "$b" 2>/dev/null || true
      wait "$b" 2>/dev/null || true
    fi
  done
  rm -f "$prom_out" "$prom_out.err" "$old_out" "$old_out.err"
  if [ "$rc" != 0 ]; then
    log "collecting diagnostics"
    e2e/local-cluster.sh diagnose >&2 || true
  fi
  if [ "${KEEP_CLUSTER:-}" = 1 ]; then
    log "KEEP_CLUSTER=1: the cluster stays up (e2e/local-cluster.sh down removes it)"
  else
    e2e/local-cluster.sh down
    if ! diff -u "$before" <(machine_state) >&2; then
      log "FAIL: down did not leave the machine as it was (diff above)"
      rc=1
    fi
  fi
  rm -f "$before"
  exit "$rc"
}
trap finish EXIT

start=$SECONDS
# Cold, it takes minutes of CPU: started now, it overlaps the cluster's
# start-up and the image pushes instead of adding to them.
scripts/go-tool.sh prometheus >"$prom_out" 2>"$prom_out.err" &
prom_build=$!
eval "$(NFGUARD_E2E_INSTALL=helm e2e/local-cluster.sh up)"
log "cluster and nfguard ready in $((SECONDS - start)) s"

# The workload images bundling real Debian iptables releases, pushed through
# the loopback address; nodes and nfguard pull them as $NFGUARD_E2E_REGISTRY_PULL.
e2e/push-images.sh

export NFGUARD_E2E_EXPECT_BACKENDS="e2e-nft=nft e2e-legacy=legacy e2e-nftables=nft"
# The node without iptables, kube-proxy in nftables mode: scenarios 19-22.
export NFGUARD_E2E_NFTABLES_NODE=e2e-nftables
t=$SECONDS
if ! wait "$prom_build"; then
  cat "$prom_out.err" >&2
  log "FAIL: building prometheus (scripts/go-tool.sh prometheus) failed"
  exit 1
fi
prom_build=""
NFGUARD_E2E_PROMETHEUS="$(cat "$prom_out")/prometheus"
export NFGUARD_E2E_PROMETHEUS
log "prometheus ready ($(grep -o 'built in [0-9]* s' "$prom_out.err" || echo cached); waited $((SECONDS - t)) s for it after the image pushes)"
# The earlier nfguard of e2e/upgrade.sh: cold, a dev-profile build of the
# commit's crate on this checkout's built dependencies (~45 s here). Built
# beside the scenarios, at the lowest CPU priority so they keep the cores
# they ask for, instead of after them; cached afterwards.
if [ -z "${NFGUARD_E2E_ONLY:-}" ]; then
  nice -n 19 e2e/upgrade.sh prebuild >"$old_out" 2>"$old_out.err" &
  old_build=$!
fi
e2e/scenarios.sh
log "scenarios done after $((SECONDS - start)) s"
e2e/plugin-status.sh

# The other half of the install paths (skipped with NFGUARD_E2E_ONLY, which
# asks for some scenarios only).
if [ -z "${NFGUARD_E2E_ONLY:-}" ]; then
  t=$SECONDS
  e2e/helm-lifecycle.sh upgrade
  e2e/helm-lifecycle.sh uninstall
  log "helm upgrade and uninstall checked in $((SECONDS - t)) s"
  t=$SECONDS
  e2e/local-cluster.sh install kustomize
  NFGUARD_E2E_ONLY="1 2" e2e/scenarios.sh
  e2e/kustomize-lifecycle.sh uninstall
  log "kustomize install, scenarios 1, 2 and uninstall in $((SECONDS - t)) s; all done after $((SECONDS - start)) s"
  t=$SECONDS
  if ! wait "$old_build"; then
    cat "$old_out.err" >&2
    log "FAIL: building the earlier nfguard (e2e/upgrade.sh prebuild) failed"
    exit 1
  fi
  old_build=""
  log "the earlier nfguard ready ($(grep -o 'built nfguard at [0-9a-f]* in [0-9]* s' "$old_out.err" || echo cached); waited $((SECONDS - t)) s for it)"
  t=$SECONDS
  e2e/upgrade.sh kustomize
  e2e/kustomize-lifecycle.sh uninstall
  log "kustomize upgrade from an earlier nfguard and uninstall in $((SECONDS - t)) s"
  t=$SECONDS
  e2e/upgrade.sh helm
  e2e/helm-lifecycle.sh uninstall
  log "helm upgrade from an earlier nfguard and uninstall in $((SECONDS - t)) s; all done after $((SECONDS - start)) s"
fi

# The controller on 200 hollow nodes x 5 pods (scripts/bench-cluster.sh
# --check, not timed): every node converges, a restart with nothing changed
# writes nothing, one node's change writes only for that node. It brings up
# its own cluster in bench mode, so this one goes first; the machine check
# in finish covers both.
if [ -z "${NFGUARD_E2E_ONLY:-}" ] && [ "${KEEP_CLUSTER:-}" != 1 ]; then
  t=$SECONDS
  e2e/local-cluster.sh down
  scripts/bench-cluster.sh --check 200 5
  log "hollow-node check in $((SECONDS - t)) s; all done after $((SECONDS - start)) s"
fi
