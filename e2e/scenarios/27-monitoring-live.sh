# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 27: monitoring, live: the operator's CRDs validate monitoring/; a real Prometheus scrapes every component as the PodMonitors say; alerts fire and resolve; every dashboard query answers.
#
# The CRD schemas refuse a malformed PodMonitor
# and accept the Helm chart's rendered monitoring objects; every PodMonitor
# target is up (the reporter's over HTTPS with the token, its series carry
# node); an invalid NetfilterPolicy fires NfguardPolicyInvalid, deleting it
# resolves it; a denied rollout fires no alert (a denial is nfguard doing its
# job) and shows on the dashboard; refused writes of the controller and of a
# reporter (a ValidatingAdmissionPolicy) and a malformed AdmissionReview are
# counted, and both writers recover; every dashboard panel's query returns
# data from the live Prometheus over the run (37 of 37); no alert fires that
# a scenario did not cause.
#
# Runs on: local (Prometheus in the control plane's namespace). Needs: prometheus.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - kubectl delete netfilterpolicy nfguard-e2e-s27-invalid --ignore-not-found
#   - namespace "$ns" (scenario_ns)
#   - kubectl delete netfilterpolicy "$S27_REFUSED" --ignore-not-found
#   - kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy "$S27_VAP" --ignore-not-found

SCENARIO_TITLE="monitoring, live: the operator's CRDs validate monitoring/; a real Prometheus scrapes every component as the PodMonitors say; alerts fire and resolve; every dashboard query answers"
SCENARIO_PROVIDERS="local"
SCENARIO_NEEDS="prometheus"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s27_monitoring

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

