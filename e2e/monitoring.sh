# shellcheck shell=bash
# shellcheck disable=SC2034 # CURRENT and WHY are read by e2e/scenarios.sh
# nfguard's monitoring, live (sourced by e2e/scenarios.sh; local provider
# only): a real Prometheus scrapes the three components as
# monitoring/podmonitors.yaml says and evaluates monitoring/prometheus-rules.yaml,
# and the alerts fire and resolve in the scenarios that cause them.
#
# NFGUARD_E2E_PROMETHEUS  the prometheus binary (e2e/local.sh builds it:
#                         scripts/go-tool.sh prometheus); unset, scenario 27
#                         is not in the list and the alert hooks say `skip:`
#
# monitoring_up (before the scenarios, when 6 or 27 is selected):
#   - the Prometheus Operator's PodMonitor and PrometheusRule CRDs, from its Go
#     module (tools/prometheus-operator pins v0.85.0; scripts/go-module-dir.sh),
#     applied to the cluster, then `kubectl apply --server-side -k monitoring/`
#     validated against their schemas by the API server;
#   - Prometheus in the control plane's network namespace (listening on its
#     loopback; it reaches only the cluster's own addresses), its
#     scrape_configs translated from the PodMonitors by
#     scripts/prometheus_config.py (kubernetes_sd pod role, the shipped
#     selectors, port name, job relabelings; the reporter over HTTPS with the
#     token of the Secret nfguard-metrics-scraper), its rules the
#     PrometheusRule's spec. Test-only: every scrape and evaluation each 2 s,
#     and every alert's `for:` shortened to 5 s in the test's copy (the
#     shipped values are 2m to 1h; scenario 6 alone lasts ~100 s).
# expect_alert firing|gone ALERT [LABEL=VALUE...] (hooks in the scenarios):
#   waits until /api/v1/alerts lists ALERT with those labels firing, or lists
#   it no more.
# monitoring_down (after the last scenario): Prometheus stopped, the
#   monitoring objects, its identity and the CRDs deleted.
#
# Scenario 27 (s27_monitoring): the CRD schemas refuse a malformed PodMonitor
# and accept the Helm chart's rendered monitoring objects; every PodMonitor
# target is up (the reporter's over HTTPS with the token, its series carry
# node); an invalid NetfilterPolicy fires NfguardPolicyInvalid, deleting it
# resolves it; a denied rollout fires no alert (a denial is nfguard doing its
# job) and shows on the dashboard; refused writes of the controller and of a
# reporter (a ValidatingAdmissionPolicy) and a malformed AdmissionReview are
# counted, and both writers recover; every dashboard panel's query returns
# data from the live Prometheus over the run (37 of 37); no alert fires that
# a scenario did not cause.

PROM_BIN=${NFGUARD_E2E_PROMETHEUS:-}
# Below the kernel's ephemeral range (32768-60999): a listener there can find
# its port taken by one of the control plane's own outgoing connections (a
# whole run once timed out waiting for Prometheus on 39090; its log was gone).
PROM_PORT=29090
PROM_INTERVAL=2s
PROM_MAX_FOR=5s
PROM_DIR=""
PROM_PID=""
PROM_STARTED=0
PROM_OPERATOR_MODULE=github.com/prometheus-operator/prometheus-operator
PROM_CRDS=(monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_prometheusrules.yaml)
PROM_NS=nfguard-e2e-monitoring
MONITORING_SCENARIOS="27"
[ -z "$PROM_BIN" ] || ALL_SCENARIOS+=" $MONITORING_SCENARIOS"

# prom_api PATH [CURL_ARGS...]: Prometheus' HTTP API, from inside the
# control plane's namespace (the only place it listens); bounded answer.
prom_api() {
  local path=$1
  shift
  "$REPO/e2e/local-cluster.sh" cp curl -fsS --max-time 10 --max-filesize 8000000 -G \
    "http://127.0.0.1:$PROM_PORT$path" "$@" </dev/null
}
# prom_query EXPR: the instant vector's result (JSON array).
prom_query() {
  local out
  out=$(prom_api /api/v1/query --data-urlencode "query=$1") || return 1
  jq -c '.data.result' <<<"$out"
}

# LABEL=VALUE... as a JSON object.
want_labels() { jq -nc '[$ARGS.positional[] | capture("^(?<key>[^=]+)=(?<value>.*)$")] | from_entries' --args "$@"; }

