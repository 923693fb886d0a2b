#!/usr/bin/env bash
# Upgrade from an earlier nfguard to this checkout on the running local
# cluster (e2e/local-cluster.sh), one install path at a time; e2e/local.sh
# runs both after the kustomize uninstall (docs/e2e.md, "Upgrade"):
#   e2e/upgrade.sh kustomize|helm
#   e2e/upgrade.sh prebuild      only build (or find cached) the earlier binary
# 1. The earlier commit's binary (e2e/build-old-nfguard.sh, cached by
#    commit) as the image ghcr.io/nfguard/nfguard:e2e-old and its manifests/
#    (kustomize) or charts/nfguard (Helm) installed the way it documented.
# 2. A NetfilterPolicy created; every node's profile probed and its
#    nfguard.io/ labels set.
# 3. The upgrade to this checkout the way docs/install.md says
#    (`e2e/local-cluster.sh install METHOD`: kustomize applies again; Helm
#    applies the chart's CRDs, then helm upgrade --reuse-values), while a
#    prober sends the incident DaemonSet (hostNetwork + NET_ADMIN, iptables
#    1.8.7: every nfguard denies it) as a server-side dry run every 0.5 s.
# 4. Checked: every profile and the policy keep their uid (and the policy its
#    spec); every node's nfguard.io/ labels and taints are as before; each
#    stored profile and policy passes the new CRDs' validation (a
#    server-side dry-run create of the object as stored is refused only as
#    AlreadyExists, which the API server answers after validation and
#    admission) and a dry-run replace is accepted; the new reporter's
#    heartbeats land on the old profiles. The gate never opens: no probe is
#    admitted (under failurePolicy Ignore that would be a review no replica
#    answered), every probe that was not nfguard's denial is listed, and the
#    longest time between two nfguard denials stays under MAX_GAP. The new
#    webhook serves the earlier one's certificate (taken over from the
#    Secret the earlier webhook made into the one the install provides):
#    the caBundle is unchanged.
# 5. A node without iptables (NFGUARD_E2E_NFTABLES_NODE; local: e2e-nftables)
#    is one the earlier version cannot describe: its CRD refuses the
#    reporter's `iptables.backend: null` (422), so that reporter never turns
#    Ready there (its DaemonSet tolerates every taint: it cannot be kept
#    off). The earlier install waits for the other nodes' reporters; steps
#    2-4 compare the other nodes' labels and taints; after the upgrade the
#    new reporter must describe that node (a Fresh profile, its backend
#    label).
# Env: NFGUARD_E2E_UPGRADE_FROM (the earlier commit; default below),
# NFGUARD_E2E_NFTABLES_NODE (optional, see 5),
# KUBECONFIG, NFGUARD_E2E_REGISTRY_PULL, kubectl and jq on PATH (what
# `e2e/local-cluster.sh env` exports). A clone without that commit fails
# (e2e/build-old-nfguard.sh says what to fetch): never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/lifecycle-lib.sh
. e2e/lifecycle-lib.sh

# The last commit before issue #20's hardening (2021841, "review mend:
# NodeIndex ..."): its CRDs lack spec.nodeName's immutability rule, its RBAC
# and webhook configuration predate the trimmed verbs, the matchConditions
# and client certificates, and it has no NetworkPolicy or controller Node
# policy (docs/e2e.md, "Upgrade").
FROM=${NFGUARD_E2E_UPGRADE_FROM:-20218418bba71c0c3650beeed1360b3fa75a8fe4}
# `e2e/upgrade.sh prebuild`: only step 1's build (cached by commit), which
# e2e/local.sh starts beside the scenarios instead of after them.
if [ "${1:-}" = prebuild ]; then exec e2e/build-old-nfguard.sh "$FROM"; fi
NS=nfguard-system
LOG=e2e-upgrade
POLICY=nfguard-e2e-upgrade
# The longest time between two nfguard verdicts an upgrade may take (issue
# #41: the gate is never closed longer than this), in seconds. The probes
# themselves come every 0.5 s plus a server-side dry run.
MAX_GAP=2.0
IMG_INCIDENT=${NFGUARD_E2E_REGISTRY_PULL:?NFGUARD_E2E_REGISTRY_PULL is not set}/nfguard-e2e/incident:1.8.7-nft
# The node the earlier version cannot describe (5).
UNSUPPORTED_NODE=${NFGUARD_E2E_NFTABLES_NODE:-}

