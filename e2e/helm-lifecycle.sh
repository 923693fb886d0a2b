#!/usr/bin/env bash
# The Helm chart's life cycle on a cluster where nfguard was installed with
# `helm install nfguard charts/nfguard --namespace nfguard-system` (e2e/local.sh
# runs it after the scenarios):
#   upgrade    after a `kubectl patch` of the failure policy (docs/install.md
#              shows it), helm upgrade --reuse-values with log.level=info and
#              webhook.failurePolicy=Fail is refused with a server-side apply
#              conflict naming that field; with --force-conflicts it goes
#              through: every nfguard pod is replaced and Ready with
#              NFGUARD_LOG=info, the webhook configuration says Fail, the
#              caBundle the webhook wrote survives, and the gate still denies
#              the incident image (a server-side dry run)
#   uninstall  helm uninstall: every object of the release is gone; nothing
#              named or labelled nfguard is left in any namespace or
#              cluster-wide but the CRDs (kept by Helm, with the profiles); the
#              namespace holds only what Kubernetes puts in every namespace;
#              then it is deleted; every node's nfguard.io/ labels and taints
#              are what they were before (e2e/lifecycle-lib.sh). The gate
#              goes first: with failurePolicy Fail, a prober's gated dry runs
#              during the uninstall are denied by nfguard, then admitted,
#              never refused for want of a webhook
# Env: KUBECONFIG, kubectl and jq on PATH, NFGUARD_HELM (default: helm on
# PATH), NFGUARD_E2E_REGISTRY_PULL (the registry holding the e2e images).
# Output: `e2e-helm: ok: ...` per checked outcome, `e2e-helm: FAIL: ...` and
# exit 1 on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/lifecycle-lib.sh
. e2e/lifecycle-lib.sh

NS=nfguard-system
RELEASE=nfguard
HELM=${NFGUARD_HELM:-helm}
IMG_INCIDENT=${NFGUARD_E2E_REGISTRY_PULL:?NFGUARD_E2E_REGISTRY_PULL is not set}/nfguard-e2e/incident:1.8.7-nft
COMPONENTS=(reporter controller webhook)

LOG=e2e-helm
helm_() { "$HELM" --namespace "$NS" "$@"; }
release_field() { helm_ status "$RELEASE" -o json | jq -r "$1"; }
ca_bundle() { kubectl get validatingwebhookconfiguration nfguard -o jsonpath='{.webhooks[0].clientConfig.caBundle}'; }