# The alert ALERT with the labels LABEL=VALUE...: "firing", "pending" or "none".
alert_state() {
  local name=$1 want out
  shift
  want=$(want_labels "$@")
  out=$(prom_api /api/v1/alerts) || { echo unknown; return 0; }
  jq -r --arg n "$name" --argjson want "$want" '
    [.data.alerts[] | select(.labels.alertname == $n)
      | select(.labels as $l | $want | to_entries | all(.value == $l[.key])) | .state]
    | if length == 0 then "none" elif any(. == "firing") then "firing" else .[0] end' <<<"$out"
}
alert_is() { # STATE ALERT LABELS...
  local want=$1 s
  shift
  s=$(alert_state "$@")
  WHY="$1 $(printf '%s ' "${@:2}")is $s"
  [ "$s" = "$want" ]
}
alert_summary() { # ALERT LABELS...: the firing alert's summary annotation
  local name=$1 want out
  shift
  want=$(want_labels "$@")
  out=$(prom_api /api/v1/alerts) || return 0
  jq -r --arg n "$name" --argjson want "$want" '
    [.data.alerts[] | select(.labels.alertname == $n and .state == "firing")
      | select(.labels as $l | $want | to_entries | all(.value == $l[.key]))][0].annotations.summary // ""' <<<"$out"
}

# The alerts the scenarios cause, "ALERT [LABEL=VALUE...]" (expect_alert
# firing and caused_alert add to it): scenario 27 fails on any other alert
# firing. An increase() over 10-15 min keeps some firing long after their
# event (scenario 6's write failures until scenario 27 in a full run).
CAUSED_ALERTS=()
caused_alert() { CAUSED_ALERTS+=("$*"); }
# Caused by the e2e cluster itself, in every run: look-ups that must fail.
# The reporter's image (ghcr.io/nfguard/nfguard:e2e) is loaded into the
# nodes and served by no registry nfguard reaches, and the webhook reads it
# at every reporter pod's admission (hostNetwork + NET_ADMIN); scenario 23's
# writer is named by a loopback address the egress policy refuses in the
# webhook's pod; scenario 25 admits its private image without a pull secret.
# Together they keep failed look-ups above a quarter of the cache misses of
# some 10-minute windows, and in which ones depends on the machine's speed
# (scenarios 6, 24, 25 and 27 alone had it fire, then resolve before
# scenario 27's check).
caused_alert NfguardRegistryLookupsFailing

# deleted_pod POD...: pods a scenario deletes on purpose. Each one's scrape
# target is down until service discovery drops it, which can raise
# NfguardTargetDown for that pod (the rules' `for` is shortened here).
deleted_pod() {
  local p
  for p in "$@"; do caused_alert NfguardTargetDown "pod=$p"; done
}
# deleted_pods SELECTOR [FIELD_SELECTOR]: deleted_pod for the nfguard pods
# they select now.
deleted_pods() {
  local out names=()
  out=$(kubectl -n "$NS" get pods -l "$1" ${2:+--field-selector "$2"} -o jsonpath='{.items[*].metadata.name}') || true
  read -r -a names <<<"$out"
  deleted_pod "${names[@]}"
}

# expect_alert firing|gone ALERT [LABEL=VALUE...]: a hook for the scenarios.
expect_alert() {
  local mode=$1 name=$2
  shift 2
  [ "$mode" != firing ] || caused_alert "$name" "$@"
  if [ -z "$PROM_PID" ]; then
    skip "alert $name $mode: no live Prometheus (NFGUARD_E2E_PROMETHEUS is not set)"
    return 0
  fi
  case "$mode" in
    firing)
      wait_for 90 "alert $name $* to fire in the live Prometheus" alert_is firing "$name" "$@"
      ok "alert $name fires ($*) after ${WAITED} s: $(alert_summary "$name" "$@")"
      ;;
    gone)
      wait_for 120 "alert $name $* to resolve in the live Prometheus" alert_is none "$name" "$@"
      ok "alert $name resolved ($*) after ${WAITED} s"
      ;;
    *) fail "expect_alert: mode $mode is neither firing nor gone" ;;
  esac
}

