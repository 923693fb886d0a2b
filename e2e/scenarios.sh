#!/usr/bin/env bash
# shellcheck disable=SC2034,SC2153 # the variables are read by e2e/scenarios/ and e2e/lib/
# nfguard's end-to-end scenarios: the harness. Each scenario is a file,
# e2e/scenarios/NN-what-it-proves.sh, whose top says what it proves, where
# it runs, what it needs and what it undoes; e2e/lib/ holds the helpers more
# than one scenario uses (docs/e2e.md, "How the scenarios are written").
# e2e/run.sh runs them on kind, e2e/local.sh on the local cluster.
#
# Contract with the provider (nfguard already installed)
#   KUBECONFIG                 the cluster (kubectl on PATH)
#   NFGUARD_E2E_PROVIDER       kind | local
#   NFGUARD_E2E_REGISTRY_PULL  host:port the pods and nfguard pull from, with
#                              nfguard-e2e/ incident:1.8.7-nft,
#                              compatible:1.8.11-wrapper, legacy:1.8.9-legacy
#                              and (scenario 26) nft-writer:1.1.3
#   NFGUARD_E2E_EXPECT_BACKENDS  optional "NODE=BACKEND ...", checked
#   NFGUARD_E2E_ONLY           optional, e.g. "1 2 5": only these
#   the needs a scenario declares (need_met, below); the local provider
#   provides every one, so there a missing need fails the run.
#
# Counting: each selected scenario runs in its own subshell and counts once
# it returned, its clean-up completed and the cluster is healthy again.
# `skip` fails unless SCENARIO_MAY_SKIP_ON names the provider. The run stops
# at the first failure (with a dump) and fails if fewer scenarios ran to
# their end than were selected. Last line: `N passed, 0 failed`.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

NS=nfguard-system
PROVIDER=${NFGUARD_E2E_PROVIDER:-}
REGISTRY=${NFGUARD_E2E_REGISTRY_PULL:-}
NFT_NODE=${NFGUARD_E2E_NFTABLES_NODE:-}
IMG_INCIDENT=$REGISTRY/nfguard-e2e/incident:1.8.7-nft
IMG_COMPATIBLE=$REGISTRY/nfguard-e2e/compatible:1.8.11-wrapper
IMG_LEGACY=$REGISTRY/nfguard-e2e/legacy:1.8.9-legacy
# The order they run in. 31 and 32 change the cluster's own namespaces; 26
# first among the node without iptables' scenarios, so 19-22 check that it
# left the node as it found it; 27 last, over the alerts the others caused.
RUN_ORDER="1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 30 33 34 35 31 32 26 19 20 21 22 23 24 25 27"
RUN_DIR=$(mktemp -d)
CURRENT=setup
CLEANUPS=() DUMPS=() SELECTED=()
WHY="" LAST_ERR="" FAILED=""
declare -A EXPECT=()

