# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# The gate as the scenarios see it (sourced by e2e/scenarios.sh): the parts
# of a denial reason, the API server's audit annotations, the webhook scaled
# down and back, failurePolicy, NetfilterPolicies relaxed for a scenario
# (every change undone by defer).

# The names listed in a denial reason's "[node X]" / "[nodes X, Y]" part.
reason_nodes() {
  sed -nE 's/.*\[(nodes?|[0-9]+ nodes) ([^]]*)\].*/\2/p' <<<"$1" | sed -n 1p |
    sed -E 's/^\(//; s/, \+[0-9]+ more\)$//; s/\)$//' | tr ',' '\n' | sed 's/^ *//; s/ *$//' | grep . || true
}

# The " | "-separated part of a denial that carries reason code CODE.
reason_part() { # TEXT CODE
  local parts=${1// | /$'\n'}
  awk -v c="[$2]" 'index($0, c) && !done { print; done = 1 }' <<<"$parts"
}

names_node() { # TEXT NODE: NODE is one of the nodes the reason names
  local nodes
  nodes=$(reason_nodes "$1")
  grep -qxF -- "$2" <<<"$nodes"
}

# incident_denied NS: the incident DaemonSet applied in NS must be denied by
# nfguard's webhook; the API server's answer is left in DENIAL.
DENIAL=""
incident_denied() {
  defer kubectl -n "$1" delete daemonset incident --ignore-not-found --wait=false
  if DENIAL=$(ds_yaml incident "$IMG_INCIDENT" | kubectl -n "$1" apply -f - 2>&1); then
    fail "the incident DaemonSet was admitted: $DENIAL"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$DENIAL" ||
    fail "the incident DaemonSet failed, but not by nfguard's webhook: $DENIAL"
}

# The webhook's audit annotations on the newest audit event of RESOURCE NS/NAME as
# "KEY=VALUE" lines (the API server prefixes each key with the webhook's name).
audit_annotations() { # RESOURCE NS NAME
  local lines events
  # The log holds every request of the run: filter by name before parsing.
  lines=$(grep -F "\"name\":\"$3\"" "$NFGUARD_E2E_AUDIT_LOG" || true)
  [ -n "$lines" ] || return 0
  events=$(jq -c --arg r "$1" --arg ns "$2" --arg n "$3" \
    'select(.objectRef.resource == $r and .objectRef.namespace == $ns and .objectRef.name == $n
            and .verb == "create" and .stage == "ResponseComplete")' <<<"$lines")
  [ -n "$events" ] || return 0
  jq -r '.annotations // {} | to_entries[] | select(.key | startswith("validate.nfguard.io/"))
         | "\(.key)=\(.value)"' <<<"$(tail -n 1 <<<"$events")"
}

# The API server's audit log records nfguard's verdict and the digest it judged for IMAGE.
audited() { # RESOURCE NS NAME VERDICT IMAGE
  local got images
  got=$(audit_annotations "$1" "$2" "$3")
  WHY="audit annotations of $1 $2/$3: ${got:-none}"
  grep -qxF "validate.nfguard.io/verdict=$4" <<<"$got" || return 1
  images=$(grep -F "validate.nfguard.io/images=" <<<"$got" || true)
  # Quoted parts of a bash regex match literally (the image's dots included).
  [[ "$images" =~ "$5 linux/"[a-z0-9]+" sha256:"[0-9a-f]{64} ]]
}

audit_checked() { # RESOURCE NS NAME VERDICT IMAGE
  if [ -z "${NFGUARD_E2E_AUDIT_LOG:-}" ]; then
    [ "$NFGUARD_E2E_PROVIDER" != local ] || fail "the local cluster did not say where its audit log is"
    say "provider $NFGUARD_E2E_PROVIDER exposes no audit log: the audit annotations are checked on the local cluster"
    return 0
  fi
  wait_for 30 "the audit event of $1 $2/$3 with nfguard's verdict $4 and the digest of $5" audited "$@"
  ok "audit log: $(audit_annotations "$1" "$2" "$3" | tr '\n' ' ')"
}

# lift_brake KEEP: every NetfilterPolicy but KEEP allows 100 % tainted nodes
# until the scenario ends. The safety brake is the smallest
# maxTaintedNodesPercent of all policies: the shipped default (10 %) allows no
# taint at all below 10 nodes.
lift_brake() {
  local p pct
  while read -r p pct; do
    if [ -z "$p" ] || [ "$p" = "$1" ] || [ -z "$pct" ] || [ "$pct" -ge 100 ]; then
      continue
    fi
    defer kubectl patch netfilterpolicy "$p" --type=merge -p "{\"spec\":{\"maxTaintedNodesPercent\":$pct}}"
    kubectl patch netfilterpolicy "$p" --type=merge -p '{"spec":{"maxTaintedNodesPercent":100}}' >/dev/null
    say "NetfilterPolicy $p: maxTaintedNodesPercent $pct -> 100 for this scenario (the brake takes the smallest)"
  done < <(kubectl get netfilterpolicies -o jsonpath='{range .items[*]}{.metadata.name} {.spec.maxTaintedNodesPercent}{"\n"}{end}')
}

# exempt_honoured NS POD_FUNCTION: a server dry-run of POD_FUNCTION's pod is
# admitted as exempt (the webhook's reflectors caught up with the policy).
exempt_honoured() {
  local out
  out=$("$2" probe | kubectl -n "$1" create --dry-run=server -f - 2>&1) || {
    WHY="the dry-run was refused: $out"
    return 1
  }
  WHY="the dry-run was admitted without the [Exempt] warning: $out"
  grep -qF '[Exempt]' <<<"$out"
}

set_failure_policy() { # Ignore|Fail
  kubectl patch validatingwebhookconfiguration nfguard --type=json \
    -p="[{\"op\":\"replace\",\"path\":\"/webhooks/0/failurePolicy\",\"value\":\"$1\"}]" >/dev/null
}

no_webhook_endpoints() {
  local e p
  e=$(kubectl -n "$NS" get endpointslices -l kubernetes.io/service-name=nfguard-webhook \
    -o jsonpath='{range .items[*].endpoints[*]}{.addresses[0]}{" "}{end}' 2>/dev/null)
  p=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=webhook -o name 2>/dev/null)
  WHY="endpoints: ${e:-none}; pods: $(tr '\n' ' ' <<<"$p")"
  [ -z "${e// /}" ] && [ -z "$p" ]
}