# The running pods of a component, and how many of them Prometheus scrapes
# successfully under the component's job.
component_pods() {
  kubectl -n "$NS" get pods -l "app.kubernetes.io/name=nfguard,app.kubernetes.io/component=$1" \
    --field-selector=status.phase=Running -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'
}
targets_up() {
  local c want got
  for c in webhook controller reporter; do
    want=$(component_pods "$c" | grep -c . || true)
    got=$(prom_query "count(up{job=\"nfguard-$c\"} == 1)" | jq -r '.[0].value[1] // "0"') || got=0
    WHY="job nfguard-$c: $got of $want pods scraped"
    [ "$want" -ge 1 ] && [ "$got" = "$want" ] || return 1
  done
}
# prom_ready: Prometheus answers /-/ready; otherwise WHY says what its log
# last said, and whether it is still running (the log goes with the cluster).
prom_ready() {
  prom_api /-/ready >/dev/null 2>&1 && return 0
  WHY="its log: $(tail -n 3 "$PROM_DIR/prometheus.log" 2>/dev/null | tr '\n' ' ')"
  kill -0 "$PROM_PID" 2>/dev/null || WHY="Prometheus exited; $WHY"
  return 1
}

prom_start() {
  local module crds t cadata api token version c
  PROM_DIR=${NFGUARD_E2E_LOG_DIR:?monitoring needs the local provider (NFGUARD_E2E_LOG_DIR)}/prometheus
  rm -rf "$PROM_DIR"
  mkdir -p "$PROM_DIR/data" "$PROM_DIR/secrets/$NS/nfguard-metrics-scraper"
  chmod 700 "$PROM_DIR"

  # The operator's CRDs, from its module, and monitoring/ against them.
  module=$("$REPO/scripts/go-module-dir.sh" prometheus-operator "$PROM_OPERATOR_MODULE")
  crds=$module/example/prometheus-operator-crd
  t=$SECONDS
  for c in "${PROM_CRDS[@]}"; do
    kubectl apply --server-side -f "$crds/$c" >/dev/null || fail "applying $c from $PROM_OPERATOR_MODULE failed"
  done
  kubectl wait --for=condition=Established --timeout=60s crd/podmonitors.monitoring.coreos.com \
    crd/prometheusrules.monitoring.coreos.com >/dev/null
  kubectl apply --server-side -k "$REPO/monitoring" >"$PROM_DIR/apply.log" 2>&1 ||
    fail "kubectl apply --server-side -k monitoring/ against the operator's CRDs failed: $(cat "$PROM_DIR/apply.log")"
  ok "the Prometheus Operator's PodMonitor and PrometheusRule CRDs (${module##*/}) applied; kubectl apply --server-side -k monitoring/ passes their schemas: $(tr '\n' ';' <"$PROM_DIR/apply.log")"

  # Prometheus' own identity: pods of nfguard's namespace, for kubernetes_sd.
  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $PROM_NS, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: $PROM_NS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: nfguard-e2e-prometheus, namespace: $NS}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: nfguard-e2e-prometheus, namespace: $NS}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: nfguard-e2e-prometheus}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: $PROM_NS}]
YAML
  kubectl -n "$PROM_NS" create token prometheus --duration=2h >"$PROM_DIR/sd-token"
  # What the operator would mount: the scraper Secret's token (filled by the
  # API server's token controller).
  token=""
  for _ in $(seq 30); do
    token=$(get secret nfguard-metrics-scraper '{.data.token}' -n "$NS")
    [ -z "$token" ] || break
    sleep 1
  done
  [ -n "$token" ] || fail "Secret $NS/nfguard-metrics-scraper has no token (the token controller did not fill it)"
  base64 -d <<<"$token" >"$PROM_DIR/secrets/$NS/nfguard-metrics-scraper/token"
  cadata=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  base64 -d <<<"$cadata" >"$PROM_DIR/ca.crt"
  api=$(kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}')
  [ "$api" != : ] || fail "cannot find the API server's address"

  python3 "$REPO/scripts/prometheus_config.py" rules "$REPO/monitoring/prometheus-rules.yaml" \
    --max-for "$PROM_MAX_FOR" >"$PROM_DIR/rules.yaml" 2>"$PROM_DIR/rules.log" ||
    fail "translating the PrometheusRule failed: $(cat "$PROM_DIR/rules.log")"
  python3 "$REPO/scripts/prometheus_config.py" scrape "$REPO/monitoring/podmonitors.yaml" \
    --api-server "https://$api" --ca-file "$PROM_DIR/ca.crt" --token-file "$PROM_DIR/sd-token" \
    --secrets-dir "$PROM_DIR/secrets" --interval "$PROM_INTERVAL" --rule-file "$PROM_DIR/rules.yaml" \
    >"$PROM_DIR/prometheus.yml" || fail "translating the PodMonitors failed"
  ok "prometheus.yml from the PodMonitors ($(grep -c '^- job_name' "$PROM_DIR/prometheus.yml") jobs), rules from the PrometheusRule ($(cat "$PROM_DIR/rules.log"))"

  # In the control plane's namespace; its own session, none of this shell's
  # files (the cluster lock above all). local-cluster.sh down kills it with
  # everything else there.
  (
    for fd in "/proc/$BASHPID/fd"/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null
    done
    exec setsid "$REPO/e2e/local-cluster.sh" cp "$PROM_BIN" --config.file="$PROM_DIR/prometheus.yml" \
      --storage.tsdb.path="$PROM_DIR/data" --storage.tsdb.retention.time=3h \
      --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn
  ) >"$PROM_DIR/prometheus.log" 2>&1 </dev/null &
  PROM_PID=$!
  PROM_STARTED=$(date -u +%s)
  wait_for 60 "Prometheus to be ready" prom_ready
  wait_for 120 "every nfguard pod to be scraped" targets_up
  version=$("$PROM_BIN" --version 2>&1) || true
  version=${version%%$'\n'*}
  ok "live ${version%% (*} ready (pid $PROM_PID, control-plane namespace, 127.0.0.1:$PROM_PORT); every webhook, controller and reporter pod scraped ($((SECONDS - t)) s)"
}

