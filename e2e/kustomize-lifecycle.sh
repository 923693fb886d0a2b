#!/usr/bin/env bash
# The kustomize install's life cycle on a cluster where nfguard was installed
# from manifests/ (e2e/local.sh runs it after scenarios 1 and 2 on that
# install):
#   uninstall  `kubectl delete -k manifests/ --ignore-not-found`, the
#              documented uninstall (docs/install.md; without the flag kubectl
#              exits 1: it deletes the CRDs before the default
#              NetfilterPolicy, whose resource is gone by then, NotFound):
#              every object of manifests/ is gone, the
#              CRDs and the namespace with them; nothing named or labelled
#              nfguard is left in any namespace or cluster-wide
#              (e2e/lifecycle-lib.sh, the check of the Helm uninstall, here
#              without the exceptions Helm keeps); the nodes keep at most the
#              nfguard.io/ labels they had (the controller removes a node's
#              labels when its profile goes, if it still runs: kubectl deletes
#              both at once), never a new one or a taint, and the command
#              docs/install.md gives removes those. The gate goes first:
#              with failurePolicy Fail, a prober's gated dry runs during the
#              delete are denied by nfguard, then admitted, never refused for
#              want of a webhook (manifests/' sortOptions put the webhook
#              configuration first)
# Env: KUBECONFIG, kubectl and jq on PATH.
# Output: `e2e-kustomize: ok: ...` per checked outcome, `e2e-kustomize: FAIL:
# ...` and exit 1 on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/lifecycle-lib.sh
. e2e/lifecycle-lib.sh

NS=nfguard-system
LOG=e2e-kustomize
IMG_INCIDENT=${NFGUARD_E2E_REGISTRY_PULL:?NFGUARD_E2E_REGISTRY_PULL is not set}/nfguard-e2e/incident:1.8.7-nft

step_uninstall() {
  local work left marks after extra
  work=$(mktemp -d)
  trap 'touch "$work/stop"; rm -rf "$work"' RETURN
  kubectl get namespace "$NS" >/dev/null || fail "namespace $NS does not exist: nothing installed"
  kubectl kustomize manifests/ >"$work/manifest.yaml" || fail "cannot render manifests/"
  marks=$(node_marks)
  [ -n "$marks" ] || fail "no node carries an nfguard.io/ label before the uninstall"
  probed_uninstall "$work" "$IMG_INCIDENT" "kubectl delete -k manifests/" \
    kubectl delete -k manifests/ --ignore-not-found --wait=true --timeout=3m
  ok "kubectl delete -k manifests/ --ignore-not-found in $UNINSTALL_SECONDS s ($(grep -c '" deleted' "$work/uninstall.out") objects deleted)"
  left=$(kubectl get -f "$work/manifest.yaml" --ignore-not-found -o name 2>&1) ||
    fail "cannot look up the objects of manifests/: $left"
  [ -z "$left" ] || fail "objects of manifests/ left after kubectl delete -k: $left"
  ok "all $(grep -c '^kind:' "$work/manifest.yaml") objects of manifests/ are gone (CRDs and namespace $NS among them)"
  leftovers_check "kubectl delete -k manifests/ --ignore-not-found" gone "$work/all.json"

  # Node labels: what the controller did not remove before it stopped stays.
  after=$(node_marks)
  extra=$(comm -13 <(echo "$marks") <(echo "$after"))
  [ -z "$extra" ] || fail "after the uninstall nodes carry nfguard.io/ labels or taints they did not have before:
$extra"
  if grep -q ' taint ' <<<"$after"; then fail "nfguard taints left on nodes: $after"; fi
  ok "nodes keep $(grep -c . <<<"$after") of their $(grep -c . <<<"$marks") nfguard.io/ labels, no taint, nothing new"
  # docs/install.md, Uninstall: the command for the labels that stay.
  kubectl label nodes --all nfguard.io/iptables-backend- nfguard.io/iptables-version- nfguard.io/min-reader- \
    >/dev/null || fail "the label removal of docs/install.md failed"
  after=$(node_marks)
  [ -z "$after" ] || fail "nfguard.io/ labels or taints left after the removal docs/install.md gives: $after"
  ok "docs/install.md's label removal leaves no nfguard.io/ label or taint on any node"
}

case "${1:-}" in
  uninstall) "step_$1" ;;
  *) echo "usage: $0 uninstall" >&2; exit 2 ;;
esac
