#!/usr/bin/env bash
# Offline checks of the Helm chart charts/nfguard; tests/it/install_helm.rs runs
# each step as a test of its own:
#   lint       helm lint --strict, with the defaults and with the custom values
#   same       the default render (release nfguard, namespace nfguard-system,
#              CRDs included) equals manifests/ object by object, field by
#              field (scripts/check_helm.py same; the Namespace is Helm's);
#              with webhook.hostNetwork=false it equals manifests/ with the
#              component manifests/webhook-pod-network (kustomize), with
#              requireImageDigests.enabled=true manifests/ with the component
#              manifests/require-image-digests, and scripts/check_manifests.py
#              holds for those renders too
#   monitoring the chart's copies of the rules and the dashboard are
#              monitoring/'s (scripts/sync-monitoring.sh --check); with the
#              three monitoring.*.enabled the render adds exactly the objects
#              of `kustomize build monitoring/` and changes nothing else
#   namespace  a render for the release namespace `other`, monitoring
#              enabled: every namespaced object, RBAC subject, the webhook's
#              service reference and own-namespace exclusion, the reporter's
#              and the controller's admission policies follow it, each PodMonitor selects its component's pods
#              there; then scripts/check_manifests.py's invariants for it
#   values     a render with charts/nfguard/ci/custom-values.yaml (every value
#              changed): the effect of each value; kubernetes-validate
#              --strict for Kubernetes 1.30 and 1.33; the PodDisruptionBudget
#              only with more than one webhook replica
#   refuse     bad values are refused with a clear message
#   readme     charts/nfguard/README.md's values table lists every value
# Usage: scripts/check-helm.sh STEP...   (no STEP: all)
# helm: $NFGUARD_HELM, else built by scripts/go-tool.sh helm (needs Go; no
# helm is a failure, never a skip); kustomize (step monitoring) likewise from
# $NFGUARD_KUSTOMIZE or scripts/go-tool.sh kustomize. The Python modules are those of
# scripts/check-install.sh: without them "skipped: ..." (exit 0), unless
# NFGUARD_REQUIRE_PRIVILEGED=1 or NFGUARD_REQUIRE_INSTALL_TOOLS=1 (CI).
# NFGUARD_CHART: another chart directory (the tests check a broken copy fails).
set -euo pipefail
cd "$(dirname "$0")/.."

CHART=${NFGUARD_CHART:-charts/nfguard}
CUSTOM=charts/nfguard/ci/custom-values.yaml
K8S_VERSIONS=(1.30.0 1.33.0)
MONITORING_ON=(--set monitoring.podMonitors.enabled=true --set monitoring.prometheusRule.enabled=true
  --set monitoring.grafanaDashboard.enabled=true)
PY=${PYTHON:-python3}

die() { echo "check-helm: $*" >&2; exit 1; }
skip_or_fail() {
  if [ "${NFGUARD_REQUIRE_PRIVILEGED:-}" = 1 ] || [ "${NFGUARD_REQUIRE_INSTALL_TOOLS:-}" = 1 ]; then
    die "$1 (required in CI)"
  fi
  echo "skipped: $1"
  exit 0
}

# find_tool NAME ENV_VAR: the path of a Go tool, from ENV_VAR or go-tool.sh.
find_tool() {
  local name=$1 var=$2 dir lock=${NFGUARD_E2E_CACHE:-/var/cache/nfguard-e2e}/tools.lock
  if [ -n "${!var:-}" ]; then
    [ -x "${!var}" ] || die "$var=${!var} is not an executable"
    echo "${!var}"
    return
  fi
  mkdir -p "$(dirname "$lock")"
  # Tests run in parallel: one build at a time (go-tool.sh builds into one place).
  dir=$(flock "$lock" scripts/go-tool.sh "$name") ||
    die "no $name: scripts/go-tool.sh $name failed (it builds $name with Go from the Go module proxy; install Go or set $var)"
  echo "$dir/$name"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

template() { # release-namespace out-file helm-args...
  local ns=$1 out=$2
  shift 2
  "$HELM" template nfguard "$CHART" --namespace "$ns" --include-crds "$@" >"$out" ||
    die "helm template $CHART --namespace $ns $* failed"
}

timed() { # label command...   (keeps the command's exit status)
  local start=$EPOCHREALTIME rc=0
  "${@:2}" || rc=$?
  awk -v what="$1" -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "check-helm: %s took %.2f s\n", what, b - a }'
  return "$rc"
}

