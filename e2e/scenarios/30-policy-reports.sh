# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 30: policy reports: none without a CRD, PolicyReport as the fallback, Report with the openreports CRDs; written only on change; the openreports CRDs removed without an error; removed with the workload.
#
# policy reports (e2e/scenarios/30-policy-reports.sh): none without a report CRD
# (said once), PolicyReport with only the wgpolicyk8s.io CRD, Report
# once the openreports.io CRDs are applied (the PolicyReport removed);
# written only when their content changes; removed with the workload; the
# pods behind the reports read as protobuf
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - kubectl delete netfilterpolicy nfguard-e2e-reports --ignore-not-found
#   - namespace "$S30_NS" (scenario_ns)
#   - delete_report_crds "$wg_crd"
#   - kubectl -n "$S30_NS" delete daemonset incident --ignore-not-found --wait=false
#   - delete_report_crds "$or_crd" "$cr_crd"

SCENARIO_TITLE="policy reports: none without a CRD, PolicyReport as the fallback, Report with the openreports CRDs; written only on change; the openreports CRDs removed without an error; removed with the workload"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s30_policy_reports

# 
# the controller's policy reports on the real cluster (docs/reports.md).
#   - without a report CRD: the reports_api metric says none, the
#     controller's log says so, no report is written;
#   - with only the wgpolicyk8s.io/v1alpha2 PolicyReport CRD (served by
#     Kyverno's Go module, config/crds/policyreport/; wg-policy-prototypes
#     is not a module the proxy serves): a running workload with a finding
#     gets its PolicyReport;
#   - once the openreports.io/v1alpha1 CRDs are applied (from the
#     github.com/openreports/reports-api v0.2.1 module,
#     config/crd/openreports.io_reports.yaml) the same workload gets its
#     Report (rule, result, node, image) and the PolicyReport is removed;
#   - a re-judgement with no change (a namespace relabelled) writes nothing:
#     the Report's resourceVersion and the write counter stay; nor does a
#     new leader's first full pass (the controller pod deleted);
#   - the policy's action Warn -> Deny turns the result warn into fail;
#   - the openreports CRDs removed (and the result back to warn): the
#     PolicyReport is written again, and the writes that met the removed
#     API count no reconcile error;
#   - deleting the workload removes its report.
# The CRDs it installed are deleted at its end (their objects with them).


s30_controller() { # the controller pod holding the Lease
  kubectl -n "$NS" get lease nfguard-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true
}
s30_api_is() { # API: the leader's nfguard_controller_reports_api says API
  local pod v
  pod=$(s30_controller)
  v=$(pod_metric "$pod" "nfguard_controller_reports_api{api=\"$1\"}")
  WHY="nfguard_controller_reports_api{api=\"$1\"} of $pod is '${v}'"
  [ "$v" = 1 ]
}
s30_report_errors() { # the leader's reconcile errors of the reports stage
  s30_counter 'nfguard_controller_reconcile_errors_total{stage="reports"}'
}
s30_writes() { # OP API: the leader's report write counter
  s30_counter "nfguard_controller_report_writes_total{op=\"$1\",api=\"$2\"}"
}
# s30_counter SERIES: the leader's counter, 0 before its first increment; an
# unreadable /metrics fails instead of passing for "nothing counted".
s30_counter() {
  local text pod
  pod=$(s30_controller)
  text=$(pod_metrics "$pod") || text=""
  if [ -z "$text" ]; then
    say "FAIL: cannot read $pod's /metrics through the API server's pod proxy" >&2
    return 1
  fi
  awk -v m="$1" '$1 == m { v = $2 } END { print v + 0 }' <<<"$text"
}

