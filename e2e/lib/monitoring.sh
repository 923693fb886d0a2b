# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# nfguard's monitoring, live (sourced by e2e/scenarios.sh; local provider
# only): a real Prometheus scrapes the three components as
# monitoring/podmonitors.yaml says and evaluates monitoring/prometheus-rules.yaml,
# and the alerts fire and resolve in the scenarios that cause them.
#
# NFGUARD_E2E_PROMETHEUS  the prometheus binary (e2e/local.sh builds it:
#                         scripts/go-tool.sh prometheus); unset, scenario 27
#                         is not applicable and the alert hooks say `skip:` (kind only)
#
# monitoring_up (before the scenarios, when 6, 16 or 27 is selected):
#   - the Prometheus Operator's PodMonitor, PrometheusRule and Prometheus CRDs, from its Go
#     module (tools/prometheus-operator pins v0.85.0; scripts/go-module-dir.sh),
#     applied to the cluster, then `kubectl apply --server-side -k monitoring/`
#     validated against their schemas by the API server;
#   - Prometheus in the control plane's network namespace (listening on its
#     loopback; it reaches only the cluster's own addresses), its
#     scrape_configs translated from the PodMonitors by
#     scripts/prometheus_config.py (kubernetes_sd pod role, the shipped
#     selectors, port name, job relabelings; the reporter over HTTPS with a
#     token of Prometheus's ServiceAccount for the audience its scrape class
#     projects, monitoring/prometheus-scrape-class.yaml, which is checked
#     against the operator's Prometheus CRD, verifying each reporter's
#     certificate with the CA the controller publishes), its rules the
#     PrometheusRule's spec. Test-only: every scrape and evaluation each 2 s,
#     and every alert's `for:` shortened to 5 s in the test's copy (the
#     shipped values are 2m to 1h; scenario 6 alone lasts ~100 s).
# expect_alert firing|gone ALERT [LABEL=VALUE...] (hooks in the scenarios):
#   waits until /api/v1/alerts lists ALERT with those labels firing, or lists
#   it no more.
# monitoring_down (after the last scenario): Prometheus stopped, the
#   monitoring objects, its identity and the CRDs deleted.

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
PROM_CRDS=(monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_prometheusrules.yaml
  monitoring.coreos.com_prometheuses.yaml)
# Prometheus's identity as kube-prometheus names it: monitoring/reporter-scraper.yaml
# binds it as shipped.
PROM_NS=monitoring
PROM_SA=prometheus-k8s
PROM_SCRAPE_CLASS=nfguard-reporter
# Where monitoring/prometheus-scrape-class.yaml mounts the projected token.
PROM_REPORTER_TOKEN_IN_POD=/var/run/secrets/nfguard/reporter-metrics/token

# reporter_ca FILE: the reporter-metrics CA the controller publishes in
# ConfigMap nfguard-reporter-metrics-ca (made when it first leads), written
# to FILE; waits for it.
reporter_ca_published() {
  [ -n "$(get configmap nfguard-reporter-metrics-ca '{.data.ca\.crt}' -n "$NS")" ] ||
    { WHY="ConfigMap $NS/nfguard-reporter-metrics-ca has no ca.crt"; return 1; }
}
reporter_ca() {
  wait_for 60 "the controller to publish the reporter-metrics CA" reporter_ca_published
  get configmap nfguard-reporter-metrics-ca '{.data.ca\.crt}' -n "$NS" >"$1"
  grep -q 'BEGIN CERTIFICATE' "$1" || fail "ConfigMap $NS/nfguard-reporter-metrics-ca holds no PEM certificate"
}

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
# Kept in a file: each scenario runs in a subshell of its own.
caused_alert() { printf '%s\n' "$*" >>"$RUN_DIR/caused-alerts"; }
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
  # Its own process first: another Prometheus left on the port (a kept
  # cluster's) would answer for it.
  kill -0 "$PROM_PID" 2>/dev/null && prom_api /-/ready >/dev/null 2>&1 && return 0
  WHY="its log: $(tail -n 3 "$PROM_DIR/prometheus.log" 2>/dev/null | tr '\n' ' ')"
  kill -0 "$PROM_PID" 2>/dev/null || WHY="Prometheus exited; $WHY"
  return 1
}

