# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 9: the webhook down: failurePolicy Ignore, then Fail.
#
# the webhook down: failurePolicy Ignore admits in time, Fail refuses;
# restored afterwards with the same caBundle
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)
#   - webhook_restore "$policy" "$replicas"

SCENARIO_TITLE="the webhook down: failurePolicy Ignore, then Fail"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s9_webhook_down

s9_webhook_down() {
  local ns=nfguard-e2e-s9 policy replicas timeout ca t0 took out
  policy=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].failurePolicy}')
  timeout=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].timeoutSeconds}')
  ca=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}')
  replicas=$(get deployment nfguard-webhook '{.spec.replicas}' -n "$NS")
  [ "$policy" = Ignore ] || fail "the webhook's failurePolicy is $policy, the shipped default is Ignore"
  scenario_ns "$ns"
  defer webhook_restore "$policy" "$replicas"
  webhook_down "$replicas"

  t0=$(date +%s%N)
  out=$(pod_yaml unchecked "$IMG_COMPATIBLE" | kubectl -n "$ns" create -f - 2>&1) ||
    fail "with failurePolicy Ignore and the webhook down, creating the pod failed: $out"
  took=$((($(date +%s%N) - t0) / 1000000))
  [ "$took" -le $(((timeout + 5) * 1000)) ] ||
    fail "the admission took $took ms, more than timeoutSeconds $timeout + 5 s"
  ok "failurePolicy Ignore: a hostNetwork + NET_ADMIN pod is admitted unchecked in $took ms (timeoutSeconds $timeout): $out"
  kubectl -n "$ns" delete pod unchecked --grace-period=0 --force >/dev/null 2>&1

  set_failure_policy Fail
  t0=$(date +%s%N)
  if out=$(pod_yaml refused "$IMG_COMPATIBLE" | kubectl -n "$ns" create -f - 2>&1); then
    fail "with failurePolicy Fail and the webhook down, the pod was admitted: $out"
  fi
  took=$((($(date +%s%N) - t0) / 1000000))
  grep -qF 'failed calling webhook "validate.nfguard.io"' <<<"$out" ||
    fail "refused, but without the webhook failure message: $out"
  [ "$took" -le $(((timeout + 5) * 1000)) ] || fail "the refusal took $took ms, more than timeoutSeconds $timeout + 5 s"
  ok "failurePolicy Fail: refused in $took ms: $out"

  webhook_restore "$policy" "$replicas"
  [ "$(get validatingwebhookconfiguration nfguard '{.webhooks[0].failurePolicy}')" = "$policy" ] ||
    fail "failurePolicy was not restored to $policy"
  [ "$(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}')" = "$ca" ] ||
    fail "the caBundle changed or vanished when the webhook came back"
  ok "failurePolicy $policy again, $replicas webhook replicas Ready, caBundle still set (unchanged)"
  if out=$(pod_yaml incident "$IMG_INCIDENT" | kubectl -n "$ns" create --dry-run=server -f - 2>&1); then
    fail "the webhook is back but the incident pod is admitted: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the webhook is back but does not deny the incident pod: $out"
  ok "the gate is back: the incident pod is denied again (server dry-run)"
}