prom_stop() {
  local rc=0
  if [ -n "$PROM_PID" ]; then
    kill "$PROM_PID" 2>/dev/null || true
    wait "$PROM_PID" 2>/dev/null || true
    PROM_PID=""
  fi
  kubectl delete -k "$REPO/monitoring" --ignore-not-found --wait=true >/dev/null || rc=1
  kubectl -n "$NS" delete role,rolebinding nfguard-e2e-prometheus --ignore-not-found >/dev/null || rc=1
  kubectl delete namespace "$PROM_NS" --ignore-not-found --wait=true --timeout=120s >/dev/null || rc=1
  kubectl delete crd podmonitors.monitoring.coreos.com prometheusrules.monitoring.coreos.com \
    --ignore-not-found --wait=true >/dev/null || rc=1
  [ -z "$PROM_DIR" ] || rm -rf "$PROM_DIR"
  return "$rc"
}

monitoring_up() {
  [ -n "$PROM_BIN" ] || return 0
  selected 6 || selected 27 || return 0
  CURRENT="monitoring up"
  prom_start
}
monitoring_down() {
  local t=$SECONDS
  [ -n "$PROM_PID" ] || return 0
  CURRENT="monitoring down"
  prom_stop || fail "removing the live Prometheus and the monitoring objects did not complete"
  ok "live Prometheus stopped; the monitoring objects, its identity and the operator's CRDs deleted ($((SECONDS - t)) s)"
}

# ---- 27. monitoring, live -------------------------------------------------------------------
s27_crd_schemas() {
  local out render
  # A malformed PodMonitor is refused by the CRD's schema: the validation is real.
  if out=$(kubectl apply --server-side --dry-run=server -f - 2>&1 <<YAML
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: nfguard-e2e-malformed, namespace: $NS}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: nfguard}}
  podMetricsEndpoints: [{port: metrics, scheme: ftp}]
YAML
  ); then
    fail "a PodMonitor with scheme ftp passed the operator's CRD schema: $out"
  fi
  grep -qF 'scheme' <<<"$out" || fail "the malformed PodMonitor was refused, but not for its scheme: $out"
  ok "the CRD schema refuses a PodMonitor with scheme ftp: $out"
  # The Helm chart's monitoring objects: a server-side dry run against the same schemas.
  render=$("${NFGUARD_HELM:-helm}" template nfguard "$REPO/charts/nfguard" --namespace "$NS" \
    --set monitoring.podMonitors.enabled=true --set monitoring.prometheusRule.enabled=true \
    --show-only templates/podmonitors.yaml --show-only templates/prometheus-rule.yaml) ||
    fail "helm template of the chart's monitoring failed"
  out=$(kubectl apply --server-side --dry-run=server --force-conflicts -f - <<<"$render" 2>&1) ||
    fail "the chart's PodMonitors and PrometheusRule fail the operator's CRD schemas: $out"
  ok "the Helm chart's rendered PodMonitors and PrometheusRule pass the same schemas (server-side dry run): $(tr '\n' ';' <<<"$out")"
}