# wait_until SECONDS WHAT CMD...: CMD retried every 2 s, at most SECONDS.
wait_until() {
  local secs=$1 what=$2 t0=$SECONDS
  shift 2
  until "$@"; do
    [ $((SECONDS - t0)) -lt "$secs" ] || fail "timed out after $secs s waiting for $what"
    sleep 2
  done
}

# Every node has a probed profile, a backend and its backend label.
profiles_filled() {
  local json
  json=$(kubectl get nodes,nodenetfilterprofiles -o json 2>/dev/null) || return 1
  jq -e --arg skip "$UNSUPPORTED_NODE" '[.items[] | select(.kind == "Node") | .metadata
      | select(.name != $skip)] as $nodes
    | [.items[] | select(.kind == "NodeNetfilterProfile")
       | select(.status.lastProbeTime != null and .status.activeBackend != null) | .metadata.name] as $probed
    | ($nodes | length) > 0
      and all($nodes[]; .name as $n | ($probed | index($n)) != null
        and .labels["nfguard.io/iptables-backend"] != null)' <<<"$json" >/dev/null
}

# Every profile probed after EPOCH (the new reporter wrote to it) and Fresh.
probed_since() {
  local json
  json=$(kubectl get nodenetfilterprofiles -o json 2>/dev/null) || return 1
  jq -e --argjson since "$1" '(.items | length) > 0 and all(.items[];
    (.status.lastProbeTime | fromdateiso8601) >= $since
    and any(.status.conditions[]?; .type == "Fresh" and .status == "True"))' <<<"$json" >/dev/null
}

# "KIND NAME UID" of every profile and policy, sorted.
# (The profile of the node the earlier version cannot describe is left out:
# its failing reporter creates it at a moment of its own; step 5 checks it.)
stored_objects() {
  kubectl get nodenetfilterprofiles,netfilterpolicies -o json |
    jq -r --arg skip "$UNSUPPORTED_NODE" '.items[]
      | select(.kind != "NodeNetfilterProfile" or .metadata.name != $skip)
      | "\(.kind) \(.metadata.name) \(.metadata.uid)"' | sort
}

# probe FILE STOP: until STOP exists, every 0.5 s a server-side dry run of
# the incident DaemonSet; one line each: "START END nfguard|admitted|error TEXT".
probe() {
  local out t0 t1 class
  while [ ! -e "$2" ]; do
    t0=$(date +%s.%N)
    if out=$(incident_ds upgrade-probe default "$IMG_INCIDENT" | kubectl create --dry-run=server --request-timeout=15s -f - 2>&1); then
      class=admitted
    elif denied_by_nfguard "$out"; then
      class=nfguard
    else
      class=error
    fi
    t1=$(date +%s.%N)
    printf '%s %s %s %s\n' "$t0" "$t1" "$class" "$(tr '\n' ' ' <<<"$out" | cut -c1-200)" >>"$1"
    sleep 0.5
  done
}

# A stored object is valid under the installed CRDs: a dry-run create of it
# as stored passes validation and admission and is refused only because it
# exists; a dry-run replace of it is accepted.
stored_valid() { # KIND NAME
  local json obj out
  json=$(kubectl get "$1" "$2" -o json) || fail "cannot read $1 $2"
  obj=$(jq 'del(.metadata.uid, .metadata.resourceVersion, .metadata.creationTimestamp,
    .metadata.managedFields, .metadata.generation, .status)' <<<"$json")
  if out=$(kubectl create --dry-run=server -f - <<<"$obj" 2>&1); then
    fail "a dry-run create of the existing $1 $2 was accepted: $out"
  fi
  grep -qF 'AlreadyExists' <<<"$out" || grep -qF 'already exists' <<<"$out" ||
    fail "$1 $2 as stored by the earlier nfguard does not pass the new CRD: $out"
  out=$(kubectl replace --dry-run=server -f - <<<"$json" 2>&1) ||
    fail "a dry-run replace of $1 $2 as stored is refused: $out"
}