prom_start() {
  local module crds t cadata api audience version c out
  PROM_DIR=${NFGUARD_E2E_LOG_DIR:?monitoring needs the local provider (NFGUARD_E2E_LOG_DIR)}/prometheus
  rm -rf "$PROM_DIR"
  mkdir -p "$PROM_DIR/data" "$PROM_DIR/secrets"
  chmod 700 "$PROM_DIR"

  # The operator's CRDs, from its module, and monitoring/ against them.
  module=$("$REPO/scripts/go-module-dir.sh" prometheus-operator "$PROM_OPERATOR_MODULE")
  crds=$module/example/prometheus-operator-crd
  t=$SECONDS
  for c in "${PROM_CRDS[@]}"; do
    kubectl apply --server-side -f "$crds/$c" >/dev/null || fail "applying $c from $PROM_OPERATOR_MODULE failed"
  done
  kubectl wait --for=condition=Established --timeout=60s crd/podmonitors.monitoring.coreos.com \
    crd/prometheusrules.monitoring.coreos.com crd/prometheuses.monitoring.coreos.com >/dev/null
  kubectl apply --server-side -k "$REPO/monitoring" >"$PROM_DIR/apply.log" 2>&1 ||
    fail "kubectl apply --server-side -k monitoring/ against the operator's CRDs failed: $(cat "$PROM_DIR/apply.log")"
  ok "the Prometheus Operator's PodMonitor, PrometheusRule and Prometheus CRDs (${module##*/}) applied; kubectl apply --server-side -k monitoring/ passes their schemas: $(tr '\n' ';' <"$PROM_DIR/apply.log")"

  # Prometheus' own identity: pods of nfguard's namespace, for kubernetes_sd.
  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $PROM_NS, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: $PROM_SA, namespace: $PROM_NS}
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
subjects: [{kind: ServiceAccount, name: $PROM_SA, namespace: $PROM_NS}]
YAML
  kubectl -n "$PROM_NS" create token "$PROM_SA" --duration=2h >"$PROM_DIR/sd-token"
  # What a Prometheus pod gets from the scrape class's projected volume: a
  # token of its own ServiceAccount for the class's audience (the kubelet
  # asks the same TokenRequest API), longer than a run lasts.
  out=$(kubectl apply --dry-run=server -f "$REPO/monitoring/prometheus-scrape-class.yaml" 2>&1) ||
    fail "monitoring/prometheus-scrape-class.yaml does not pass the operator's Prometheus CRD: $out"
  audience=$(python3 "$REPO/scripts/prometheus_config.py" token-audience \
    "$REPO/monitoring/prometheus-scrape-class.yaml" "$PROM_SCRAPE_CLASS") || fail "no audience for scrape class $PROM_SCRAPE_CLASS"
  kubectl -n "$PROM_NS" create token "$PROM_SA" --audience "$audience" --duration=1h >"$PROM_DIR/reporter-token"
  # The CA the reporter PodMonitor's tlsConfig names, where the operator
  # would mount the ConfigMap's key.
  mkdir -p "$PROM_DIR/configmaps/$NS/nfguard-reporter-metrics-ca"
  reporter_ca "$PROM_DIR/configmaps/$NS/nfguard-reporter-metrics-ca/ca.crt"
  ok "monitoring/prometheus-scrape-class.yaml passes the Prometheus CRD ($out); $PROM_NS/$PROM_SA's token for audience $audience written where the class reads it"
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
    --configmaps-dir "$PROM_DIR/configmaps" --prometheus "$REPO/monitoring/prometheus-scrape-class.yaml" \
    --pod-file "$PROM_REPORTER_TOKEN_IN_POD=$PROM_DIR/reporter-token" \
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
    prometheuses.monitoring.coreos.com --ignore-not-found --wait=true >/dev/null || rc=1
  [ -z "$PROM_DIR" ] || rm -rf "$PROM_DIR"
  return "$rc"
}

monitoring_up() {
  [ -n "$PROM_BIN" ] || return 0
  selected 6 || selected 16 || selected 27 || return 0
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