s27_targets() {
  local targets n bad
  wait_for 120 "every nfguard pod to be scraped" targets_up
  targets=$(prom_api /api/v1/targets --data-urlencode state=active) || fail "cannot read /api/v1/targets"
  bad=$(jq -r '.data.activeTargets[] | select(.labels.job | startswith("nfguard-"))
    | select(.health != "up") | "\(.labels.job) \(.scrapeUrl): \(.lastError)"' <<<"$targets")
  [ -z "$bad" ] || fail "targets not up: $bad"
  jq -r '.data.activeTargets[] | select(.labels.job | startswith("nfguard-"))
    | "\(.labels.job) \(.scrapeUrl) pod=\(.labels.pod) node=\(.labels.node // "-") \(.health)"' <<<"$targets" | sort | show
  bad=$(jq -r '.data.activeTargets[] | select(.labels.job == "nfguard-reporter")
    | select((.scrapeUrl | startswith("https://")) | not) | .scrapeUrl' <<<"$targets")
  [ -z "$bad" ] || fail "reporter targets not scraped over HTTPS: $bad"
  for n in "${NODES[@]}"; do
    [ "$(prom_query "up{job=\"nfguard-reporter\", node=\"$n\"} == 1" | jq length)" = 1 ] ||
      fail "no reporter target labelled node=$n is up"
  done
  ok "jobs nfguard-webhook, nfguard-controller, nfguard-reporter as the PodMonitors name them; every reporter over HTTPS with the scraper's token, labelled with its node (${NODES[*]})"
}

s27_invalid_policy() {
  defer kubectl delete netfilterpolicy nfguard-e2e-s27-invalid --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-s27-invalid, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Warn
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: nfguard-e2e-s27-none}}
  exemptImages: ["a["]
YAML
  expect_alert firing NfguardPolicyInvalid
  kubectl delete netfilterpolicy nfguard-e2e-s27-invalid >/dev/null
  expect_alert gone NfguardPolicyInvalid
}

firing_alerts() {
  local out
  out=$(prom_api /api/v1/alerts) || return 1
  jq -r '[.data.alerts[] | select(.state == "firing") | .labels.alertname] | unique | join(" ")' <<<"$out"
}
deny_count() {
  prom_query 'sum(nfguard_webhook_verdicts_total{verdict="deny"})' | jq -r '.[0].value[1] // "0"'
}
deny_counted() { # BEFORE
  local now
  now=$(deny_count)
  WHY="denials counted: $now (before: $1)"
  [ "${now%.*}" -gt "${1%.*}" ]
}

s27_denied_rollout() {
  local ns=nfguard-e2e-s27 before_alerts before after_alerts a
  scenario_ns "$ns"
  before_alerts=$(firing_alerts)
  before=$(deny_count)
  incident_denied "$ns"
  wait_for 60 "the webhook's denial to reach Prometheus" deny_counted "$before"
  ok "the incident DaemonSet denied; Prometheus counts $(deny_count) denial(s) (before: $before)"
  # Two evaluation cycles past every (shortened) `for:`: nothing new fires
  # (what fired before may resolve meanwhile: windows of earlier scenarios).
  sleep 10
  after_alerts=$(firing_alerts)
  for a in $after_alerts; do
    [[ " $before_alerts " == *" $a "* ]] ||
      fail "the denied rollout made $a fire (firing before: ${before_alerts:-none}): a denial is not an alert"
  done
  ok "the denied rollout fires no alert (firing before: ${before_alerts:-none}; after: ${after_alerts:-none})"
}

# A value of the live Prometheus: EXPR's first sample ("0" when empty).
prom_value() {
  local r
  r=$(prom_query "$1") || { echo 0; return 0; }
  jq -r '.[0].value[1] // "0"' <<<"$r"
}
prom_above() { # EXPR MIN: EXPR's value is above MIN
  local v
  v=$(prom_value "$1")
  WHY="$1 is $v"
  awk -v v="$v" -v m="$2" 'BEGIN { exit !(v + 0 > m + 0) }'
}

# Refused writes, for real: a ValidatingAdmissionPolicy (what any cluster
# admin may add) refuses the status of one NetfilterPolicy, and the status
# writes of one node's reporter. The controller counts its refused write
# (reconcile_errors_total{stage="policy_status"}), the reporter its own
# (status_write_failures_total, from its restart: a new process writes at
# once); both keep running and write at their retry once the refusal is gone.
S27_REFUSED=nfguard-e2e-s27-status-refused
S27_VAP=nfguard-e2e-s27-refuse-status
S27_NODE=""
s27_status_refused() { # the API server refuses that status (the VAP is in force)
  local out
  if out=$(kubectl patch netfilterpolicy "$S27_REFUSED" --subresource=status --type=merge \
    -p '{"status":{"observedGeneration":0}}' --dry-run=server 2>&1); then
    WHY="a status patch still passes: $out"
    return 1
  fi
  WHY="refused, but not by the e2e's policy: $out"
  grep -qF 'e2e: the status of this NetfilterPolicy is refused' <<<"$out"
}
s27_status_written() {
  local g o
  g=$(get netfilterpolicy "$S27_REFUSED" '{.metadata.generation}')
  o=$(get netfilterpolicy "$S27_REFUSED" '{.status.observedGeneration}')
  WHY="generation $g, status.observedGeneration ${o:-none}"
  [ -n "$g" ] && [ "$o" = "$g" ]
}
s27_reporter_pod() { # "POD READY" of each reporter pod on S27_NODE
  kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter --field-selector "spec.nodeName=$S27_NODE" \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.containerStatuses[0].ready}{"\n"}{end}'
}
s27_reporter_ready() { # OLD_POD: a new reporter pod on S27_NODE is ready (it wrote)
  local pods
  pods=$(s27_reporter_pod)
  WHY="reporter pods on $S27_NODE: $(tr '\n' ' ' <<<"$pods")"
  grep -q "true$" <<<"$pods" && ! grep -q "^$1 " <<<"$pods"
}
s27_refuse_writes() {
  local t=$SECONDS before old
  S27_NODE=${NODES[0]}
  defer kubectl delete netfilterpolicy "$S27_REFUSED" --ignore-not-found
  defer kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy "$S27_VAP" --ignore-not-found
  before=$(prom_value 'sum(nfguard_controller_reconcile_errors_total{stage="policy_status"})')
  kubectl apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: $S27_VAP, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [nfguard.io]
        apiVersions: ["*"]
        operations: [UPDATE]
        resources: [netfilterpolicies/status, nodenetfilterprofiles/status]
  validations:
    - expression: "request.resource.resource != 'netfilterpolicies' || object.metadata.name != '$S27_REFUSED'"
      message: "e2e: the status of this NetfilterPolicy is refused"
    - expression: "request.resource.resource != 'nodenetfilterprofiles' || object.metadata.name != '$S27_NODE' || request.userInfo.username != 'system:serviceaccount:$NS:nfguard-reporter'"
      message: "e2e: this reporter's status writes are refused"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: $S27_VAP, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  policyName: $S27_VAP
  validationActions: [Deny]
YAML
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: $S27_REFUSED, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Warn
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: nfguard-e2e-s27-none}}
YAML
  wait_for 60 "the API server to refuse the status of NetfilterPolicy $S27_REFUSED" s27_status_refused
  # A new generation: the controller writes its status now, surely refused
  # (its first write may have come before the refusal was in force).
  kubectl patch netfilterpolicy "$S27_REFUSED" --type=merge \
    -p '{"spec":{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"nfguard-e2e-s27-none-2"}}}}' >/dev/null
  # A new reporter process on S27_NODE: its first write, refused, and its
  # retries (backing off from 1 s).
  old=$(s27_reporter_pod)
  old=${old%% *}
  [ -n "$old" ] || fail "no reporter pod on $S27_NODE"
  deleted_pod "$old"
  kubectl -n "$NS" delete pod "$old" --wait=false >/dev/null
  wait_for 60 "the controller's refused status write to reach Prometheus" prom_above \
    'sum(nfguard_controller_reconcile_errors_total{stage="policy_status"})' "$before"
  caused_alert NfguardControllerReconcileErrors stage=policy_status
  ok "a ValidatingAdmissionPolicy refuses the status of NetfilterPolicy $S27_REFUSED: the controller counts reconcile_errors_total{stage=\"policy_status\"} $before -> $(prom_value 'sum(nfguard_controller_reconcile_errors_total{stage="policy_status"})') ($((SECONDS - t)) s)"
  # The panel's own expression: a rise Prometheus saw in the new process.
  wait_for 90 "the reporter on $S27_NODE to fail its refused writes, as Prometheus sees it" prom_above \
    "sum(increase(nfguard_reporter_status_write_failures_total{node=\"$S27_NODE\"}[1m]))" 0
  expect_alert firing NfguardReporterWriteFailures "node=$S27_NODE"
  ok "the reporter on $S27_NODE (new pod $(s27_reporter_pod | tr '\n' ' ')) counts its refused status writes: status_write_failures_total{node=\"$S27_NODE\"} $(prom_value "sum(nfguard_reporter_status_write_failures_total{node=\"$S27_NODE\"})") ($((SECONDS - t)) s)"
  S27_OLD_REPORTER=$old
}
s27_writes_recover() {
  local t=$SECONDS
  kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy "$S27_VAP" >/dev/null
  wait_for 60 "the reporter on $S27_NODE to write at its retry (ready)" s27_reporter_ready "$S27_OLD_REPORTER"
  ok "the refusal lifted: the reporter on $S27_NODE wrote at its retry ($WHY; ${WAITED} s)"
  # The controller's retry comes within 30 s (src/controller/policy_status.rs).
  wait_for 90 "the controller to write the status of $S27_REFUSED at its retry" s27_status_written
  [ "$(get deployment nfguard-controller '{.status.availableReplicas}' -n "$NS")" -ge 1 ] ||
    fail "no controller replica available after the refused writes"
  ok "the controller wrote the status of $S27_REFUSED at its retry ($WHY), still running ($((SECONDS - t)) s)"
  kubectl delete netfilterpolicy "$S27_REFUSED" >/dev/null
}