# Pods of a component that are not being deleted: "uid ready env-NFGUARD_LOG" lines.
live_pods() {
  kubectl -n "$NS" get pods -l "app.kubernetes.io/component=$1" -o json | jq -r '
    .items[] | select(.metadata.deletionTimestamp == null)
    | [.metadata.uid,
       ((.status.conditions // []) | map(select(.type == "Ready"))[0].status // "False"),
       ((.spec.containers[0].env // []) | map(select(.name == "NFGUARD_LOG"))[0].value // "-")]
    | join(" ")'
}

want_pods() { # component -> how many pods it should have
  case "$1" in
    reporter) kubectl -n "$NS" get daemonset nfguard-reporter -o jsonpath='{.status.desiredNumberScheduled}' ;;
    *) kubectl -n "$NS" get deployment "nfguard-$1" -o jsonpath='{.spec.replicas}' ;;
  esac
}

step_upgrade() {
  local before ca rev now c pods want uid ready log t0 out
  [ "$(release_field .info.status)" = deployed ] || fail "release $RELEASE is not deployed in $NS"
  before=$(kubectl -n "$NS" get pods -l app.kubernetes.io/name=nfguard -o jsonpath='{.items[*].metadata.uid}')
  ca=$(ca_bundle)
  [ -n "$ca" ] || fail "no caBundle before the upgrade"
  rev=$(release_field .version)
  # An operator switches the failure policy by hand and back (two JSON
  # patches): the field now belongs to kubectl-patch, not to Helm.
  for v in Fail Ignore; do
    kubectl patch validatingwebhookconfiguration nfguard --type=json \
      -p="[{\"op\":\"replace\",\"path\":\"/webhooks/0/failurePolicy\",\"value\":\"$v\"}]" >/dev/null
  done
  t0=$SECONDS
  if out=$(helm_ upgrade "$RELEASE" charts/nfguard --reuse-values \
    --set log.level=info --set webhook.failurePolicy=Fail --wait --timeout 5m 2>&1); then
    fail "helm upgrade changed a field kubectl patch had set, without --force-conflicts: $out"
  fi
  grep -q 'conflict with "kubectl-patch".*failurePolicy' <<<"$out" ||
    fail "helm upgrade failed, but not with the conflict on failurePolicy: $out"
  local conflict
  conflict=$(grep -o 'Apply failed with 1 conflict: .*failurePolicy' <<<"$out" || true)
  ok "after a kubectl patch, helm upgrade is refused: ${conflict%%$'\n'*}"
  helm_ upgrade "$RELEASE" charts/nfguard --reuse-values --force-conflicts \
    --set log.level=info --set webhook.failurePolicy=Fail --wait --timeout 5m >/dev/null ||
    fail "helm upgrade --force-conflicts failed"
  for c in "${COMPONENTS[@]}"; do
    kubectl -n "$NS" rollout status "$([ "$c" = reporter ] && echo daemonset || echo deployment)/nfguard-$c" \
      --timeout=240s >/dev/null || fail "$c did not roll out after the upgrade"
  done
  # The refused upgrade is a revision of its own (failed).
  now="$(release_field .version) $(release_field .info.status)"
  [ "$now" = "$((rev + 2)) deployed" ] || fail "after the upgrade the release is revision $now, want $((rev + 2)) deployed"
  ok "helm upgrade --force-conflicts: revision $rev -> $((rev + 2)) deployed, rolled out $((SECONDS - t0)) s after the first attempt"
  for c in "${COMPONENTS[@]}"; do
    want=$(want_pods "$c")
    # Terminating pods can linger a moment after rollout status returns.
    for _ in $(seq 60); do
      pods=$(live_pods "$c")
      [ "$(grep -c . <<<"$pods")" = "$want" ] && break
      sleep 1
    done
    [ "$(grep -c . <<<"$pods")" = "$want" ] || fail "$c: $(grep -c . <<<"$pods") live pods, want $want: $pods"
    while read -r uid ready log; do
      [[ " $before " != *" $uid "* ]] || fail "$c pod $uid was not replaced by the upgrade"
      [ "$ready" = True ] || fail "$c pod $uid is not Ready after the upgrade"
      [ "$log" = info ] || fail "$c pod $uid has NFGUARD_LOG=$log, want info (log.level)"
    done <<<"$pods"
    ok "$c: all $want pods replaced, Ready, NFGUARD_LOG=info"
  done
  [ "$(kubectl get validatingwebhookconfiguration nfguard -o jsonpath='{.webhooks[0].failurePolicy}')" = Fail ] ||
    fail "webhook.failurePolicy=Fail did not reach the ValidatingWebhookConfiguration"
  [ "$(ca_bundle)" = "$ca" ] || fail "the upgrade changed or dropped the caBundle the webhook wrote"
  ok "failurePolicy Fail; the webhook's caBundle unchanged (${#ca} bytes)"
  if out=$(incident_ds incident-after-upgrade default "$IMG_INCIDENT" | kubectl create --dry-run=server -f - 2>&1); then
    fail "after the upgrade the incident DaemonSet was admitted: $out"
  fi
  denied_by_nfguard "$out" ||
    fail "after the upgrade the incident DaemonSet failed, but not by nfguard: $out"
  grep -qF '[OldReaderNewRules]' <<<"$out" ||
    fail "after the upgrade nfguard denied the incident DaemonSet, but not as [OldReaderNewRules]: $out"
  ok "after the upgrade the gate still denies the incident image ([OldReaderNewRules])"
}

step_uninstall() {
  local work left t0 marks
  [ "$(release_field .info.status)" = deployed ] || fail "release $RELEASE is not deployed in $NS"
  work=$(mktemp -d)
  trap 'touch "$work/stop"; rm -rf "$work"' RETURN
  helm_ get manifest "$RELEASE" >"$work/manifest.yaml"
  marks=$(node_marks)
  [ -n "$marks" ] || fail "no node carries an nfguard.io/ label before the uninstall"
  probed_uninstall "$work" "$IMG_INCIDENT" "helm uninstall" helm_ uninstall "$RELEASE" --wait --timeout 3m
  # When the uninstall began (probed_uninstall waits 2 s after it).
  t0=$((SECONDS - UNINSTALL_SECONDS - 2))
  ok "helm uninstall in $UNINSTALL_SECONDS s"
  left=$(kubectl get -f "$work/manifest.yaml" --ignore-not-found -o name 2>&1) ||
    fail "cannot look up the release's objects: $left"
  [ -z "$left" ] || fail "objects of the release left after helm uninstall: $left"
  ok "all $(grep -c '^kind:' "$work/manifest.yaml") objects of the release are gone"
  # Pods go after their owners, each terminating gracefully: the webhook
  # keeps serving for --shutdown-delay-seconds, then drains (docs/webhook.md).
  for _ in $(seq 90); do
    [ -z "$(kubectl -n "$NS" get pods -l app.kubernetes.io/name=nfguard -o name 2>/dev/null)" ] && break
    sleep 1
  done
  left=$(kubectl -n "$NS" get pods -l app.kubernetes.io/name=nfguard -o name 2>&1)
  [ -z "$left" ] || fail "nfguard's pods still there 90 s after their owners were deleted: $left"
  ok "nfguard's pods terminated $((SECONDS - t0)) s after helm uninstall began"

  # The client CA's ConfigMap is the operator's, made before the install
  # (e2e/local-cluster.sh, docs/install.md): the chart only names it, so Helm
  # leaves it and the operator removes it.
  kubectl -n "$NS" delete configmap nfguard-webhook-client-ca --ignore-not-found >/dev/null ||
    fail "cannot delete the ConfigMap nfguard-webhook-client-ca"

  # Anything else of nfguard's, by name or label, anywhere.
  leftovers_check "helm uninstall" kept "$work/all.json"
  [ "$(node_marks)" = "$marks" ] || fail "helm uninstall changed the nodes' nfguard.io/ labels or taints:
$(diff <(echo "$marks") <(node_marks) || true)"
  ok "every node's nfguard.io/ labels and taints are as before (docs/install.md, Uninstall): $(grep -c . <<<"$marks") of them"
  kubectl get crd nodenetfilterprofiles.nfguard.io netfilterpolicies.nfguard.io >/dev/null ||
    fail "helm uninstall removed the CRDs (Helm keeps crds/)"
  ok "the CRDs stay ($(kubectl get nodenetfilterprofiles -o name | wc -l) NodeNetfilterProfiles with them)"

  # The namespace was made for the install; it holds only what every namespace holds.
  left=$(jq -r --arg ns "$NS" '.items[] | select(.metadata.namespace == $ns)
    | select((.kind == "ServiceAccount" and .metadata.name == "default")
             or (.kind == "ConfigMap" and .metadata.name == "kube-root-ca.crt") | not)
    | "\(.kind) \(.metadata.name)"' "$work/all.json")
  [ -z "$left" ] || fail "namespace $NS is not empty after helm uninstall:
$left"
  kubectl delete namespace "$NS" --wait=true --timeout=120s >/dev/null || fail "cannot delete namespace $NS"
  ok "namespace $NS held only its default ServiceAccount and kube-root-ca.crt; deleted"
}

case "${1:-}" in
  upgrade | uninstall) "step_$1" ;;
  *) echo "usage: $0 upgrade|uninstall" >&2; exit 2 ;;
esac
