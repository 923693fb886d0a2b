# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 34: the opt-in require-image-digests: a gated pod or template by tag is refused by its policy, by digest judged by nfguard (compatible admitted, incident denied); an ordinary pod by tag admitted; admitted again once the policy is deleted.
#
# (local provider) the opt-in manifests/require-image-digests: gated
# pods and templates by tag refused by its policy, by digest judged by
# nfguard (compatible admitted, incident denied), ordinary pods by tag
# admitted; admitted again once it is deleted (e2e/scenarios/34-require-image-digests.sh)
#
# Runs on: local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$S34_NS" (scenario_ns)
#   - kubectl delete -f "$S34_POLICY" --ignore-not-found

SCENARIO_TITLE="the opt-in require-image-digests: a gated pod or template by tag is refused by its policy, by digest judged by nfguard (compatible admitted, incident denied); an ordinary pod by tag admitted; admitted again once the policy is deleted"
SCENARIO_PROVIDERS="local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s34_image_digests

# the
# opt-in component manifests/require-image-digests closes the window between
# nfguard's verdict on the digest a tag pointed to and what the kubelet
# pulls later. Its ValidatingAdmissionPolicy applied as the component ships
# it; server-side dry runs in a namespace of its own:
#   - a hostNetwork + NET_ADMIN pod naming its image by tag, and a
#     DaemonSet whose template does, are refused by the policy, the message
#     naming the container and the image;
#   - the same compatible image by digest is admitted: nfguard judged it;
#   - the incident image by digest is denied by nfguard itself (the digest
#     does not get around the gate);
#   - an ordinary pod by tag is admitted (the policy matches what the gate
#     judges, nothing else);
#   - once the policy is deleted, the gated pod by tag is admitted again.
# Local provider only: the digests are read from the registry as this
# machine reaches it (NFGUARD_E2E_REGISTRY).

S34_NS=nfguard-e2e-s34
S34_POLICY=$REPO/manifests/require-image-digests/policy.yaml
S34_VAP="ValidatingAdmissionPolicy 'nfguard-require-image-digests'"
S34_OUT=""

# s34_digest IMAGE: IMAGE (on REGISTRY, by tag) as REGISTRY/repo@sha256:...,
# the digest the registry answers for the tag.
s34_digest() {
  local path=${1#"$REGISTRY"/} headers digest
  headers=$(curl -fsS --max-time 10 -I \
    -H 'Accept: application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json' \
    "http://$NFGUARD_E2E_REGISTRY/v2/${path%:*}/manifests/${path##*:}") ||
    fail "the registry does not answer for $1"
  digest=$(tr -d '\r' <<<"$headers" | awk -F': ' 'tolower($1) == "docker-content-digest" { print $2 }')
  [[ "$digest" == sha256:* ]] || fail "no digest for $1 in: $headers"
  echo "$REGISTRY/${path%:*}@$digest"
}

s34_dry_run() { # YAML: 0 admitted, 1 refused; the answer in S34_OUT
  S34_OUT=$(kubectl -n "$S34_NS" create --dry-run=server -f - 2>&1 <<<"$1")
}

# The policy is in force: a gated pod by tag refused by it.
s34_in_force() {
  if s34_dry_run "$(pod_yaml s34-probe "$IMG_COMPATIBLE")"; then
    WHY="admitted: $S34_OUT"
    return 1
  fi
  WHY="refused, not by the policy: $S34_OUT"
  grep -qF "$S34_VAP" <<<"$S34_OUT"
}
# The policy gone: a gated pod by tag admitted.
s34_by_tag_admitted() {
  s34_dry_run "$(pod_yaml by-tag "$IMG_COMPATIBLE")" && return 0
  WHY="refused: $S34_OUT"
  return 1
}

s34_image_digests() {
  local compatible incident
  [ -n "${NFGUARD_E2E_REGISTRY:-}" ] || fail "scenario 34 needs NFGUARD_E2E_REGISTRY (the registry as this machine reaches it)"
  compatible=$(s34_digest "$IMG_COMPATIBLE")
  incident=$(s34_digest "$IMG_INCIDENT")
  ok "digests: $compatible, $incident"
  scenario_ns "$S34_NS"
  defer kubectl delete -f "$S34_POLICY" --ignore-not-found
  kubectl apply -f "$S34_POLICY" >/dev/null
  wait_for 60 "the policy nfguard-require-image-digests to be in force" s34_in_force
  ok "manifests/require-image-digests/policy.yaml applied; in force after ${WAITED} s"

  s34_dry_run "$(pod_yaml by-tag "$IMG_COMPATIBLE")" && fail "a gated pod by tag was admitted: $S34_OUT"
  grep -qF "$S34_VAP" <<<"$S34_OUT" || fail "a gated pod by tag was refused, but not by the policy: $S34_OUT"
  grep -qF "container cni names $IMG_COMPATIBLE" <<<"$S34_OUT" ||
    fail "the refusal does not name the container and its image: $S34_OUT"
  ok "a hostNetwork + NET_ADMIN pod by tag: refused: $S34_OUT"
  s34_dry_run "$(ds_yaml by-tag "$IMG_COMPATIBLE")" && fail "a gated DaemonSet by tag was admitted: $S34_OUT"
  grep -qF "$S34_VAP" <<<"$S34_OUT" || fail "a gated DaemonSet by tag was refused, but not by the policy: $S34_OUT"
  ok "a hostNetwork DaemonSet whose template names its image by tag: refused"

  s34_dry_run "$(pod_yaml by-digest "$compatible")" || fail "the compatible image by digest was refused: $S34_OUT"
  ok "the compatible image by digest: admitted: $S34_OUT"
  s34_dry_run "$(pod_yaml incident-by-digest "$incident")" && fail "the incident image by digest was admitted: $S34_OUT"
  denied_by "$S34_OUT" || fail "the incident image by digest was refused, but not by nfguard's verdict: $S34_OUT"
  grep -qF OldReaderNewRules <<<"$S34_OUT" || fail "nfguard's denial of the incident image by digest names no OldReaderNewRules: $S34_OUT"
  ok "the incident image by digest: denied by nfguard (OldReaderNewRules)"
  s34_dry_run "$(plain_pod_yaml ordinary "$IMG_COMPATIBLE")" || fail "an ordinary pod by tag was refused: $S34_OUT"
  ok "an ordinary pod by tag: admitted (not gated)"

  kubectl delete -f "$S34_POLICY" >/dev/null
  wait_for 60 "a gated pod by tag to be admitted without the policy" s34_by_tag_admitted
  ok "the policy deleted: a gated pod by tag is admitted again (opt-in) after ${WAITED} s"
}