for lib in "$REPO"/e2e/lib/*.sh; do
  # shellcheck source=/dev/null
  source "$lib"
done

# ---- output and failure -------------------------------------------------------
say() { printf 'e2e: %s\n' "$*"; }
ok() { say "ok: $*"; }
show() { sed 's/^/    /'; } # an indented block (command output in the record)
skip() {
  [[ " ${SCENARIO_MAY_SKIP_ON:-} " == *" $PROVIDER "* ]] ||
    fail "a part was skipped, and the scenario declares no skip on $PROVIDER (SCENARIO_MAY_SKIP_ON): $*"
  echo "${SCENARIO_N:-?}" >>"$RUN_DIR/skipped"
  say "skip: $*"
}
fail() {
  FAILED=1
  say "FAIL: [$CURRENT] $*"
  dump
  exit 1
}

# defer CMD ARGS...: run when the current scenario ends (also on failure),
# last registered first. on_dump CMD ARGS...: more diagnostics of it.
defer() { CLEANUPS+=("$(printf '%q ' "$@")"); }
on_dump() { DUMPS+=("$(printf '%q ' "$@")"); }
run_cleanups() {
  local i rc=0
  for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do
    if ! eval "${CLEANUPS[i]}"; then
      say "cleanup step failed: ${CLEANUPS[i]}"
      rc=1
    fi
  done
  CLEANUPS=()
  return "$rc"
}

dump() {
  local c d
  say "---- diagnostics for [$CURRENT]"
  set +e
  {
    part "nodes" get nodes -o wide
    part "nfguard's node labels and taints" get nodes -o custom-columns='NAME:.metadata.name,BACKEND:.metadata.labels.nfguard\.io/iptables-backend,TAINTS:.spec.taints[*].key'
    part "NodeNetfilterProfiles" get nodenetfilterprofiles -o yaml
    part "NetfilterPolicies" get netfilterpolicies -o yaml
    part "pods" get pods -A -o wide
    part "recent events" get events -A --sort-by=.lastTimestamp | tail -n 40
    part "controller Lease" -n "$NS" get lease nfguard-controller -o yaml
    part "ValidatingWebhookConfiguration nfguard" get validatingwebhookconfiguration nfguard \
      -o jsonpath='failurePolicy={.webhooks[0].failurePolicy} timeoutSeconds={.webhooks[0].timeoutSeconds}{"\n"}'
    echo "caBundle: $(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}' | wc -c) bytes"
    for c in reporter controller webhook; do
      part "$c logs" -n "$NS" logs -l "app.kubernetes.io/component=$c" --all-containers --prefix --tail=40
    done
    for d in "${DUMPS[@]}"; do
      echo "## $d"
      eval "$d"
    done
  } 2>&1 | show
  set -e
}
part() { # TITLE KUBECTL_ARGS...
  echo "## $1"
  shift
  kubectl --request-timeout=20s "$@"
}

on_err() { LAST_ERR="line $1: $2"; }
trap 'on_err "$LINENO" "$BASH_COMMAND"' ERR
# The same for the harness and for each scenario's subshell: an unexpected
# error is dumped, the clean-up runs.
on_exit() {
  local rc=$?
  trap - EXIT ERR
  set +e
  if [ "$rc" != 0 ] && [ -z "$FAILED" ]; then
    say "FAIL: [$CURRENT] unexpected error (exit $rc) at ${LAST_ERR:-?}"
    dump
  fi
  if ! run_cleanups; then
    say "FAIL: [$CURRENT] the clean-up did not complete: the cluster may not be healthy"
    [ "$rc" != 0 ] || rc=1
  fi
  [ -n "${SCENARIO_N:-}" ] || summary "$rc"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS WHAT PREDICATE [ARGS...]: retry PREDICATE every 2 s; a
# predicate may explain itself in WHY. Sets WAITED (seconds taken).
wait_for() {
  local secs=$1 what=$2 start=$SECONDS
  shift 2
  WHY=""
  until "$@"; do
    if [ $((SECONDS - start)) -ge "$secs" ]; then
      fail "timed out after ${secs} s waiting for $what${WHY:+ ($WHY)}"
    fi
    sleep 2
  done
  WAITED=$((SECONDS - start))
}

# ---- the cluster a scenario starts from -----------------------------------------
# NODES: the schedulable nodes; CP_NODES: those with the control-plane taint
# (kind's control plane), where the reporter goes only by opt-in.
NODES=()
CP_NODES=()
list_nodes() {
  local all n effects
  all=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.taints[?(@.key=="node-role.kubernetes.io/control-plane")].effect}{"\n"}{end}' 2>/dev/null) || true
  NODES=()
  CP_NODES=()
  while read -r n effects; do
    [ -n "$n" ] || continue
    case "$effects" in
      *NoSchedule* | *NoExecute*) CP_NODES+=("$n") ;;
      *) NODES+=("$n") ;;
    esac
  done <<<"$all"
}
# Every node Ready and free of nfguard taints, nfguard's three components
# fully available, the caBundle set and every profile Fresh.
healthy() {
  local n s d want r u t
  list_nodes
  [ "${#NODES[@]}" -ge 2 ] || { WHY="${#NODES[@]} node(s), the scenarios need 2 or more"; return 1; }
  for n in "${NODES[@]}"; do
    [ "$(node_ready "$n")" = True ] || { WHY="node $n is not Ready"; return 1; }
    [ -z "$(nfguard_taints "$n")" ] || { WHY="node $n carries $(nfguard_taints "$n" | tr '\n' ' ')"; return 1; }
    [ "$(condition "$n" Fresh status)" = True ] || { WHY="profile $n is not Fresh"; return 1; }
  done
  want=${#NODES[@]}
  s=$(get daemonset nfguard-reporter '{.status.desiredNumberScheduled} {.status.numberReady} {.status.updatedNumberScheduled}' -n "$NS")
  [ "$s" = "$want $want $want" ] || { WHY="reporter desired/ready/updated $s, want $want"; return 1; }
  for d in nfguard-controller nfguard-webhook; do
    s=$(get deployment "$d" '{.spec.replicas} {.status.readyReplicas} {.status.updatedReplicas} {.status.replicas}' -n "$NS")
    read -r want r u t <<<"$s"
    if [ "${r:-0}" != "$want" ] || [ "${u:-0}" != "$want" ] || [ "${t:-0}" != "$want" ]; then
      WHY="$d replicas/ready/updated/total: $s"
      return 1
    fi
  done
  [ -n "$(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}')" ] ||
    { WHY="the webhook configuration has no caBundle"; return 1; }
}

# ---- scenarios: found, judged applicable, run, counted ----------------------------
scenario_file() { # N: its one file (checked for every N before the run)
  local files=("$REPO"/e2e/scenarios/"$(printf %02d "$1")"-*.sh)
  [ "${#files[@]}" = 1 ] && [ -f "${files[0]}" ] && echo "${files[0]}"
}
need_met() { # NEED
  case "$1" in
    nftables-node) [ -n "$NFT_NODE" ] ;;
    private-registry) [ -n "${NFGUARD_E2E_PRIVATE_REGISTRY_PULL:-}" ] && [ -n "${NFGUARD_E2E_PRIVATE_REGISTRY_AUTH_FILE:-}" ] ;;
    prometheus) [ -n "${NFGUARD_E2E_PROMETHEUS:-}" ] ;;
    *) fail "unknown need '$1' (e2e/scenarios.sh: need_met)" ;;
  esac
}
# not_applicable N: why scenario N cannot run here (empty: it can).
not_applicable() {
  local need
  # shellcheck source=/dev/null
  (source "$(scenario_file "$1")"
    [[ " $SCENARIO_PROVIDERS " == *" $PROVIDER "* ]] || { echo "runs on $SCENARIO_PROVIDERS only"; exit 0; }
    for need in $SCENARIO_NEEDS; do
      need_met "$need" || echo "needs $need"
    done)
}
selected() { [[ " ${SELECTED[*]} " == *" $1 "* ]]; }

# One scenario, in a subshell: its helpers and state stay its own.
run_one() { # N
  # Read-only: a scenario's own `n` or `t0` (without `local`) cannot change them.
  readonly SCENARIO_N=$1 SCENARIO_T0=$SECONDS
  trap on_exit EXIT
  # shellcheck source=/dev/null
  source "$(scenario_file "$SCENARIO_N")"
  CURRENT="$SCENARIO_N. $SCENARIO_TITLE"
  say "==== $CURRENT"
  wait_for 300 "a healthy cluster before scenario $SCENARIO_N" healthy
  "$SCENARIO_RUN"
  run_cleanups || fail "the clean-up did not complete"
  wait_for 300 "a healthy cluster after scenario $SCENARIO_N" healthy
  echo "$SCENARIO_N" >>"$RUN_DIR/finished"
  ok "scenario $SCENARIO_N passed in $((SECONDS - SCENARIO_T0)) s"
}

summary() { # RC
  local ran skipped
  ran=$(grep -c . "$RUN_DIR/finished" 2>/dev/null || true)
  skipped=$(sort -u "$RUN_DIR/skipped" 2>/dev/null | tr '\n' ' ' || true)
  say "ran ${ran:-0} of ${#SELECTED[@]} selected scenarios to their end${skipped:+; parts skipped, as declared for $PROVIDER, in: $skipped}"
  rm -rf "$RUN_DIR"
  if [ "$1" = 0 ]; then echo "${ran:-0} passed, 0 failed"; else echo "${ran:-0} passed, 1 failed"; fi
}

# ---- main --------------------------------------------------------------------------
case "$PROVIDER" in
  kind) command -v docker >/dev/null || fail "NFGUARD_E2E_PROVIDER=kind needs docker" ;;
  local) [ -x "$REPO/e2e/local-cluster.sh" ] || fail "NFGUARD_E2E_PROVIDER=local needs e2e/local-cluster.sh" ;;
  *) fail "NFGUARD_E2E_PROVIDER must be kind or local, not '${PROVIDER}'" ;;
esac
[ -n "$REGISTRY" ] || fail "NFGUARD_E2E_REGISTRY_PULL is not set"
[ -n "${KUBECONFIG:-}" ] || fail "KUBECONFIG is not set"
command -v kubectl >/dev/null || fail "kubectl is not on PATH"
for e in ${NFGUARD_E2E_EXPECT_BACKENDS:-}; do
  [[ "$e" == ?*=?* ]] || fail "NFGUARD_E2E_EXPECT_BACKENDS: '$e' is not NODE=BACKEND"
  EXPECT[${e%%=*}]=${e#*=}
done
# Every file is in RUN_ORDER and every number has its file.
for f in "$REPO"/e2e/scenarios/*.sh; do
  n=${f##*/}
  n=$((10#${n%%-*}))
  [[ " $RUN_ORDER " == *" $n "* ]] || fail "${f#"$REPO"/} is not in RUN_ORDER (e2e/scenarios.sh)"
done
for n in $RUN_ORDER; do
  scenario_file "$n" >/dev/null || fail "scenario $n of RUN_ORDER: not exactly one e2e/scenarios/$(printf %02d "$n")-*.sh"
done
for n in ${NFGUARD_E2E_ONLY:-$RUN_ORDER}; do
  [[ " $RUN_ORDER " == *" $n "* ]] || fail "NFGUARD_E2E_ONLY: no scenario $n ($RUN_ORDER)"
  why=$(not_applicable "$n")
  if [ -z "$why" ]; then
    SELECTED+=("$n")
  elif [ -n "${NFGUARD_E2E_ONLY:-}" ] || [ "$PROVIDER" = local ]; then
    fail "scenario $n cannot run here: $(tr '\n' ' ' <<<"$why")"
  else
    say "not applicable on $PROVIDER: scenario $n ($(tr '\n' ' ' <<<"$why" | sed 's/ $//'))"
  fi
done
say "provider $PROVIDER, registry $REGISTRY, $(kubectl version 2>/dev/null | tr '\n' ' ')"
say "selected ${#SELECTED[@]} scenarios: ${SELECTED[*]}"

monitoring_up
for n in "${SELECTED[@]}"; do
  CURRENT="$n"
  set +e # a subshell in a condition would run without errexit
  (set -e; run_one "$n")
  rc=$?
  set -e
  finished=$(cat "$RUN_DIR/finished" 2>/dev/null || true)
  [ "$rc" = 0 ] || { FAILED=1; exit "$rc"; }
  [ "${finished##*$'\n'}" = "$n" ] || fail "scenario $n exited without running to its end"
done
monitoring_down
CURRENT=finished
ran=$(grep -c . "$RUN_DIR/finished" 2>/dev/null || true)
[ "${ran:-0}" = "${#SELECTED[@]}" ] || fail "${ran:-0} of ${#SELECTED[@]} selected scenarios ran to their end"
