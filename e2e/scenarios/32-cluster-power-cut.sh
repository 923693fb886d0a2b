# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 32: a power cut of the whole cluster: under failurePolicy Fail the gate comes back by itself (nfguard denies the incident pod again, same caBundle), ordinary pods admitted meanwhile.
#
# (local provider) a power cut of the whole cluster (control plane and
# every node killed at once, started again from disk): under
# failurePolicy Fail, ordinary pods are admitted right away and nfguard
# itself denies the incident pod again within minutes, with the same
# caBundle, no manual step (e2e/scenarios/32-cluster-power-cut.sh)
#
# Runs on: local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$S32_NS" (scenario_ns)
#   - set_failure_policy "$policy"

SCENARIO_TITLE="a power cut of the whole cluster: under failurePolicy Fail the gate comes back by itself (nfguard denies the incident pod again, same caBundle), ordinary pods admitted meanwhile"
SCENARIO_PROVIDERS="local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s32_cluster_restart

# the gate
# comes back by itself after the whole cluster went down. Local provider
# only: `e2e/local-cluster.sh restart` kills the control plane and every
# node at once (daemons, shims, containers: a power cut) and starts them
# again from their state on disk; nothing is reinstalled, patched or
# deleted by hand.
#
# Under failurePolicy Fail (the install that is meant to fail closed, where
# a gate that needs a manual step to come back would block every gated
# workload): after the restart, within S32_BACK seconds of the API server's
# return, nfguard itself denies the incident pod (not "failed calling
# webhook") and admits the compatible one (a server-side dry run each), with
# the caBundle it wrote before the cut; ordinary pods are created at any
# time the API server answers. The failure policy is restored at the end.

S32_NS=nfguard-e2e-s32
# Seconds from the API server's return to nfguard's first verdict: the
# kubelets restart the webhook's containers, which read their certificate
# and sync their caches.
S32_BACK=180

# The incident pod is denied by nfguard itself (dry run).
s32_gate_back() {
  local out
  if out=$(pod_yaml incident "$IMG_INCIDENT" | kubectl -n "$S32_NS" create --dry-run=server --request-timeout=15s -f - 2>&1); then
    fail "after the restart, under failurePolicy Fail, the incident pod was admitted: $out"
  fi
  WHY="not nfguard's denial yet: $(tr '\n' ' ' <<<"$out" | cut -c1-300)"
  denied_by "$out"
}

# "POD RESTARTS" of the webhook's pods, sorted.
s32_webhook_restarts() {
  kubectl -n "$NS" get pods -l app.kubernetes.io/component=webhook \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.containerStatuses[0].restartCount}{"\n"}{end}' | sort
}
# Every webhook pod of BEFORE was restarted (its container killed by the cut).
s32_all_restarted() { # BEFORE
  local now name n
  now=$(s32_webhook_restarts)
  WHY="restart counts before: $(tr '\n' ' ' <<<"$1"); now: $(tr '\n' ' ' <<<"$now")"
  while read -r name n; do
    [[ $'\n'"$now" == *$'\n'"$name "* ]] || return 1
    [ "$(awk -v p="$name" '$1 == p { print $2 }' <<<"$now")" -gt "$n" ] || return 1
  done <<<"$1"
}

s32_cluster_restart() {
  local policy ca t0 out back restarts
  scenario_ns "$S32_NS"
  policy=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].failurePolicy}')
  ca=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}')
  [ -n "$ca" ] || fail "the webhook configuration has no caBundle before the restart"
  defer set_failure_policy "$policy"
  set_failure_policy Fail
  s32_gate_back || fail "before the restart nfguard does not deny the incident pod: $WHY"
  ok "before the restart: failurePolicy Fail, the incident pod denied by nfguard"

  restarts=$(s32_webhook_restarts)
  [ -n "$restarts" ] || fail "no webhook pod before the restart"
  # Every target is down while the cluster is, and a component that comes
  # back before its node's kube-proxy can fail its first writes.
  caused_alert NfguardTargetDown
  caused_alert NfguardWebhookUnavailable
  caused_alert NfguardControllerUnavailable
  caused_alert NfguardReporterUnavailable
  caused_alert NfguardReporterWriteFailures
  t0=$SECONDS
  "$REPO/e2e/local-cluster.sh" restart
  ok "the whole cluster was killed and started again; API server and every node back in $((SECONDS - t0)) s"

  t0=$SECONDS
  out=$(pod_yaml ordinary "$IMG_COMPATIBLE" | sed '/hostNetwork: true/d; /securityContext:/d' |
    kubectl -n "$S32_NS" create --dry-run=server -f - 2>&1) ||
    fail "right after the restart an ordinary pod is refused: $out"
  ok "right after the restart an ordinary pod is admitted (the gate never holds ordinary pods): $out"
  wait_for "$S32_BACK" "nfguard's own denial of the incident pod after the restart" s32_gate_back
  back=$((SECONDS - t0))
  ok "the gate is back by itself $back s after the API server: the incident pod is denied by nfguard"
  wait_for 60 "every webhook pod's container restarted by the kubelet" s32_all_restarted "$restarts"
  ok "the webhook's containers were killed by the cut and restarted by their kubelets ($(s32_webhook_restarts | tr '\n' ' '))"
  out=$(pod_yaml compatible "$IMG_COMPATIBLE" | kubectl -n "$S32_NS" create --dry-run=server -f - 2>&1) ||
    fail "after the restart the compatible pod is refused: $out"
  ok "after the restart the compatible hostNetwork + NET_ADMIN pod is admitted: $out"
  [ "$(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}')" = "$ca" ] ||
    fail "the caBundle changed across the restart"
  ok "the caBundle is the one written before the cut"
}