step_lint() {
  timed "helm lint --strict" "$HELM" lint --strict "$CHART" || die "helm lint --strict $CHART failed"
  "$HELM" lint --strict "$CHART" -f "$CUSTOM" || die "helm lint --strict $CHART -f $CUSTOM failed"
}

step_same() {
  timed "helm template (defaults)" template nfguard-system "$work/chart.yaml"
  "$PY" scripts/kustomize_render.py manifests >"$work/manifests.yaml"
  "$PY" scripts/check_helm.py same "$work/chart.yaml" "$work/manifests.yaml" ||
    die "the chart's default render differs from manifests/ (above: object and field)"
  # Each opt-in component of manifests/ and the value that renders it agree.
  same_as_component webhook-pod-network --set webhook.hostNetwork=false
  same_as_component require-image-digests --set requireImageDigests.enabled=true
}

# same_as_component COMPONENT HELM_ARGS...: the chart rendered with
# HELM_ARGS equals manifests/ with the kustomize component COMPONENT, and
# scripts/check_manifests.py holds for the latter.
same_as_component() {
  local component=$1 overlay
  shift
  KUSTOMIZE=$(find_tool kustomize NFGUARD_KUSTOMIZE)
  template nfguard-system "$work/chart-$component.yaml" "$@"
  mkdir -p target
  overlay=$(mktemp -d target/check-helm-overlay.XXXXXX)
  printf '%s\n' 'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' \
    'resources: [../../manifests]' "components: [../../manifests/$component]" >"$overlay/kustomization.yaml"
  "$KUSTOMIZE" build "$overlay" >"$work/manifests-$component.yaml" ||
    { rm -rf "$overlay"; die "kustomize build of manifests/ with $component failed"; }
  rm -rf "$overlay"
  "$PY" scripts/check_manifests.py "$work/manifests-$component.yaml" ||
    die "scripts/check_manifests.py rejects manifests/ with the component $component"
  # kustomize re-serializes the CRDs (100.0 becomes 100): compared above already.
  "$PY" - "$work/chart-$component.yaml" "$work/manifests-$component.yaml" <<'PYEOF'
import sys, yaml
for path in sys.argv[1:]:
    objs = [o for o in yaml.safe_load_all(open(path, encoding="utf-8")) if o and o["kind"] != "CustomResourceDefinition"]
    yaml.safe_dump_all(objs, open(path, "w", encoding="utf-8"))
PYEOF
  "$PY" scripts/check_helm.py same "$work/chart-$component.yaml" "$work/manifests-$component.yaml" ||
    die "$* differs from manifests/ with the component $component (above)"
}

step_monitoring() {
  local stale=0
  NFGUARD_CHART=$CHART scripts/sync-monitoring.sh --check || stale=1
  template nfguard-system "$work/chart.yaml"
  template nfguard-system "$work/monitoring-on.yaml" "${MONITORING_ON[@]}"
  "$KUSTOMIZE" build monitoring >"$work/monitoring.yaml" || die "kustomize build monitoring failed"
  "$PY" scripts/check_helm.py monitoring "$work/monitoring-on.yaml" "$work/chart.yaml" "$work/monitoring.yaml" ||
    die "the chart's monitoring differs from \`kustomize build monitoring/\` (above: object and field)"
  [ "$stale" = 0 ] || die "the chart's copies in $CHART/files/ are stale: run scripts/sync-monitoring.sh"
}