S30_NS=nfguard-e2e-s30
# The incident DaemonSet's report, named once it exists (s30_report_name).
S30_REPORT=""
# s30_report_name: nfguard-<kind>-<name>-<hash> as docs/reports.md defines
# it (16 hex digits of SHA-256 over the owner's group, kind, name and uid,
# each preceded by its length as 8 big-endian bytes), computed here on its
# own from the DaemonSet's uid.
s30_report_name() {
  local uid
  uid=$(get daemonset incident '{.metadata.uid}' -n "$S30_NS")
  [ -n "$uid" ] || fail "the incident DaemonSet has no uid"
  S30_REPORT=$(python3 -c 'import hashlib, struct, sys
h = hashlib.sha256()
for part in sys.argv[1:]:
    b = part.encode()
    h.update(struct.pack(">Q", len(b)) + b)
print("nfguard-daemonset-incident-" + h.hexdigest()[:16])' apps DaemonSet incident "$uid")
}
S30_JSON=""
# s30_result RESOURCE NODE RULE RESULT: the report (RESOURCE: its plural.group)
# lists RULE with RESULT for the incident pod on NODE, image and version named.
s30_result() {
  local got
  S30_JSON=$(kubectl -n "$S30_NS" get "$1" "$S30_REPORT" -o json 2>/dev/null) || {
    WHY="no $1 $S30_NS/$S30_REPORT"
    return 1
  }
  got=$(jq -r --arg n "$2" --arg r "$3" \
    '[.results[]? | select(.properties.node == $n and .rule == $r)
      | "\(.result) \(.properties.image) \(.properties.imageVersion) \(.resources[0].kind)"] | .[0] // "none"' <<<"$S30_JSON")
  WHY="$1 $S30_REPORT on $2 [$3]: $got"
  [ "$got" = "$4 $IMG_INCIDENT 1.8.7 Pod" ]
}
s30_passed_after() { # OLD: a leader other than OLD has written its reports gauge (a pass ended)
  local pod v
  pod=$(s30_controller)
  WHY="leader '${pod}'"
  [ -n "$pod" ] && [ "$pod" != "$1" ] || return 1
  v=$(pod_metric "$pod" nfguard_controller_reports)
  WHY="leader $pod: nfguard_controller_reports '${v}'"
  [ "${v:-0}" -ge 1 ]
}
s30_gone() { # RESOURCE
  local out
  out=$(kubectl -n "$S30_NS" get "$1" "$S30_REPORT" -o name 2>&1) && { WHY="$out still exists"; return 1; }
  WHY=$out
  grep -qF NotFound <<<"$out"
}
s30_logged() { # TEXT: the leader's log has TEXT
  local log
  log=$(kubectl -n "$NS" logs "$(s30_controller)" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g') || true
  WHY="the controller's log has no '$1'"
  grep -qF -- "$1" <<<"$log"
}

S30_OUT=""
s30_admitted() { # the incident DaemonSet created (the webhook's reflectors saw the policy)
  S30_OUT=$(ds_yaml incident "$IMG_INCIDENT" | kubectl -n "$S30_NS" apply -f - 2>&1) || {
    WHY="refused: $S30_OUT"
    return 1
  }
}

s30_policy() { # ACTION
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-reports, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: $1
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: {nfguard-e2e/reports: "yes"}}
YAML
}

s30_policy_reports() {
  local wg_crd or_dir or_crd cr_crd out rv rv2 writes writes2 t0 have raw managed old errors errors2
  new_rules_node
  # Without any report CRD (as the cluster came up): none, said once.
  for have in reports.openreports.io policyreports.wgpolicyk8s.io; do
    no_report_crd "$have" || fail "the cluster already serves $have: this scenario installs and removes it itself"
  done
  wait_for 60 "the controller to say no report API is served" s30_api_is none
  wait_for 30 "the controller's log line about it" s30_logged "no policy report API served"
  ok "no report CRD: nfguard_controller_reports_api{api=\"none\"} 1, logged 'no policy report API served'"

  wg_crd=$(report_crd kyverno "$WG_MODULE" config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml)
  or_crd=$(report_crd openreports "$REPORTS_MODULE" config/crd/openreports.io_reports.yaml)
  cr_crd=$(report_crd openreports "$REPORTS_MODULE" config/crd/openreports.io_clusterreports.yaml)
  or_dir=$(dirname "$or_crd")
  say "CRDs: $wg_crd (wgpolicyk8s.io/v1alpha2), $or_dir (openreports.io/v1alpha1)"

  defer kubectl delete netfilterpolicy nfguard-e2e-reports --ignore-not-found
  s30_policy Warn
  # Other policies (the install's) would combine with it: the strictest wins.
  keep_out_of_namespace "$S30_NS" nfguard-e2e-reports
  scenario_ns "$S30_NS"
  kubectl label namespace "$S30_NS" nfguard-e2e/reports=yes >/dev/null
  on_dump kubectl -n "$S30_NS" get policyreports.wgpolicyk8s.io,reports.openreports.io -o yaml

  # The fallback: PolicyReport only.
  defer delete_report_crds "$wg_crd"
  kubectl apply --server-side -f "$wg_crd" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/policyreports.wgpolicyk8s.io >/dev/null
  t0=$SECONDS
  wait_for 90 "the controller to discover wgpolicyk8s.io/v1alpha2" s30_api_is wgpolicyk8s.io/v1alpha2
  ok "the PolicyReport CRD applied: the controller writes wgpolicyk8s.io/v1alpha2 after $((SECONDS - t0)) s"

  # An unsafe workload that runs: admitted with a warning under action: Warn.
  defer kubectl -n "$S30_NS" delete daemonset incident --ignore-not-found --wait=false
  wait_for 60 "the webhook to admit the incident DaemonSet under action: Warn" s30_admitted
  ok "admitted with nfguard's warning: $(reason_part "$S30_OUT" OldReaderNewRules)"
  s30_report_name
  wait_for 180 "the incident DaemonSet to run" ds_running "$S30_NS" incident $((${#NODES[@]} + ${#CP_NODES[@]}))
  wait_for 90 "a PolicyReport of the incident DaemonSet, warn on $RULES_NODE" \
    s30_result policyreports.wgpolicyk8s.io "$RULES_NODE" OldReaderNewRules warn
  ok "PolicyReport $S30_NS/$S30_REPORT: $(jq -c '{summary, owner: .metadata.ownerReferences[0].kind}' <<<"$S30_JSON")"
  # The report came from the pods the leader read: as protobuf, not JSON.
  if [ "$(s30_counter 'nfguard_controller_pods_encoding{encoding="protobuf"}')" != 1 ] ||
    [ "$(s30_counter 'nfguard_controller_pods_encoding{encoding="json"}')" != 0 ]; then
    fail "the leader does not list and watch pods as protobuf: $(pod_metrics "$(s30_controller)" | grep pods_encoding)"
  fi
  ok "the leader lists and watches pods as protobuf: nfguard_controller_pods_encoding{encoding=\"protobuf\"} 1"

  # openreports.io: preferred as soon as it is served; the PolicyReport goes.
  defer delete_report_crds "$or_crd" "$cr_crd"
  kubectl apply --server-side -f "$or_crd" -f "$cr_crd" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/reports.openreports.io >/dev/null
  t0=$SECONDS
  wait_for 90 "a Report of the incident DaemonSet, warn on $RULES_NODE" \
    s30_result reports.openreports.io "$RULES_NODE" OldReaderNewRules warn
  ok "the openreports CRD applied: Report written after $((SECONDS - t0)) s"
  wait_for 30 "the PolicyReport left behind to be removed" s30_gone policyreports.wgpolicyk8s.io
  ok "the PolicyReport of the API no longer used was removed"
  s30_api_is openreports.io/v1alpha1 || fail "$WHY"
  [ "$(jq -r '.metadata.ownerReferences[0] | "\(.kind)/\(.name)"' <<<"$S30_JSON")" = DaemonSet/incident ] ||
    fail "the Report is not owned by DaemonSet/incident: $(jq -c .metadata.ownerReferences <<<"$S30_JSON")"
  [ "$(jq -r '.metadata.labels["app.kubernetes.io/managed-by"]' <<<"$S30_JSON")" = nfguard ] ||
    fail "the Report has no managed-by label: $(jq -c .metadata.labels <<<"$S30_JSON")"
  raw=$(kubectl get --raw "/apis/openreports.io/v1alpha1/namespaces/$S30_NS/reports/$S30_REPORT")
  managed=$(jq -c '.metadata.managedFields' <<<"$raw")
  ok "Report $S30_NS/$S30_REPORT as stored: ${#raw} bytes of JSON, ${#managed} of them managedFields:"
  kubectl -n "$S30_NS" get reports.openreports.io "$S30_REPORT" -o yaml | show

  # A re-judgement that changes nothing writes nothing.
  sleep 10 # the passes the switch started are over
  rv=$(get reports.openreports.io "$S30_REPORT" '{.metadata.resourceVersion}' -n "$S30_NS")
  writes=$(s30_writes apply openreports.io/v1alpha1)
  # The Report above was applied: a counter that reads 0 now is not the
  # one the controller counts with (renamed, relabelled), and "nothing
  # written" below could not fail.
  [ "$writes" -ge 1 ] || fail "the report apply counter reads $writes after the Report was applied"
  kubectl label namespace "$S30_NS" nfguard-e2e/touched=yes >/dev/null
  sleep 20 # a relabel re-judges every node; a pass follows within 5 s
  rv2=$(get reports.openreports.io "$S30_REPORT" '{.metadata.resourceVersion}' -n "$S30_NS")
  writes2=$(s30_writes apply openreports.io/v1alpha1)
  [ "$rv" = "$rv2" ] || fail "the no-change re-judgement rewrote the Report: resourceVersion $rv -> $rv2"
  [ "$writes" = "$writes2" ] || fail "the no-change re-judgement applied reports: $writes -> $writes2"
  s30_result reports.openreports.io "$RULES_NODE" OldReaderNewRules warn || fail "$WHY"
  ok "a no-change re-judgement (namespace relabelled): resourceVersion $rv kept, report applies $writes -> $writes2"

  # A new leader's first full pass (stored reports listed, every workload
  # judged) writes nothing either.
  old=$(s30_controller)
  deleted_pod "$old"
  kubectl -n "$NS" delete pod "$old" --wait=false >/dev/null
  t0=$SECONDS
  wait_for 120 "another controller to lead and finish its first pass of the reports" s30_passed_after "$old"
  rv2=$(get reports.openreports.io "$S30_REPORT" '{.metadata.resourceVersion}' -n "$S30_NS")
  writes2=$(s30_writes apply openreports.io/v1alpha1)
  [ "$rv" = "$rv2" ] || fail "the new leader rewrote the Report: resourceVersion $rv -> $rv2"
  [ "$writes2" = 0 ] || fail "the new leader applied $writes2 report(s) with nothing changed"
  ok "controller $old deleted: $(s30_controller) leads, its first pass over $(pod_metric "$(s30_controller)" nfguard_controller_reports) report(s) after $((SECONDS - t0)) s applied 0; resourceVersion $rv kept"

  # The facts change: the same finding is now a failure.
  s30_policy Deny
  t0=$SECONDS
  wait_for 90 "the Report to turn the finding on $RULES_NODE into fail" \
    s30_result reports.openreports.io "$RULES_NODE" OldReaderNewRules fail
  ok "policy action Warn -> Deny: the result on $RULES_NODE is fail after $((SECONDS - t0)) s; summary $(jq -c .summary <<<"$S30_JSON")"

  # The openreports CRDs uninstalled while a report is about to change: the
  # writes that meet the removed API (404 until the next discovery) are not
  # the controller's errors (src/controller/report_errors.rs); it goes back
  # to PolicyReport at once.
  errors=$(s30_report_errors)
  delete_report_crds "$or_crd" "$cr_crd"
  s30_policy Warn
  t0=$SECONDS
  wait_for 90 "the PolicyReport to say warn on $RULES_NODE after the openreports CRDs were removed" \
    s30_result policyreports.wgpolicyk8s.io "$RULES_NODE" OldReaderNewRules warn
  s30_api_is wgpolicyk8s.io/v1alpha2 || fail "$WHY"
  errors2=$(s30_report_errors)
  [ "$errors" = "$errors2" ] ||
    fail "removing the openreports CRDs counted reconcile errors: reconcile_errors_total{stage=\"reports\"} $errors -> $errors2"
  ok "the openreports CRDs removed, the policy back to Warn: PolicyReport written after $((SECONDS - t0)) s, reconcile_errors_total{stage=\"reports\"} $errors -> $errors2"

  # The workload goes: its report goes with it.
  kubectl -n "$S30_NS" delete daemonset incident --wait=false >/dev/null
  t0=$SECONDS
  wait_for 90 "the PolicyReport to go with its DaemonSet" s30_gone policyreports.wgpolicyk8s.io
  ok "the DaemonSet deleted: its PolicyReport gone after $((SECONDS - t0)) s"
}