# Requests the webhook does not judge, for real: a malformed AdmissionReview
# sent as the API server sends its reviews (from the control plane's
# namespace, with the API server's webhook client certificate, to the
# webhook's endpoint as the Service's name): HTTP 400, counted by cause.
s27_webhook_unjudged() {
  local cert=${NFGUARD_E2E_WEBHOOK_CLIENT_CERT:-} host addr port out before i
  [ -n "$cert" ] || fail "NFGUARD_E2E_WEBHOOK_CLIENT_CERT is not set (e2e/local-cluster.sh up exports it)"
  host=nfguard-webhook.$NS.svc
  addr=$(kubectl -n "$NS" get endpointslices -l kubernetes.io/service-name=nfguard-webhook \
    -o jsonpath='{.items[0].endpoints[0].addresses[0]} {.items[0].ports[0].port}')
  port=${addr#* }
  addr=${addr% *}
  if [ -z "$addr" ] || [ -z "$port" ]; then fail "the Service nfguard-webhook has no endpoint"; fi
  get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}' | base64 -d >"$PROM_DIR/webhook-ca.crt"
  before=$(prom_value 'sum(nfguard_webhook_rejected_requests_total{cause="malformed"})')
  # Two rounds a scrape apart: the counter's series appears with the first,
  # the second is an increase that rate() and the alert can see.
  for i in 1 2; do
    out=$("$REPO/e2e/local-cluster.sh" cp curl -sS --http1.1 --max-time 10 --cacert "$PROM_DIR/webhook-ca.crt" \
      --cert "$cert.crt" --key "$cert.key" --resolve "$host:$port:$addr" -H 'Content-Type: application/json' \
      --data-binary '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ' \
      -w '\nHTTP %{http_code}\n' "https://$host:$port/validate" </dev/null 2>&1) || fail "sending the malformed review failed: $out"
    grep -qxF 'HTTP 400' <<<"$out" || fail "the malformed review was not answered 400: $out"
    if grep -qF '"allowed"' <<<"$out"; then fail "the malformed review was judged: $out"; fi
    wait_for 30 "the webhook's rejected request to reach Prometheus" prom_above \
      'sum(nfguard_webhook_rejected_requests_total{cause="malformed"})' "$((${before%.*} + i - 1))"
  done
  caused_alert NfguardWebhookErrors
  ok "a truncated AdmissionReview from the control plane with the API server's client certificate is answered 400 and counted: rejected_requests_total{cause=\"malformed\"} $before -> $(prom_value 'sum(nfguard_webhook_rejected_requests_total{cause="malformed"})'):"
  show <<<"$out"
}