step_namespace() {
  template other "$work/other.yaml" "${MONITORING_ON[@]}"
  "$PY" scripts/check_helm.py namespace "$work/other.yaml" other ||
    die "a render for the release namespace other still points somewhere else (above)"
  NFGUARD_NAMESPACE=other "$PY" scripts/check_manifests.py "$work/other.yaml" ||
    die "scripts/check_manifests.py rejects the render for the release namespace other"
}

step_values() {
  template other "$work/custom.yaml" -f "$CUSTOM"
  "$PY" scripts/check_helm.py values "$work/custom.yaml" "$CUSTOM" "$CHART/values.yaml" ||
    die "a value of $CUSTOM has no (or the wrong) effect (above)"
  template other "$work/policy.yaml" -f "$CUSTOM" --set defaultPolicy.enabled=true
  "$PY" scripts/check_helm.py policy "$work/policy.yaml" "$CUSTOM" ||
    die "defaultPolicy.spec does not reach the NetfilterPolicy"
  template other "$work/netpol.yaml" -f "$CUSTOM" --set webhook.networkPolicy.enabled=true
  "$PY" scripts/check_helm.py netpol "$work/netpol.yaml" "$CUSTOM" ||
    die "webhook.networkPolicy.* does not reach the NetworkPolicy"
  template other "$work/single.yaml" --set webhook.replicas=1
  if grep -q '^kind: PodDisruptionBudget' "$work/single.yaml"; then
    die "webhook.replicas=1 still renders a PodDisruptionBudget (minAvailable 1 would block every drain)"
  fi
  # Built-in kinds against the Kubernetes OpenAPI schemas (PodMonitor and
  # PrometheusRule are the Prometheus Operator's: no schema here).
  "$PY" - "$work/custom.yaml" "$work/netpol.yaml" "$work/builtin.yaml" <<'PYEOF'
import sys, yaml
objs = [o for o in yaml.safe_load_all(open(sys.argv[1], encoding="utf-8")) if o]
# The NetworkPolicy with peers is only in the second render.
objs += [o for o in yaml.safe_load_all(open(sys.argv[2], encoding="utf-8")) if o and o["kind"] == "NetworkPolicy"]
builtin = [o for o in objs if o["apiVersion"].split("/")[0] not in ("nfguard.io", "monitoring.coreos.com", "apiextensions.k8s.io")]
yaml.safe_dump_all(builtin, open(sys.argv[3], "w", encoding="utf-8"))
PYEOF
  local kv=(kubernetes-validate) v
  command -v kubernetes-validate >/dev/null || kv=("$PY" -m kubernetes_validate)
  for v in "${K8S_VERSIONS[@]}"; do
    if ! "${kv[@]}" --strict -k "$v" --quiet "$work/builtin.yaml" >"$work/kv.out" 2>&1 ||
      grep -q "Couldn't find schema" "$work/kv.out"; then
      cat "$work/kv.out" >&2
      die "kubernetes-validate --strict -k $v rejects the render with $CUSTOM"
    fi
  done
  echo "check-helm: render with $CUSTOM: kubernetes-validate --strict ${K8S_VERSIONS[*]}: ok"
}

# refuse_with "what" "expected message part" helm-args...
refuse_with() {
  local what=$1 want=$2
  shift 2
  if "$HELM" template nfguard "$CHART" "$@" >/dev/null 2>"$work/err"; then
    die "$what was accepted"
  fi
  grep -qF -- "$want" "$work/err" || { cat "$work/err" >&2; die "$what: refused, but without \"$want\""; }
  local said
  said=$(grep -F -- "$want" "$work/err")
  said=${said%%$'\n'*}
  echo "check-helm: refused $what: ${said#"${said%%[! ]*}"}"
}

