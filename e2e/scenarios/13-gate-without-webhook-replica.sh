# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 13: failurePolicy Fail, no webhook replica: an ordinary pod is created, hostNetwork pods refused, matchConditions as e2e/gate-match.yaml says.
#
# failurePolicy Fail and no webhook replica: an ordinary pod is created,
# a hostNetwork pod refused; every object of e2e/gate-match.yaml reaches
# the webhook exactly when the table says (the matchConditions); a
# gated pod's relabelling passes, its image swap is refused
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)
#   - kubectl -n "$ns" delete pod gated ordinary --ignore-not-found --grace-period=0 --force --wait=false
#   - webhook_restore "$policy" "$replicas"

SCENARIO_TITLE="failurePolicy Fail, no webhook replica: an ordinary pod is created, hostNetwork pods refused, matchConditions as e2e/gate-match.yaml says"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s13_gate_without_webhook

s13_gate_without_webhook() {
  local ns=nfguard-e2e-s13 policy replicas out line name want got checked=0
  policy=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].failurePolicy}')
  replicas=$(get deployment nfguard-webhook '{.spec.replicas}' -n "$NS")
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete pod gated ordinary --ignore-not-found --grace-period=0 --force --wait=false
  # Admitted while the webhook is up (a compatible image).
  out=$(pod_yaml gated "$IMG_COMPATIBLE" | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the compatible hostNetwork + NET_ADMIN pod was refused: $out"
  defer webhook_restore "$policy" "$replicas"
  set_failure_policy Fail
  webhook_down "$replicas"

  out=$(plain_pod_yaml ordinary "$IMG_COMPATIBLE" | kubectl -n "$ns" create -f - 2>&1) ||
    fail "with failurePolicy Fail and the webhook down, an ordinary pod was refused: $out"
  ok "an ordinary pod is created without the webhook: $out"
  if out=$(pod_yaml refused "$IMG_COMPATIBLE" | kubectl -n "$ns" create -f - 2>&1); then
    fail "a hostNetwork + NET_ADMIN pod was admitted with the webhook down under Fail: $out"
  fi
  grep -qF 'failed calling webhook "validate.nfguard.io"' <<<"$out" ||
    fail "the hostNetwork pod was refused, but not for the missing webhook: $out"
  ok "a hostNetwork + NET_ADMIN pod is refused: $out"

  # The table the webhook's Rust test is held to (tests/it/gate_match.rs): an
  # object reaches the webhook (here: is refused) exactly when it says yes.
  while IFS= read -r line; do
    [[ "$line" == "{"* ]] || continue
    name=$(sed -E 's/.*"metadata": \{"name": "([^"]+)".*/\1/' <<<"$line")
    want=$(sed -E 's/.*"nfguard-e2e\/reaches-gate": "(yes|no)".*/\1/' <<<"$line")
    if out=$(printf '%s\n' "${line//IMAGE/$IMG_COMPATIBLE}" | kubectl -n "$ns" create --dry-run=server -f - 2>&1); then
      got=no
    elif grep -qF 'failed calling webhook "validate.nfguard.io"' <<<"$out"; then
      got=yes
    else
      fail "gate-match.yaml $name: refused for another reason: $out"
    fi
    [ "$got" = "$want" ] || fail "gate-match.yaml $name reaches the webhook: $got, the table says $want ($out)"
    ok "gate-match.yaml $name reaches the webhook: $got"
    checked=$((checked + 1))
  done <"$REPO/e2e/gate-match.yaml"
  [ "$checked" -ge 10 ] || fail "only $checked objects read from e2e/gate-match.yaml"

  out=$(kubectl -n "$ns" label pod gated tier=net 2>&1) ||
    fail "relabelling the running hostNetwork pod was refused with the webhook down: $out"
  ok "relabelling the running hostNetwork pod passes without the webhook: $out"
  if out=$(kubectl -n "$ns" set image pod/gated cni="$IMG_INCIDENT" 2>&1); then
    fail "swapping the running hostNetwork pod's image was admitted with the webhook down: $out"
  fi
  grep -qF 'failed calling webhook "validate.nfguard.io"' <<<"$out" ||
    fail "the image swap was refused, but not for the missing webhook: $out"
  ok "swapping its image is refused: $out"
}