# Every panel's query, over the run so far: a range query must return a series.
s27_dashboard() {
  local panels line panel expr out now n=0 empty=()
  panels=$(python3 "$REPO/scripts/prometheus_config.py" panels "$REPO/monitoring/grafana-dashboard.json") ||
    fail "reading the dashboard's queries failed"
  now=$(date -u +%s)
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    panel=$(jq -r .panel <<<"$line")
    expr=$(jq -r .expr <<<"$line")
    out=$(prom_api /api/v1/query_range --data-urlencode "query=$expr" --data-urlencode "start=$PROM_STARTED" \
      --data-urlencode "end=$now" --data-urlencode step=5) || fail "panel '$panel': the query failed: $expr"
    n=$((n + 1))
    [ "$(jq '.data.result | length' <<<"$out")" != 0 ] || empty+=("$panel: $expr")
  done <<<"$panels"
  [ "$n" -gt 0 ] || fail "the dashboard has no queries"
  if [ "${#empty[@]}" -gt 0 ]; then
    printf '%s\n' "${empty[@]}" | show
    fail "${#empty[@]} of $n dashboard queries returned no data from the live Prometheus (above)"
  fi
  ok "$n of the dashboard's $n queries return data from the live Prometheus ($((now - PROM_STARTED)) s of the run)"
}