step_refuse() {
  refuse_with "webhook.failurePolicy=Sometimes" "value must be one of 'Ignore', 'Fail'" --set webhook.failurePolicy=Sometimes
  refuse_with "a misspelt value (webhook.replica)" "additional properties 'replica' not allowed" --set webhook.replica=3
  refuse_with "log.format=xml" "value must be one of '', 'plain', 'json'" --set log.format=xml
  refuse_with "webhook.timeoutSeconds=31" "/webhook/timeoutSeconds" --set webhook.timeoutSeconds=31
  refuse_with "webhook.timeoutSeconds=8 (not above the webhook's own 8 s)" \
    "must exceed the webhook's own answer deadline (8 s" --set webhook.timeoutSeconds=8
  refuse_with "webhook.timeoutSeconds=12 with NFGUARD_TIMEOUT=12" \
    "must exceed the webhook's own answer deadline (12 s" --set webhook.timeoutSeconds=12 \
    --set 'webhook.extraEnv[0].name=NFGUARD_TIMEOUT' --set-string 'webhook.extraEnv[0].value=12'
  refuse_with "the removed metrics.serviceMonitor (now monitoring.podMonitors)" \
    "additional properties 'serviceMonitor' not allowed" --set metrics.serviceMonitor.enabled=true
  refuse_with "webhook.port=9090 on the node's network (the reporter's metrics.port)" \
    "webhook port 9090 is the reporter's" --set webhook.port=9090
  refuse_with "webhook.metricsPort=9091 on the node's network (reporter.healthPort)" \
    "webhook port 9091 is the reporter's" --set webhook.metricsPort=9091
  refuse_with "webhook.metricsPort equal to webhook.port" \
    "webhook.port and webhook.metricsPort are both 10263" --set webhook.metricsPort=10263
  refuse_with "reporter.hostPaths={/} (the host's whole root)" "/reporter/hostPaths/0" \
    --set 'reporter.hostPaths={/}'
  refuse_with "reporter.hostPaths={/var/lib/../..}" "/reporter/hostPaths/0" \
    --set 'reporter.hostPaths={/var/lib/../..}'
  refuse_with "monitoring.podMonitors.interval=soon" "/monitoring/podMonitors/interval" \
    --set monitoring.podMonitors.interval=soon
  refuse_with "monitoring.grafanaDashboard.namespace=Grafana" "/monitoring/grafanaDashboard/namespace" \
    --set monitoring.grafanaDashboard.namespace=Grafana
  refuse_with "monitoring.prometheusRule.labels overriding app.kubernetes.io/component" \
    "monitoring.prometheusRule.labels: app.kubernetes.io/component is a label nfguard sets itself" \
    --set monitoring.prometheusRule.enabled=true --set 'monitoring.prometheusRule.labels.app\.kubernetes\.io/component=x'
}

step_readme() {
  "$PY" scripts/check_helm.py readme "$CHART/values.yaml" "$CHART/README.md" ||
    die "$CHART/README.md's values table and values.yaml disagree (above)"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(lint same monitoring namespace values refuse readme)
HELM=$(find_tool helm NFGUARD_HELM)
needs_python=0
for s in "${steps[@]}"; do
  case "$s" in
    lint | refuse) ;;
    monitoring) needs_python=1; KUSTOMIZE=$(find_tool kustomize NFGUARD_KUSTOMIZE) ;;
    same | namespace | values | readme) needs_python=1 ;;
    *) die "unknown step $s (lint same monitoring namespace values refuse readme)" ;;
  esac
done
if [ "$needs_python" = 1 ]; then
  command -v "$PY" >/dev/null || skip_or_fail "python3 not found"
  "$PY" -c 'import yaml, jsonschema, kubernetes_validate, cel' 2>/dev/null ||
    skip_or_fail "python modules missing (see scripts/check-install.sh)"
fi
echo "check-helm: $("$HELM" version --short 2>/dev/null || echo helm), chart $CHART"
for s in "${steps[@]}"; do
  "step_$s"
  echo "check-helm: $s: ok"
done