webhook_down() { # REPLICAS: scale the webhook from REPLICAS to 0, wait for no endpoint
  # No webhook to scrape: NfguardWebhookUnavailable once its `for` passes.
  caused_alert NfguardWebhookUnavailable
  deleted_pods app.kubernetes.io/component=webhook
  kubectl -n "$NS" scale deployment/nfguard-webhook --replicas=0 >/dev/null
  wait_for 120 "no webhook pod and no endpoint" no_webhook_endpoints
  ok "nfguard-webhook scaled $1 -> 0: no endpoints"
}

webhook_restore() { # FAILURE_POLICY REPLICAS
  local rc=0
  set_failure_policy "$1" || rc=1
  kubectl -n "$NS" scale deployment/nfguard-webhook --replicas="$2" >/dev/null || rc=1
  kubectl -n "$NS" rollout status deployment/nfguard-webhook --timeout=240s >/dev/null || rc=1
  return "$rc"
}

# e2e_policy NAME ACTION NS_LABELS [EXEMPT_LABELS]: a NetfilterPolicy for
# the scenario (unresolvedImages: Warn) selecting the namespaces whose labels
# match NS_LABELS (a YAML flow map), letting nfguard.io/exempt count where
# EXEMPT_LABELS match; deleted at the end, Valid before it returns.
e2e_policy() {
  local name=$1 action=$2 labels=$3 exempt=""
  [ -z "${4:-}" ] || exempt="exemptionNamespaceSelector: {matchLabels: $4}"
  defer kubectl delete netfilterpolicy "$name" --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: $name, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: $action
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: $labels}
  $exempt
YAML
  wait_for 60 "$name to be Valid=True" policy_is "$name" True
}

policy_condition() { # POLICY TYPE FIELD
  get netfilterpolicy "$1" "{.status.conditions[?(@.type==\"$2\")].$3}"
}

policy_is() { # POLICY STATUS [REASON]: its Valid condition
  local s r
  s=$(policy_condition "$1" Valid status)
  r=$(policy_condition "$1" Valid reason)
  WHY="$1: Valid=${s:-none} (${r:-no reason})"
  [ "$s" = "$2" ] || return 1
  [ -z "${3:-}" ] || [ "$r" = "$3" ]
}

denied_by() { [[ "$1" == *"admission webhook \"validate.nfguard.io\" denied the request"* ]]; }