# Every alert that fired at some time in the run, with its labels: what the
# check below saw only at its end, and near misses (alerts that fired and
# resolved again), for whoever reads a failed run.
s27_alert_history() {
  local out
  out=$(prom_query "max_over_time(ALERTS{alertstate=\"firing\"}[$(($(date -u +%s) - PROM_STARTED + 5))s])") ||
    { say "the alert history could not be read"; return 0; }
  say "alerts that fired during the run (from the live Prometheus):"
  jq -r '.[] | .metric | del(.__name__, .alertstate) | tojson' <<<"$out" | sort | show
}

# The last failures each controller and webhook pod logged (warnings
# saying "fail" or "error"), printed with an uncaused alert:
# CI keeps only the end of a failed run's output (scripts/repeat-failure.sh
# repeats the lines before the FAIL line), and an alert says that something
# failed but not what; the log says what.
s27_warnings() {
  local pod logs lines
  for pod in $(kubectl -n "$NS" get pods -l 'app.kubernetes.io/component in (controller,webhook)' -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
    logs=$(kubectl --request-timeout=20s -n "$NS" logs "$pod" --all-containers 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g') || true
    lines=$(grep -E ' (WARN|ERROR) .*(fail|error)' <<<"$logs" || true)
    [ -n "$lines" ] || continue
    say "the last failures $pod logged:"
    tail -n 5 <<<"$lines" | cut -c1-300 | show
  done
}

# Every firing alert is one the scenarios caused (CAUSED_ALERTS).
s27_no_uncaused_alerts() {
  local out labels name c words want uncaused=() caused=()
  s27_alert_history
  out=$(prom_api /api/v1/alerts) || fail "cannot read /api/v1/alerts"
  while IFS= read -r labels; do
    [ -n "$labels" ] || continue
    name=$(jq -r .alertname <<<"$labels")
    for c in "${CAUSED_ALERTS[@]}"; do
      read -r -a words <<<"$c"
      [ "${words[0]}" = "$name" ] || continue
      want=$(want_labels "${words[@]:1}")
      if jq -e --argjson want "$want" '. as $l | $want | to_entries | all(.value == $l[.key])' <<<"$labels" >/dev/null; then
        caused+=("$name")
        continue 2
      fi
    done
    uncaused+=("$labels")
  done < <(jq -c '.data.alerts[] | select(.state == "firing") | .labels' <<<"$out")
  if [ "${#uncaused[@]}" -gt 0 ]; then
    s27_warnings
    printf '%s\n' "${uncaused[@]}" | show
    fail "${#uncaused[@]} alert(s) fire that no scenario caused (above); caused: ${CAUSED_ALERTS[*]:-none}"
  fi
  ok "no alert fires that the scenarios did not cause (firing: $(printf '%s\n' "${caused[@]}" | sort -u | tr '\n' ' ')of those caused in this run: $(printf '%s, ' "${CAUSED_ALERTS[@]}" | sed 's/, $//'))"
}

s27_monitoring() {
  [ -n "$PROM_PID" ] || fail "scenario 27 needs the live Prometheus (NFGUARD_E2E_PROMETHEUS)"
  s27_crd_schemas
  s27_targets
  s27_invalid_policy
  s27_denied_rollout
  s27_refuse_writes
  s27_webhook_unjudged
  s27_writes_recover
  s27_dashboard
  s27_no_uncaused_alerts
}