main() {
  local method=${1:-} bin objects marks spec after stored t0 t1 took prober lines bad gap out last admitted bundle certs
  case "$method" in kustomize | helm) ;; *) echo "usage: $0 kustomize|helm" >&2; exit 2 ;; esac

  # 1. the earlier nfguard, from its own tree (not on the node it cannot describe).
  bin=$(e2e/build-old-nfguard.sh "$FROM")
  mkdir -p "$work/old"
  git archive "$FROM" manifests crds charts | tar -x -C "$work/old"
  t0=$SECONDS
  NFGUARD_E2E_SOURCE="$work/old" NFGUARD_E2E_BINARY="$bin" NFGUARD_E2E_IMAGE=ghcr.io/nfguard/nfguard:e2e-old \
    NFGUARD_E2E_REPORTER_UNREADY_NODE="$UNSUPPORTED_NODE" \
    e2e/local-cluster.sh install "$method" >&2 2>"$work/install-old.log" ||
    fail "installing nfguard ${FROM:0:7} with $method failed: $(tail -n 20 "$work/install-old.log")"
  ok "nfguard ${FROM:0:7} installed with $method in $((SECONDS - t0)) s (image ghcr.io/nfguard/nfguard:e2e-old)"

  # 2. a policy, profiles and labels.
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: $POLICY, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Warn
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: nfguard-e2e-upgrade}}
  maxTaintedNodesPercent: 50
YAML
  wait_until 120 "every node's profile and backend label from nfguard ${FROM:0:7}" profiles_filled
  objects=$(stored_objects)
  marks=$(node_marks_except "$UNSUPPORTED_NODE")
  spec=$(kubectl get netfilterpolicy "$POLICY" -o json | jq -cS .spec)
  # Compared after the upgrade field by field: the new CRDs may default fields
  # the old ones did not have.
  ok "before the upgrade: $(grep -c NodeNetfilterProfile <<<"$objects") profiles, $(grep -c NetfilterPolicy <<<"$objects") policies, $(grep -c . <<<"$marks") node labels/taints"
  out=$(incident_ds upgrade-probe default "$IMG_INCIDENT" | kubectl create --dry-run=server -f - 2>&1) &&
    fail "nfguard ${FROM:0:7} admitted the incident DaemonSet: $out"
  denied_by_nfguard "$out" ||
    fail "nfguard ${FROM:0:7} did not deny the incident DaemonSet itself: $out"

  bundle=$(kubectl get validatingwebhookconfiguration nfguard -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
  [ -n "$bundle" ] || fail "nfguard ${FROM:0:7} set no caBundle"

  # 3. the upgrade, probed.
  probe "$work/probes" "$work/stop" &
  prober=$!
  sleep 3
  t0=$(date +%s.%N)
  NFGUARD_E2E_SOURCE='' e2e/local-cluster.sh install "$method" 2>"$work/install-new.log" ||
    fail "upgrading to this checkout with $method failed: $(tail -n 20 "$work/install-new.log")"
  t1=$(date +%s.%N)
  sleep 5
  touch "$work/stop"
  wait "$prober" || true
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  ok "upgraded to this checkout with $method in $took s (rollouts complete, caBundle set)"

  # The outage: probes not denied by nfguard, the longest time between two
  # nfguard denials (answers, by their end).
  lines=$(grep -c . "$work/probes")
  bad=$(awk '$3 != "nfguard"' "$work/probes")
  gap=$(awk '$3 == "nfguard" { if (last != "" && $2 - last > max) max = $2 - last; last = $2 } END { printf "%.1f", max }' "$work/probes")
  if [ -n "$bad" ]; then
    say "probes not denied by nfguard during the upgrade (start end class answer):"
    awk '{ print "    " $0 }' <<<"$bad"
  fi
  admitted=$(awk '$3 == "admitted"' "$work/probes")
  ok "admission during the upgrade: $lines probes, $(grep -c . <<<"$bad") not denied by nfguard ($(grep -c . <<<"$admitted" || true) admitted, $(awk '$3 == "error"' "$work/probes" | grep -c . || true) errors); longest time between two nfguard denials $gap s (rollout $took s)"
  [ -z "$admitted" ] || fail "the gate opened during the upgrade: $(grep -c . <<<"$admitted") probes admitted unjudged (above)"
  awk -v g="$gap" -v m="$MAX_GAP" 'BEGIN { exit !(g < m) }' ||
    fail "the gate was closed for $gap s between two nfguard denials during the upgrade, over $MAX_GAP s"
  last=$(tail -n 1 "$work/probes")
  [[ $last == *' nfguard '* ]] || fail "the last probe was not denied by nfguard: $last"
  # The certificate: the earlier webhook made the Secret nfguard-webhook-tls
  # itself; the install now provides nfguard-webhook-cert empty and the new
  # webhook takes the earlier certificate over, so both versions served
  # under one CA and the caBundle never changed.
  out=$(kubectl -n "$NS" get secret nfguard-webhook-cert nfguard-webhook-tls \
    -o jsonpath='{range .items[*]}{.data.tls\.crt}{"\n"}{end}' 2>&1) || fail "cannot read the webhook's Secrets: $out"
  mapfile -t certs <<<"$out"
  if [ "${#certs[@]}" != 2 ] || [ -z "${certs[0]}" ] || [ "${certs[0]}" != "${certs[1]}" ]; then
    fail "the new webhook's Secret nfguard-webhook-cert does not hold the earlier nfguard-webhook-tls certificate"
  fi
  [ "$(kubectl get validatingwebhookconfiguration nfguard -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" = "$bundle" ] ||
    fail "the caBundle changed in the upgrade"
  ok "the new webhook took over the earlier certificate (Secret nfguard-webhook-tls -> nfguard-webhook-cert, given empty by the install): the caBundle is unchanged"

  # 4. what the old version stored, kept and valid.
  stored=$(stored_objects)
  [ "$stored" = "$objects" ] || fail "profiles or policies changed identity in the upgrade:
$(diff <(echo "$objects") <(echo "$stored") || true)"
  after=$(kubectl get netfilterpolicy "$POLICY" -o json | jq -cS --argjson before "$spec" \
    '.spec | with_entries(select(.key as $k | $before | has($k)))')
  [ "$after" = "$spec" ] || fail "the policy's spec changed in the upgrade: $spec -> $after"
  ok "every profile and policy kept its uid, $POLICY its spec"
  wait_until 120 "the new reporter's heartbeat on every profile" probed_since "${t1%.*}"
  ok "every profile probed by the new reporter after the upgrade, Fresh"
  while read -r kind name _; do
    stored_valid "$kind" "$name"
  done <<<"$stored"
  ok "every stored profile and policy passes the new CRDs (server-side dry-run create: AlreadyExists after validation; dry-run replace accepted)"
  after=$(node_marks_except "$UNSUPPORTED_NODE")
  [ "$after" = "$marks" ] || fail "the nodes' nfguard.io/ labels or taints changed in the upgrade:
$(diff <(echo "$marks") <(echo "$after") || true)"
  ok "every node's nfguard.io/ labels and taints are as before ($(grep -c . <<<"$marks"))"

  # 5. the node the earlier version could not describe, described now.
  if [ -n "$UNSUPPORTED_NODE" ]; then
    wait_until 120 "the new reporter's profile of $UNSUPPORTED_NODE" unsupported_described "${t1%.*}"
    ok "$UNSUPPORTED_NODE (no iptables: the earlier version's CRD refuses its profile) described by the upgraded reporter: Fresh, backend label set"
  fi
}