# Every active nfguard target healthy in /api/v1/targets (TARGETS holds the
# listing): a reporter that has just started (scenario 16 rolls them) is
# discovered before its first scrape, and scraped before its certificate
# from nfguard's signer arrives.
S27_TARGETS=""
s27_targets_healthy() {
  local bad
  S27_TARGETS=$(prom_api /api/v1/targets --data-urlencode state=active) || { WHY="cannot read /api/v1/targets"; return 1; }
  bad=$(jq -r '.data.activeTargets[] | select(.labels.job | startswith("nfguard-"))
    | select(.health != "up") | "\(.labels.job) \(.scrapeUrl): \(.health) \(.lastError)"' <<<"$S27_TARGETS")
  WHY="targets not up: $bad"
  [ -z "$bad" ]
}

s27_targets() {
  local targets n bad
  wait_for 120 "every nfguard pod to be scraped" targets_up
  wait_for 60 "every nfguard target to be healthy" s27_targets_healthy
  targets=$S27_TARGETS
  jq -r '.data.activeTargets[] | select(.labels.job | startswith("nfguard-"))
    | "\(.labels.job) \(.scrapeUrl) pod=\(.labels.pod) node=\(.labels.node // "-") \(.health)"' <<<"$targets" | sort | show
  bad=$(jq -r '.data.activeTargets[] | select(.labels.job == "nfguard-reporter")
    | select((.scrapeUrl | startswith("https://")) | not) | .scrapeUrl' <<<"$targets")
  [ -z "$bad" ] || fail "reporter targets not scraped over HTTPS: $bad"
  for n in "${NODES[@]}"; do
    [ "$(prom_query "up{job=\"nfguard-reporter\", node=\"$n\"} == 1" | jq length)" = 1 ] ||
      fail "no reporter target labelled node=$n is up"
  done
  ok "jobs nfguard-webhook, nfguard-controller, nfguard-reporter as the PodMonitors name them; every reporter over HTTPS with Prometheus's token for the scrape class's audience, labelled with its node (${NODES[*]})"
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

s27_firing_alerts() {
  local out
  out=$(prom_api /api/v1/alerts) || return 1
  jq -r '[.data.alerts[] | select(.state == "firing") | .labels.alertname] | unique | join(" ")' <<<"$out"
}
s27_deny_count() {
  prom_query 'sum(nfguard_webhook_verdicts_total{verdict="deny"})' | jq -r '.[0].value[1] // "0"'
}
s27_deny_counted() { # BEFORE
  local now
  now=$(s27_deny_count)
  WHY="denials counted: $now (before: $1)"
  [ "${now%.*}" -gt "${1%.*}" ]
}

s27_denied_rollout() {
  local ns=nfguard-e2e-s27 before_alerts before after_alerts a
  scenario_ns "$ns"
  before_alerts=$(s27_firing_alerts)
  before=$(s27_deny_count)
  incident_denied "$ns"
  wait_for 60 "the webhook's denial to reach Prometheus" s27_deny_counted "$before"
  ok "the incident DaemonSet denied; Prometheus counts $(s27_deny_count) denial(s) (before: $before)"
  # Two evaluation cycles past every (shortened) `for:`: nothing new fires
  # (what fired before may resolve meanwhile: windows of earlier scenarios).
  sleep 10
  after_alerts=$(s27_firing_alerts)
  for a in $after_alerts; do
    [[ " $before_alerts " == *" $a "* ]] ||
      fail "the denied rollout made $a fire (firing before: ${before_alerts:-none}): a denial is not an alert"
  done
  ok "the denied rollout fires no alert (firing before: ${before_alerts:-none}; after: ${after_alerts:-none})"
}

# A value of the live Prometheus: EXPR's first sample ("0" when empty).
s27_prom_value() {
  local r
  r=$(prom_query "$1") || { echo 0; return 0; }
  jq -r '.[0].value[1] // "0"' <<<"$r"
}
s27_prom_above() { # EXPR MIN: EXPR's value is above MIN
  local v
  v=$(s27_prom_value "$1")
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
  before=$(s27_prom_value 'sum(nfguard_controller_reconcile_errors_total{stage="policy_status"})')
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
  wait_for 60 "the controller's refused status write to reach Prometheus" s27_prom_above \
    'sum(nfguard_controller_reconcile_errors_total{stage="policy_status"})' "$before"
  caused_alert NfguardControllerReconcileErrors stage=policy_status
  ok "a ValidatingAdmissionPolicy refuses the status of NetfilterPolicy $S27_REFUSED: the controller counts reconcile_errors_total{stage=\"policy_status\"} $before -> $(s27_prom_value 'sum(nfguard_controller_reconcile_errors_total{stage="policy_status"})') ($((SECONDS - t)) s)"
  # The panel's own expression: a rise Prometheus saw in the new process.
  wait_for 90 "the reporter on $S27_NODE to fail its refused writes, as Prometheus sees it" s27_prom_above \
    "sum(increase(nfguard_reporter_status_write_failures_total{node=\"$S27_NODE\"}[1m]))" 0
  expect_alert firing NfguardReporterWriteFailures "node=$S27_NODE"
  ok "the reporter on $S27_NODE (new pod $(s27_reporter_pod | tr '\n' ' ')) counts its refused status writes: status_write_failures_total{node=\"$S27_NODE\"} $(s27_prom_value "sum(nfguard_reporter_status_write_failures_total{node=\"$S27_NODE\"})") ($((SECONDS - t)) s)"
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
  before=$(s27_prom_value 'sum(nfguard_webhook_rejected_requests_total{cause="malformed"})')
  # Two rounds a scrape apart: the counter's series appears with the first,
  # the second is an increase that rate() and the alert can see.
  for i in 1 2; do
    out=$("$REPO/e2e/local-cluster.sh" cp curl -sS --http1.1 --max-time 10 --cacert "$PROM_DIR/webhook-ca.crt" \
      --cert "$cert.crt" --key "$cert.key" --resolve "$host:$port:$addr" -H 'Content-Type: application/json' \
      --data-binary '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ' \
      -w '\nHTTP %{http_code}\n' "https://$host:$port/validate" </dev/null 2>&1) || fail "sending the malformed review failed: $out"
    grep -qxF 'HTTP 400' <<<"$out" || fail "the malformed review was not answered 400: $out"
    if grep -qF '"allowed"' <<<"$out"; then fail "the malformed review was judged: $out"; fi
    wait_for 30 "the webhook's rejected request to reach Prometheus" s27_prom_above \
      'sum(nfguard_webhook_rejected_requests_total{cause="malformed"})' "$((${before%.*} + i - 1))"
  done
  caused_alert NfguardWebhookErrors
  ok "a truncated AdmissionReview from the control plane with the API server's client certificate is answered 400 and counted: rejected_requests_total{cause=\"malformed\"} $before -> $(s27_prom_value 'sum(nfguard_webhook_rejected_requests_total{cause="malformed"})'):"
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
  local out labels name c words want uncaused=() caused=() CAUSED_ALERTS=()
  mapfile -t CAUSED_ALERTS <"$RUN_DIR/caused-alerts"
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
