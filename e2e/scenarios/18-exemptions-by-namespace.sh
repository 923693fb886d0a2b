# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 18: nfguard.io/exempt counts only in a namespace a NetfilterPolicy's exemptionNamespaceSelector selects.
#
# with a NetfilterPolicy whose exemptionNamespaceSelector selects
# namespaces labelled nfguard.io/exemptions=allowed, the incident pod
# annotated nfguard.io/exempt is denied in an ordinary namespace (the
# annotation ignored, and said) and admitted with its reason in a
# labelled one
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - kubectl delete netfilterpolicy nfguard-e2e-exemptions --ignore-not-found
#   - namespace "$plain" (scenario_ns)
#   - namespace "$allowed" (scenario_ns)
#   - kubectl -n "$plain" delete pod router --ignore-not-found --grace-period=0 --force --wait=false
#   - kubectl -n "$allowed" delete pod router --ignore-not-found --grace-period=0 --force --wait=false

SCENARIO_TITLE="nfguard.io/exempt counts only in a namespace a NetfilterPolicy's exemptionNamespaceSelector selects"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s18_exemptions

S18_NODE=""
S18_REASON="e2e: vendor-certified, ticket NET-18"
# The incident pod (sleeping) on S18_NODE, annotated nfguard.io/exempt unless
# the second argument is "plain".
s18_pod() { # NAME [plain]
  local ann="{nfguard.io/exempt: \"$S18_REASON\"}"
  [ "${2:-}" != plain ] || ann="{}"
  incident_pod "$1" "$S18_NODE" "$ann" '["sleep", "infinity"]'
}

s18_exemptions() {
  local plain=nfguard-e2e-s18-plain allowed=nfguard-e2e-s18-allowed out
  new_rules_node
  S18_NODE=$RULES_NODE
  say "the node: $S18_NODE (minReaderVersion $(nnp "$S18_NODE" '{.status.minReaderVersion}'))"
  on_dump kubectl get netfilterpolicies -o wide
  e2e_policy nfguard-e2e-exemptions Deny "{app.kubernetes.io/part-of: nfguard-e2e}" "{nfguard.io/exemptions: allowed}"
  ok "NetfilterPolicy nfguard-e2e-exemptions: exemptionNamespaceSelector nfguard.io/exemptions=allowed"
  scenario_ns "$plain"
  scenario_ns "$allowed"
  kubectl label namespace "$allowed" nfguard.io/exemptions=allowed >/dev/null
  wait_for 60 "the webhook to honour nfguard.io/exempt in $allowed" exempt_honoured "$allowed" s18_pod

  # An ordinary namespace: the annotation is ignored and the pod denied.
  defer kubectl -n "$plain" delete pod router --ignore-not-found --grace-period=0 --force --wait=false
  if out=$(s18_pod router | kubectl -n "$plain" create -f - 2>&1); then
    fail "the annotated incident pod was admitted in $plain, which no policy lets exempt: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the pod failed in $plain, but not by nfguard's webhook: $out"
  [ -n "$(reason_part "$out" OldReaderNewRules)" ] || fail "the denial has no [OldReaderNewRules] reason: $out"
  grep -qF "nfguard.io/exempt ignored: no NetfilterPolicy allows exemptions in namespace $plain" <<<"$out" ||
    fail "the denial does not say the annotation was ignored: $out"
  grep -qF "Override: exempt the image with a NetfilterPolicy's exemptImages" <<<"$out" ||
    fail "the denial does not point to exemptImages: $out"
  if grep -qF 'annotate the workload' <<<"$out"; then
    fail "the denial suggests the annotation where it does not count: $out"
  fi
  if kubectl -n "$plain" get pod router >/dev/null 2>&1; then
    fail "pod router exists in $plain after the denial"
  fi
  ok "in $plain the annotated pod is denied, the annotation ignored and said so:"
  show <<<"$out"

  # The namespace the policy selects: admitted, the exemption reported.
  defer kubectl -n "$allowed" delete pod router --ignore-not-found --grace-period=0 --force --wait=false
  out=$(s18_pod router | kubectl -n "$allowed" create -f - 2>&1) ||
    fail "the annotated pod was denied in $allowed, which the policy lets exempt: $out"
  grep -qF "Warning: nfguard: [Exempt] exempt by annotation nfguard.io/exempt: $S18_REASON" <<<"$out" ||
    fail "admitted in $allowed without nfguard's exemption warning: $out"
  kubectl -n "$allowed" get pod router >/dev/null || fail "pod router does not exist in $allowed"
  ok "in $allowed (nfguard.io/exemptions=allowed) the same pod is admitted with its reason:"
  show <<<"$out"
  # There a denial names the annotation as the override.
  if out=$(s18_pod plain-router plain | kubectl -n "$allowed" create --dry-run=server -f - 2>&1); then
    fail "the incident pod without the annotation was admitted in $allowed: $out"
  fi
  grep -qF '(Override: annotate the workload nfguard.io/exempt: "<reason>".)' <<<"$out" ||
    fail "a denial in $allowed does not suggest the annotation: $out"
  ok "without the annotation it is denied there, the denial suggesting nfguard.io/exempt (server dry-run)"
}