# node_marks without NODE's lines (all of them when NODE is empty).
node_marks_except() {
  local marks
  marks=$(node_marks)
  if [ -n "$1" ]; then
    awk -v n="$1" '$1 != n' <<<"$marks"
  else
    printf '%s\n' "$marks"
  fi
}

# The profile of UNSUPPORTED_NODE probed after EPOCH, Fresh, and its label.
unsupported_described() {
  local json
  json=$(kubectl get "nodenetfilterprofile/$UNSUPPORTED_NODE" "node/$UNSUPPORTED_NODE" -o json 2>/dev/null) || return 1
  jq -e --argjson since "$1" '[.items[] | select(.kind == "NodeNetfilterProfile")][0] as $p
    | [.items[] | select(.kind == "Node")][0] as $n
    | ($p.status.lastProbeTime | fromdateiso8601) >= $since
      and any($p.status.conditions[]?; .type == "Fresh" and .status == "True")
      and $n.metadata.labels["nfguard.io/iptables-backend"] != null' <<<"$json" >/dev/null
}

# The prober stops, the policy goes and the work directory too, also on failure.
work=$(mktemp -d)
trap 'touch "$work/stop"; kubectl delete netfilterpolicy "$POLICY" --ignore-not-found >/dev/null; rm -rf "$work"' EXIT
main "$@"
