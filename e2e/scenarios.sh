#!/usr/bin/env bash
# nfguard's end-to-end scenarios, provider-agnostic: e2e/run.sh runs them on
# kind, the local provider (e2e/local-cluster.sh) on a real cluster built from
# Kubernetes' sources in network namespaces. nfguard must already be installed
# (manifests/, with NFGUARD_INSECURE_REGISTRIES for the test registry).
#
# Contract with the provider
#   KUBECONFIG                 the cluster (kubectl on PATH)
#   NFGUARD_E2E_PROVIDER       kind | local
#   NFGUARD_E2E_REGISTRY_PULL  host:port the pods and nfguard pull from (kind:
#                              <cluster>-registry:5000, local: 10.77.0.1:5000),
#                              already holding, under nfguard-e2e/:
#                                incident:1.8.7-nft          iptables 1.8.7, alternatives -> nft
#                                compatible:1.8.11-wrapper   1.8.11 behind iptables-wrapper
#                                legacy:1.8.9-legacy         1.8.9, alternatives -> legacy
#                              (runnable: sh, sleep and the iptables tools), and
#                              for scenario 26 (local provider):
#                                nft-writer:1.1.3            Debian trixie's nftables 1.1.3
#                                                            (nft, libnftables1, its libc6)
#   NFGUARD_E2E_EXPECT_BACKENDS  optional, e.g. "e2e-nft=nft e2e-legacy=legacy":
#                              each named node's profile and its
#                              nfguard.io/iptables-backend label must say so
#   NFGUARD_E2E_ONLY           optional, e.g. "1 2 5": run only these scenarios
#   NFGUARD_E2E_NFTABLES_NODE  optional (local: e2e-nftables): a node with no
#                              iptables command and kube-proxy in nftables
#                              mode; scenarios 19-24 and 26 run only when it
#                              is set (asking for one of them without it fails)
#   NFGUARD_E2E_PROMETHEUS     optional (local: e2e/local.sh builds it): a
#                              prometheus binary; a live Prometheus then
#                              scrapes nfguard (e2e/monitoring.sh): scenario
#                              6's alert hooks and scenario 27 use it
#   NFGUARD_E2E_LOG_DIR        local only: the components' logs, kubelet's as
#                              kubelet-NODE.log (kind: journalctl in the node)
#   node_exec NODE CMD...      (below) runs CMD in the node's network and mount
#                              namespace: local `e2e/local-cluster.sh node`,
#                              kind `docker exec`; the node has its own iptables
#                              (following its alternatives), iptables-save and curl
#   node_kube_proxy NODE stop|cont  (below) freezes or resumes the node's
#                              kube-proxy process (SIGSTOP/SIGCONT): local
#                              `e2e/local-cluster.sh kube-proxy`, kind through
#                              `docker exec` (scenario 6)
#
# Output: `e2e: ok: ...` for every checked outcome, `e2e: skip: ...` for a part
# that cannot apply on this provider (the rest of that scenario still runs),
# `e2e: FAIL: ...` plus a dump of the relevant objects on the first failure
# (exit 1). The last line is `N passed, 0 failed` (or `N passed, 1 failed`).
# Every scenario undoes what it created or changed (namespaces, workloads,
# policies, scaled or re-configured Deployments and DaemonSets, the webhook
# configuration, node firewall rules) through traps, also when it fails, and
# starts by waiting for a healthy cluster.
#
# Scenarios
#   1. every node has a NodeNetfilterProfile owned by its Node, probed, with
#      its backend, and the matching nfguard.io/iptables-backend label
#   2. the incident DaemonSet (iptables-nft 1.8.7, hostNetwork + NET_ADMIN) is
#      denied by the API server, with nfguard's reason naming node and rule
#   3. a compatible DaemonSet (1.8.11 behind iptables-wrapper) is admitted and
#      runs Ready on every node with an iptables command (not on
#      NFGUARD_E2E_NFTABLES_NODE); the writer inventory lists it
#   4. a legacy-only image is denied where the rules are nft and admitted (and
#      runs) with nodeSelector nfguard.io/iptables-backend=legacy
#   5. a reporter restart keeps every profile (same uid), fresh heartbeats follow
#   6. the incident for real on an nft node: kubelet's old KUBE-FIREWALL rule,
#      a 1.8.7 save/restore, the node cut off, what Kubernetes reports; with
#      the node's kube-proxy frozen (it would rewrite the chain), nfguard must
#      report the corrupted chain once the node is reachable: the hazard in
#      the profile, Healthy=False and the degraded taint; then the repair
#      lifts the taint
#   7. every component under its own ServiceAccount without Forbidden errors;
#      a reporter token bound to node A cannot write node B's profile
#   8. two controller replicas: the standby takes the Lease over when the
#      leader's pod is deleted (no replacement created to race it) and wrote
#      nothing before
#   9. the webhook down: failurePolicy Ignore admits in time, Fail refuses;
#      restored afterwards with the same caBundle
#  10. an `action: Taint` policy selecting namespaces labelled team=net: a
#      hostNetwork + NET_ADMIN pod with iptables-nft 1.8.7 in such a namespace
#      is admitted with nfguard's warning and its node gets
#      nfguard.io/iptables-incompatible:NoSchedule; relabelling the namespace
#      team=web removes the taint. An invalid policy beside it (bad
#      exemptImages glob) gets Valid=False naming the field, and admission
#      judges with the valid policy, warning that it ignored the invalid one
#  11. a token bound to node A's reporter pod is refused, for real (not a
#      dry run): node B's profile, A's spec.nodeName set to B, and the
#      controller's status.writers / newestWriterVersion; the reporter's own
#      writes go on (A's heartbeat advances, the controller's fields intact)
#  12. `kubectl set image` swapping iptables-nft 1.8.7 into a running
#      hostNetwork + NET_ADMIN pod is denied; relabelling the pod is not judged
#  13. failurePolicy Fail and no webhook replica: an ordinary pod is created,
#      a hostNetwork pod refused; every object of e2e/gate-match.yaml reaches
#      the webhook exactly when the table says (the matchConditions); a
#      gated pod's relabelling passes, its image swap is refused
#  14. `kubectl auth can-i --list` of each ServiceAccount's token equals
#      e2e/rbac-expected/<sa>.txt (NFGUARD_E2E_UPDATE_RBAC=1 rewrites them)
#  15. only the API server may call /validate: a pod POSTing a forged
#      AdmissionReview (naming kube-system and a pull secret there) to the
#      webhook's Service gets 401 before its body is read, counted as
#      no_client_certificate; the API server's own call (its client
#      certificate, AdmissionConfiguration) still judges and denies the
#      incident DaemonSet
#  17. a token bound to the controller's pod is refused, for real, by the
#      ValidatingAdmissionPolicy nfguard-controller-node-writes: a label that
#      is not nfguard's, a kubelet label removed, another taint changed or
#      removed, a NoExecute nfguard.io/ taint, spec.unschedulable, an
#      annotation; its server-side apply of an nfguard.io/ label, the label's
#      removal and a NoSchedule nfguard.io/ taint land, and the controller
#      removes that taint itself
#  18. with a NetfilterPolicy whose exemptionNamespaceSelector selects
#      namespaces labelled nfguard.io/exemptions=allowed, the incident pod
#      annotated nfguard.io/exempt is denied in an ordinary namespace (the
#      annotation ignored, and said) and admitted with its reason in a
#      labelled one
#  19. the node without iptables (NFGUARD_E2E_NFTABLES_NODE): its profile
#      says activeBackend nft, kubeProxyMode nftables, ip/kube-proxy among
#      nativeTables, kubeletMarkers notExpected, no KubeletChainsMissing,
#      Consistent=True; its kubelet logs that it skips the marker chains;
#      its reporter sees nft and no iptables binary
#  20. there, a ClusterIP Service backed by a pod on that node is reached
#      from the node and from a pod through kube-proxy's nftables rules (its
#      element and chain in table ip kube-proxy, conntrack's translation; no
#      other table, no KUBE-SERVICES)
#  21. a legacy hostNetwork + NET_ADMIN writer pinned to that node is denied
#      as [BackendMismatch] naming it
#  22. an iptables-nft 1.8.7 hostNetwork + NET_ADMIN writer that only adds a
#      chain of its own, pinned to that node, is admitted (no iptables-owned
#      rule there needs a newer reader) and writes its chain
#  23. the what-if: with that 1.8.7 writer running on that node, `nfguard
#      check --running` allows it today, and `--assume-nodes` (that node)
#      `--assume iptables=1.8.11/nft` (what installing Debian trixie's
#      iptables there would bring) predicts its denial as [OldReaderNewRules]
#      naming the node, labelled as a prediction, exit status 1
#      (NFGUARD_BIN: the CLI, default target/release/nfguard; the pod's image
#      is named by NFGUARD_E2E_REGISTRY, the registry as this machine
#      reaches it on loopback)
#  24. (local provider) the what-if checked against the change done for real:
#      with a 1.8.7 writer on the nft node with new rules and on the node
#      without iptables, the what-if's prediction for both moved to
#      iptables 1.8.11 (nft) is kept; both are moved for real
#      (`e2e/local-cluster.sh node-iptables`), and once their profiles report
#      1.8.11, `nfguard check --running` gives exactly the predicted
#      workloads, verdicts, reason codes and nodes (e2e/s24-node-change.sh)
#  25. (a registry with credentials: NFGUARD_E2E_PRIVATE_REGISTRY_PULL and
#      _AUTH_FILE, local provider) an iptables-nft 1.8.7 writer only in that
#      registry, under an `action: Taint` policy: a DaemonSet with
#      imagePullSecrets, then one whose ServiceAccount has the secret, each
#      admitted with [OldReaderNewRules] (not [ImageUnresolved]); the
#      controller reads the pods' pull secrets, taints the nft node, its
#      Tainted event names pod, reason and image; deleted, the taint goes
#      (e2e/s25-private-image-taint.sh)
#  26. (local provider) the nft skew incident for real on that node, whose
#      kube-proxy (nftables mode, on the host) runs the node's unfixed nft
#      1.0.6: the profile says the host's nft crashes on new set userdata; a
#      hostNetwork + NET_ADMIN pod bundling trixie's nft 1.1.3 is denied at
#      admission as [NftNewWriterOldReader] naming kube-proxy's nft; the
#      same pod where a policy lets nfguard.io/exempt count creates a `type`
#      set in the node's netns: the node's nft list ruleset exits 139,
#      kube-proxy's sync segfaults (its log), a Service created afterwards
#      does not answer; NftSetsCrashHostNft (critical) and Healthy=False
#      within seconds; the pod's nft deletes the set and everything recovers
#      (e2e/s26-nft-skew.sh)
#  27. monitoring, live (NFGUARD_E2E_PROMETHEUS; e2e/monitoring.sh): the
#      operator's CRDs validate monitoring/ and the chart's render; every
#      PodMonitor target is up; an invalid policy fires and resolves
#      NfguardPolicyInvalid; a denied rollout fires no alert; every dashboard
#      query returns data. Scenario 6 checks its alerts there too (the stale
#      reporter of the dark node, the degraded node, both resolved)
#  31. (local provider) the gate without the pod network: the webhook on
#      the node's network; the control plane's and the nodes' routes to the
#      pod ranges blackholed; under failurePolicy Ignore and Fail a
#      compatible CNI repair pod in kube-system is admitted and judged, the
#      incident pod denied by nfguard's verdict, an ordinary pod created, with
#      registry look-ups made during the outage; a policy change still
#      reaches the webhook (e2e/s31-gate-without-pod-network.sh)
#  32. (local provider) a power cut of the whole cluster (control plane and
#      every node killed at once, started again from disk): under
#      failurePolicy Fail, ordinary pods are admitted right away and nfguard
#      itself denies the incident pod again within minutes, with the same
#      caBundle, no manual step (e2e/s32-cluster-restart.sh)
#  33. what the webhook's and the controller's own tokens may write beyond
#      RBAC (e2e/s33-write-fences.sh): no Secret created; of the gate only
#      its caBundle; only nfguard's reports; only the controller's own
#      profile status fields; their own writes pass
#  34. (local provider) the opt-in manifests/require-image-digests: gated
#      pods and templates by tag refused by its policy, by digest judged by
#      nfguard (compatible admitted, incident denied), ordinary pods by tag
#      admitted; admitted again once it is deleted (e2e/s34-image-digests.sh)
#  35. the in-cluster egress policy: an image on the kubernetes Service's
#      cluster IP or a node's kubelet port is refused (a warning under
#      unresolvedImages: Warn), the allowed test registry read beside it
#      (e2e/s35-private-egress.sh)
#  30. policy reports (e2e/scenario-reports.sh): none without a report CRD
#      (said once), PolicyReport with only the wgpolicyk8s.io CRD, Report
#      once the openreports.io CRDs are applied (the PolicyReport removed);
#      written only when their content changes; removed with the workload
set -euo pipefail
set -E
cd "$(dirname "$0")/.."
REPO=$PWD

NS=nfguard-system
PROVIDER=${NFGUARD_E2E_PROVIDER:-}
REGISTRY=${NFGUARD_E2E_REGISTRY_PULL:-}
IMG_INCIDENT=$REGISTRY/nfguard-e2e/incident:1.8.7-nft
IMG_COMPATIBLE=$REGISTRY/nfguard-e2e/compatible:1.8.11-wrapper
IMG_LEGACY=$REGISTRY/nfguard-e2e/legacy:1.8.9-legacy
ALL_SCENARIOS="1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 25 30 33 35"
NFT_SCENARIOS="19 20 21 22 23 24 26"
NFT_NODE=${NFGUARD_E2E_NFTABLES_NODE:-}
[ -z "$NFT_NODE" ] || ALL_SCENARIOS+=" $NFT_SCENARIOS"
# Scenarios that change the cluster's own namespaces (local provider only).
LOCAL_SCENARIOS="31 32 34"
[ "$PROVIDER" != local ] || ALL_SCENARIOS+=" $LOCAL_SCENARIOS"
# shellcheck source=e2e/monitoring.sh
source "$REPO/e2e/monitoring.sh"

PASSED=0
FAILED=""
CURRENT=setup
CLEANUPS=()
DUMPS=()
WHY=""
LAST_ERR=""

# ---- output -----------------------------------------------------------------
say() { printf 'e2e: %s\n' "$*"; }
ok() { say "ok: $*"; }
skip() { say "skip: $*"; }
# Indented block (command output in the record).
show() { sed 's/^/    /'; }

fail() {
  FAILED=1
  say "FAIL: [$CURRENT] $*"
  dump
  exit 1
}

# ---- clean-up stack -------------------------------------------------------------
# defer CMD ARGS...: run when the current scenario ends (also on failure), last
# registered first.
defer() { CLEANUPS+=("$(printf '%q ' "$@")"); }
# on_dump CMD ARGS...: extra diagnostics of the current scenario.
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
    echo "## nodes"
    kubectl --request-timeout=20s get nodes -o wide
    kubectl --request-timeout=20s get nodes -o custom-columns='NAME:.metadata.name,BACKEND:.metadata.labels.nfguard\.io/iptables-backend,TAINTS:.spec.taints[*].key'
    echo "## NodeNetfilterProfiles"
    kubectl --request-timeout=20s get nodenetfilterprofiles -o yaml
    echo "## NetfilterPolicies"
    kubectl --request-timeout=20s get netfilterpolicies -o yaml
    echo "## pods"
    kubectl --request-timeout=20s get pods -A -o wide
    echo "## recent events"
    kubectl --request-timeout=20s get events -A --sort-by=.lastTimestamp | tail -n 40
    echo "## controller Lease"
    kubectl --request-timeout=20s -n "$NS" get lease nfguard-controller -o yaml
    echo "## ValidatingWebhookConfiguration nfguard"
    kubectl --request-timeout=20s get validatingwebhookconfiguration nfguard \
      -o jsonpath='failurePolicy={.webhooks[0].failurePolicy} timeoutSeconds={.webhooks[0].timeoutSeconds}{"\n"}'
    echo "caBundle: $(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}' | wc -c) bytes"
    for c in reporter controller webhook; do
      echo "## $c logs"
      kubectl --request-timeout=20s -n "$NS" logs -l "app.kubernetes.io/component=$c" \
        --all-containers --prefix --tail=40
    done
    for d in "${DUMPS[@]}"; do
      echo "## $d"
      eval "$d"
    done
  } 2>&1 | show
  set -e
}

on_err() { LAST_ERR="line $1: $2"; }
trap 'on_err "$LINENO" "$BASH_COMMAND"' ERR

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
  if [ "$rc" != 0 ]; then
    echo "$PASSED passed, 1 failed"
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- helpers ----------------------------------------------------------------------
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

# node_exec NODE CMD...: CMD in the node's network and mount namespace.
node_exec() {
  local node=$1
  shift
  case "$PROVIDER" in
    local) "$REPO/e2e/local-cluster.sh" node "$node" "$@" </dev/null ;;
    kind) docker exec "$node" "$@" </dev/null ;;
  esac
}
# node_kube_proxy NODE stop|cont: freeze or resume the node's kube-proxy.
node_kube_proxy() {
  local node=$1 sig
  case "$2" in stop) sig=STOP ;; cont) sig=CONT ;; *) return 2 ;; esac
  case "$PROVIDER" in
    local) "$REPO/e2e/local-cluster.sh" kube-proxy "$node" "$2" </dev/null ;;
    # kind runs kube-proxy as a pod; its process is visible from the node.
    kind) docker exec "$node" sh -c "pids=\$(pgrep -x kube-proxy) && kill -$sig \$pids" </dev/null ;;
  esac
}
# node_exec_in NODE CMD...: the same with this script's stdin.
node_exec_in() {
  local node=$1
  shift
  case "$PROVIDER" in
    local) "$REPO/e2e/local-cluster.sh" node "$node" "$@" ;;
    kind) docker exec -i "$node" "$@" ;;
  esac
}

# get KIND NAME JSONPATH [ARGS...]: one field, empty when absent.
get() {
  local kind=$1 name=$2 path=$3
  shift 3
  kubectl get "$kind" "$name" "$@" -o jsonpath="$path" 2>/dev/null || true
}
nnp() { get nodenetfilterprofile "$1" "$2"; }
condition() { # NODE TYPE FIELD: a profile condition's field
  nnp "$1" "{.status.conditions[?(@.type==\"$2\")].$3}"
}
node_ready() { get node "$1" '{.status.conditions[?(@.type=="Ready")].status}'; }
nfguard_taints() { # NODE: key=value:effect of nfguard's taints, one a line
  get node "$1" '{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}' | grep '^nfguard\.io/' || true
}
epoch() { date -u -d "$1" +%s 2>/dev/null || echo 0; }

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

# scenario_ns NAME: a fresh namespace (privileged pod security), deleted at the end.
scenario_ns() {
  delete_ns "$1" >/dev/null 2>&1 || true
  kubectl create namespace "$1" >/dev/null
  kubectl label namespace "$1" pod-security.kubernetes.io/enforce=privileged \
    app.kubernetes.io/part-of=nfguard-e2e >/dev/null
  defer delete_ns "$1"
  on_dump kubectl -n "$1" get all,events -o wide
}
delete_ns() {
  kubectl delete namespace "$1" --ignore-not-found --wait=true --timeout=120s >/dev/null && return 0
  kubectl -n "$1" delete pods --all --grace-period=0 --force >/dev/null 2>&1
  kubectl delete namespace "$1" --ignore-not-found --wait=true --timeout=60s >/dev/null
}

# A DaemonSet whose containers can write the node's rules (hostNetwork +
# NET_ADMIN), tolerating every taint.
# ds_yaml NAME IMAGE [LABEL=VALUE selector] [NODE kept out by node affinity]
ds_yaml() {
  local name=$1 image=$2 sel=${3:-} not=${4:-}
  cat <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: $name, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  selector: {matchLabels: {app: $name}}
  template:
    metadata: {labels: {app: $name}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      tolerations: [{operator: Exists}]
YAML
  if [ -n "$sel" ]; then
    printf '      nodeSelector: {%s: %s}\n' "${sel%%=*}" "${sel#*=}"
  fi
  if [ -n "$not" ]; then
    printf '      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: NotIn, values: [%s]}]}]}}}\n' "$not"
  fi
  cat <<YAML
      containers:
        - name: cni
          image: $image
          command: ["sleep", "infinity"]
          securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}

# ds_running NS NAME WANT: WANT pods scheduled, all Ready and up to date.
ds_running() {
  local s
  s=$(get daemonset "$2" '{.status.desiredNumberScheduled} {.status.numberReady} {.status.updatedNumberScheduled}' -n "$1")
  WHY="desired/ready/updated: ${s:-none}; want $3"
  [ "$s" = "$3 $3 $3" ]
}

# "node=pod ready" for the pods of app=NAME in NS, one a line.
pods_by_node() {
  kubectl -n "$1" get pods -l "app=$2" \
    -o jsonpath='{range .items[*]}{.spec.nodeName}={.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}'
}

# ---- cluster state ----------------------------------------------------------------
NODES=()
# Nodes with the control-plane taint (kind's control plane): the reporter
# goes there only by opt-in, so the scenarios leave them out (scenario 16
# checks that none runs there).
CP_NODES=()
declare -A EXPECT=()

# NODES and CP_NODES from the cluster.
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

# The cluster a scenario may start from: every node Ready and free of nfguard
# taints, nfguard's three components fully available, the caBundle set and
# every profile Fresh.
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

selected() {
  local n=${NFGUARD_E2E_ONLY:-$ALL_SCENARIOS}
  [[ " $n " == *" $1 "* ]]
}

run_scenario() { # N TITLE FUNCTION
  local n=$1 title=$2 fn=$3 t0=$SECONDS
  selected "$n" || return 0
  CURRENT="$n. $title"
  DUMPS=()
  say "==== $n. $title"
  wait_for 300 "a healthy cluster before scenario $n" healthy
  "$fn"
  run_cleanups || fail "the clean-up did not complete"
  wait_for 300 "a healthy cluster after scenario $n" healthy
  PASSED=$((PASSED + 1))
  ok "scenario $n passed in $((SECONDS - t0)) s"
}

# ---- 1. profiles -----------------------------------------------------------------
profile_rules() { # NODE BACKEND: the rules the profile counts in BACKEND
  local rules
  rules=$(nnp "$1" "{.status.backends.$2.rules}")
  if [ "${rules:-0}" = 0 ] && [ "$2" = nft ]; then
    # A node without iptables (kube-proxy in nftables mode): its rules are
    # all in native tables, which iptables does not own.
    rules=$(nnp "$1" '{range .status.nativeTables[*]}{.rules}{"\n"}{end}' | awk '{s += $1} END {print s + 0}')
  fi
  echo "${rules:-0}"
}

profile_complete() { # NODE
  local n=$1 uid owner backend label want rules
  uid=$(get node "$n" '{.metadata.uid}')
  [ -n "$(nnp "$n" '{.status.lastProbeTime}')" ] || { WHY="$n: no profile with lastProbeTime"; return 1; }
  [ "$(nnp "$n" '{.spec.nodeName}')" = "$n" ] || { WHY="$n: spec.nodeName is not $n"; return 1; }
  owner=$(nnp "$n" '{range .metadata.ownerReferences[?(@.kind=="Node")]}{.name}/{.uid}{"\n"}{end}')
  [ "$owner" = "$n/$uid" ] || { WHY="$n: owner Node references '$owner', want '$n/$uid'"; return 1; }
  backend=$(nnp "$n" '{.status.activeBackend}')
  case "$backend" in
    nft | legacy) ;;
    *) WHY="$n: activeBackend '${backend}' (a node running kube-proxy has rules in exactly one backend)"; return 1 ;;
  esac
  want=${EXPECT[$n]:-}
  if [ -n "$want" ] && [ "$backend" != "$want" ]; then
    WHY="$n: activeBackend $backend, NFGUARD_E2E_EXPECT_BACKENDS says $want"
    return 1
  fi
  rules=$(profile_rules "$n" "$backend")
  [ "$rules" -gt 0 ] || { WHY="$n: backends.$backend.rules (or its nativeTables' rules) is ${rules:-absent}"; return 1; }
  label=$(get node "$n" '{.metadata.labels.nfguard\.io/iptables-backend}')
  [ "$label" = "$backend" ] || { WHY="$n: label nfguard.io/iptables-backend='$label', profile says $backend"; return 1; }
  [ "$(condition "$n" Fresh status)" = True ] || { WHY="$n: condition Fresh is not True"; return 1; }
  [ "$(condition "$n" Consistent status)" = True ] || { WHY="$n: condition Consistent is not True"; return 1; }
}
all_profiles_complete() {
  local n
  for n in "${NODES[@]}"; do profile_complete "$n" || return 1; done
}

s1_profiles() {
  local n uid b
  for n in "${!EXPECT[@]}"; do
    [[ " ${NODES[*]} " == *" $n "* ]] || fail "NFGUARD_E2E_EXPECT_BACKENDS names $n, which is not a node"
  done
  wait_for 180 "a complete profile for each of ${#NODES[@]} nodes" all_profiles_complete
  for n in "${NODES[@]}"; do
    uid=$(get node "$n" '{.metadata.uid}')
    b=$(nnp "$n" '{.status.activeBackend}')
    ok "$n: NodeNetfilterProfile owned by Node $n (uid $uid), lastProbeTime $(nnp "$n" '{.status.lastProbeTime}'), activeBackend $b ($(profile_rules "$n" "$b") rules), label nfguard.io/iptables-backend=$b${EXPECT[$n]:+ (expected $b)}, Fresh and Consistent"
  done
  [ "${#EXPECT[@]}" -gt 0 ] || skip "NFGUARD_E2E_EXPECT_BACKENDS is not set: each backend was checked against its label only"
  kubectl get nodenetfilterprofiles | show
  kubectl get nodes -L nfguard.io/iptables-backend,nfguard.io/iptables-version,nfguard.io/min-reader | show
}

# ---- 2. the incident DaemonSet is denied --------------------------------------------
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

s2_incident_denied() {
  local ns=nfguard-e2e-s2 out part n mr named=0 legacy
  scenario_ns "$ns"
  incident_denied "$ns"
  out=$DENIAL
  grep -qF "nfguard denied DaemonSet/$ns/incident" <<<"$out" || fail "the denial is not nfguard's: $out"
  part=$(reason_part "$out" OldReaderNewRules)
  [ -n "$part" ] || fail "the denial has no [OldReaderNewRules] reason: $out"
  grep -qF 'iptables-nft 1.8.7 in the image cannot read native nftables expressions' <<<"$part" ||
    fail "the [OldReaderNewRules] reason does not name the image's iptables-nft 1.8.7: $part"
  for n in "${NODES[@]}"; do
    mr=$(nnp "$n" '{.status.minReaderVersion}')
    [ -n "$mr" ] || continue
    names_node "$part" "$n" || fail "node $n needs a reader >= $mr but the denial does not name it: $part"
    grep -qF "the node's live rules need a reader >= $mr" <<<"$part" ||
      fail "the denial does not give node $n's minimum reader $mr: $part"
    ok "the denial names node $n and its minimum reader $mr (native nftables expressions)"
    named=$((named + 1))
  done
  [ "$named" -ge 1 ] || fail "no node reports rules that need iptables >= 1.8.8 (status.minReaderVersion): nothing for the denial to name"
  for n in "${!EXPECT[@]}"; do
    [ "${EXPECT[$n]}" = legacy ] || continue
    legacy=$(reason_part "$out" BackendMismatch)
    names_node "$legacy" "$n" || fail "the nft image on the legacy node $n is not denied as [BackendMismatch]: $out"
    ok "the denial also names the legacy node $n: [BackendMismatch]"
  done
  if kubectl -n "$ns" get daemonset incident >/dev/null 2>&1; then
    fail "the DaemonSet incident exists after the denial"
  fi
  ok "the incident DaemonSet was denied by the API server:"
  show <<<"$out"
  audit_checked daemonsets "$ns" incident deny "$IMG_INCIDENT"
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

# ---- 3. a compatible DaemonSet runs everywhere --------------------------------------------
writer_listed() { # NODE POD: the profile's writer inventory lists POD with iptables 1.8.11
  local v
  v=$(nnp "$1" "{.status.writers[?(@.pod==\"$2\")].version}")
  WHY="$1: writer $2 has version '${v}'"
  [ "$v" = 1.8.11 ]
}

s3_compatible_runs() {
  local ns=nfguard-e2e-s3 out line node pod ready nodes=()
  # iptables-wrapper picks its backend by kubelet's marker chains: the nodes
  # with an iptables command (kubelet writes none where there is none:
  # NFT_NODE, kept out by node affinity; scenario 22 covers that node).
  for node in "${NODES[@]}"; do
    [ "$node" = "$NFT_NODE" ] || nodes+=("$node")
  done
  scenario_ns "$ns"
  out=$(ds_yaml compatible "$IMG_COMPATIBLE" "" "$NFT_NODE" | kubectl -n "$ns" apply -f - 2>&1) ||
    fail "the compatible DaemonSet was not admitted: $out"
  if grep -q 'ImageUnresolved' <<<"$out"; then
    fail "admitted only because the webhook could not resolve the image in time: $out"
  fi
  ok "the compatible DaemonSet was admitted: $out"
  audit_checked daemonsets "$ns" compatible allow "$IMG_COMPATIBLE"
  wait_for 180 "compatible pods Ready on all ${#nodes[@]} nodes with iptables" ds_running "$ns" compatible "${#nodes[@]}"
  if [ -n "$NFT_NODE" ] && grep -q "^$NFT_NODE=" <<<"$(pods_by_node "$ns" compatible)"; then
    fail "a compatible pod runs on $NFT_NODE, which the node affinity keeps out"
  fi
  for node in "${nodes[@]}"; do
    line=$(pods_by_node "$ns" compatible | grep "^$node=" || true)
    pod=${line#*=}
    pod=${pod%% *}
    ready=${line##* }
    if [ -z "$line" ] || [ "$ready" != True ]; then
      fail "no Ready compatible pod on node $node: $(pods_by_node "$ns" compatible | tr '\n' ' ')"
    fi
    wait_for 120 "$node's writer inventory to list $ns/$pod with iptables 1.8.11" writer_listed "$node" "$ns/$pod"
    ok "$node: pod $pod Ready; writer inventory: $ns/$pod iptables $(nnp "$node" "{.status.writers[?(@.pod==\"$ns/$pod\")].version}") $(nnp "$node" "{.status.writers[?(@.pod==\"$ns/$pod\")].backend}")"
  done
}

# ---- 4. a legacy-only image only where it fits ----------------------------------------------
s4_legacy_only() {
  local ns=nfguard-e2e-s4 out part n nft=() legacy=() named
  for n in "${NODES[@]}"; do
    case "$(nnp "$n" '{.status.activeBackend}')" in
      nft) nft+=("$n") ;;
      legacy) legacy+=("$n") ;;
    esac
  done
  [ "${#nft[@]}" -ge 1 ] || fail "no node's rules live in nft: the denial half needs one"
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete daemonset legacy-anywhere --ignore-not-found --wait=false

  if out=$(ds_yaml legacy-anywhere "$IMG_LEGACY" | kubectl -n "$ns" apply -f - 2>&1); then
    fail "the legacy image without a nodeSelector was admitted: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the legacy DaemonSet failed, but not by nfguard's webhook: $out"
  part=$(reason_part "$out" BackendMismatch)
  grep -qF "image writes through iptables-legacy but the node's rules live in nft" <<<"$part" ||
    fail "the denial has no [BackendMismatch] legacy-vs-nft reason: $out"
  for n in "${nft[@]}"; do
    names_node "$part" "$n" || fail "the [BackendMismatch] reason does not name the nft node $n: $part"
  done
  for n in "${legacy[@]}"; do
    if names_node "$part" "$n"; then fail "the [BackendMismatch] reason names the legacy node $n: $part"; fi
  done
  grep -qF 'nfguard.io/iptables-backend=legacy' <<<"$part" ||
    fail "the remedy does not point at nodeSelector nfguard.io/iptables-backend=legacy: $part"
  ok "without a nodeSelector the legacy image is denied, naming the nft node(s) ${nft[*]}:"
  show <<<"$out"

  out=$(ds_yaml legacy-only "$IMG_LEGACY" nfguard.io/iptables-backend=legacy | kubectl -n "$ns" apply -f - 2>&1) ||
    fail "the legacy image with nodeSelector nfguard.io/iptables-backend=legacy was denied: $out"
  if [ "${#legacy[@]}" -eq 0 ]; then
    grep -qF '[NoCandidateNodes]' <<<"$out" ||
      fail "admitted onto no node at all, but without nfguard's NoCandidateNodes warning: $out"
    wait_for 60 "the legacy-only DaemonSet to settle on 0 nodes" ds_running "$ns" legacy-only 0
    ok "with nodeSelector nfguard.io/iptables-backend=legacy it is admitted with nfguard's warning and lands nowhere: $out"
    skip "no node's rules live in legacy on $PROVIDER: the admitted DaemonSet cannot be shown running on a legacy node"
    return 0
  fi
  if grep -q 'ImageUnresolved' <<<"$out"; then
    fail "admitted only because the webhook could not resolve the image in time: $out"
  fi
  ok "with nodeSelector nfguard.io/iptables-backend=legacy it is admitted${out:+: $out}"
  wait_for 180 "legacy-only pods Ready on the ${#legacy[@]} legacy node(s)" ds_running "$ns" legacy-only "${#legacy[@]}"
  named=$(pods_by_node "$ns" legacy-only)
  for n in "${legacy[@]}"; do
    grep -q "^$n=.* True$" <<<"$named" || fail "no Ready legacy-only pod on the legacy node $n: $named"
  done
  for n in "${nft[@]}"; do
    if grep -q "^$n=" <<<"$named"; then fail "a legacy-only pod landed on the nft node $n: $named"; fi
  done
  ok "it runs on the legacy node(s) only: $(tr '\n' ' ' <<<"$named")"
}

# ---- 5. reporter restart ------------------------------------------------------------------
declare -A S5_UID=() S5_PROBE=()
s5_fresh_heartbeats() {
  local n t
  for n in "${NODES[@]}"; do
    [ "$(nnp "$n" '{.metadata.uid}')" = "${S5_UID[$n]}" ] || { WHY="$n: profile uid changed"; return 1; }
    t=$(nnp "$n" '{.status.lastProbeTime}')
    [ "$(epoch "$t")" -gt "$(epoch "${S5_PROBE[$n]}")" ] || { WHY="$n: lastProbeTime still $t"; return 1; }
  done
}

s5_reporter_restart() {
  local n pods_before pods_after
  for n in "${NODES[@]}"; do
    S5_UID[$n]=$(nnp "$n" '{.metadata.uid}')
    S5_PROBE[$n]=$(nnp "$n" '{.status.lastProbeTime}')
    [ -n "${S5_UID[$n]}" ] || fail "no profile for $n"
  done
  pods_before=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter -o jsonpath='{.items[*].metadata.uid}')
  # The heartbeat is stamped with whole seconds: make sure a new one differs.
  sleep 1
  kubectl -n "$NS" rollout restart daemonset/nfguard-reporter >/dev/null
  kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=240s >/dev/null
  pods_after=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter -o jsonpath='{.items[*].metadata.uid}')
  for n in $pods_after; do
    if [[ " $pods_before " == *" $n "* ]]; then fail "reporter pod $n survived the restart"; fi
  done
  ok "every reporter pod was replaced"
  wait_for 120 "the same profiles with fresh heartbeats" s5_fresh_heartbeats
  for n in "${NODES[@]}"; do
    ok "$n: profile uid ${S5_UID[$n]} kept; lastProbeTime ${S5_PROBE[$n]} -> $(nnp "$n" '{.status.lastProbeTime}')"
  done
}

# ---- 6. the incident for real ---------------------------------------------------------------
# Until Kubernetes 1.27 kubelet itself wrote, with the node's iptables,
#   -A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets"
#                    -m mark --mark 0x8000/0x8000 -j DROP
# jumped to from INPUT and OUTPUT. iptables-nft >= 1.8.8 writes that mark
# match as a native nftables expression, which iptables-nft 1.8.7 cannot read:
# the kube-router / Kubernetes 1.25 incident was a 1.8.7 container doing
# save | restore on such a node, which turned the rule into an unconditional
# DROP and cut the node off. The 1.34 kubelet no longer writes that rule
# (KEP-3178 removed KUBE-MARK-DROP and its DROP): its KUBE-FIREWALL holds only
# "block incoming localnet connections", which kube-proxy also writes (and
# rewrites, whole, at each of its syncs). So this scenario seeds what older
# kubelets wrote, with the node's own iptables (1.8.9, nft) -- the
# precondition of the incident -- lets a 1.8.7 container do what kube-router
# did, records what Kubernetes and nfguard report, and repairs the node by
# hand, back to the chain and jumps it had before. The node's kube-proxy is
# frozen (SIGSTOP) from the seeding until the repair: a sync of its own would
# rewrite KUBE-FIREWALL and erase the evidence before the reporter, backing
# off after the outage, could send it; nfguard must then report it.
S6_NODE=""
S6_HAD_CHAIN=0
S6_CHAIN_RULES=""
S6_JUMPS=""
S6_API=()
S6_MARK_RULE='-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -m mark --mark 0x8000/0x8000 -j DROP'
S6_BROKEN_RULE='-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -j DROP'

s6_ipt() { node_exec "$S6_NODE" iptables -w "$@"; }
s6_filter() { node_exec "$S6_NODE" iptables-save -t filter; }

# "CHAIN POSITION" of every rule jumping to KUBE-FIREWALL from INPUT/OUTPUT.
s6_jumps() {
  local c
  for c in INPUT OUTPUT; do
    s6_ipt -S "$c" | grep '^-A ' | awk -v c="$c" '$0 ~ / -j KUBE-FIREWALL( |$)/ { print c, NR }'
  done
}

# traffic_ok: the node reaches the apiserver (through the kubernetes Service
# and directly) and its own loopback (kubelet's healthz on 127.0.0.1:10248).
s6_traffic() { # -> "apiserver-service apiserver-direct loopback" as ok/dead
  local a b c
  node_exec "$S6_NODE" curl -sk --max-time 5 -o /dev/null "https://${S6_API[0]}/healthz" && a=ok || a=dead
  node_exec "$S6_NODE" curl -sk --max-time 5 -o /dev/null "https://${S6_API[1]}/healthz" && b=ok || b=dead
  node_exec "$S6_NODE" curl -s --max-time 5 -o /dev/null "http://127.0.0.1:10248/healthz" && c=ok || c=dead
  echo "$a $b $c"
}

# Put KUBE-FIREWALL and its jumps back exactly as they were before the
# scenario (idempotent; also the trap's repair on failure).
s6_restore_firewall() {
  local input c pos
  [ -n "$S6_NODE" ] || return 0
  input="*filter"$'\n'
  while read -r c pos; do
    [ -n "$c" ] && input+="-D $c -j KUBE-FIREWALL"$'\n'
  done < <(s6_jumps)
  if s6_ipt -S KUBE-FIREWALL >/dev/null 2>&1; then
    input+="-F KUBE-FIREWALL"$'\n'
    [ "$S6_HAD_CHAIN" = 1 ] || input+="-X KUBE-FIREWALL"$'\n'
  elif [ "$S6_HAD_CHAIN" = 1 ]; then
    input+="-N KUBE-FIREWALL"$'\n'
  fi
  if [ "$S6_HAD_CHAIN" = 1 ]; then
    input+="$(grep '^-A KUBE-FIREWALL' <<<"$S6_CHAIN_RULES" || true)"$'\n'
    while read -r c pos; do
      [ -n "$c" ] && input+="-I $c $pos -j KUBE-FIREWALL"$'\n'
    done <<<"$S6_JUMPS"
  fi
  input+="COMMIT"$'\n'
  node_exec_in "$S6_NODE" iptables-restore -w --noflush <<<"$input"
}

s6_rule_present() { # RULE
  local rules
  rules=$(s6_filter) || true
  grep -qxF -- "$1" <<<"$rules"
}
s6_corrupted() {
  local f
  f=$(s6_filter) || { WHY="iptables-save failed on $S6_NODE"; return 1; }
  WHY="KUBE-FIREWALL is: $(grep '^-A KUBE-FIREWALL' <<<"$f" | tr '\n' ';')"
  grep -qxF -- "$S6_BROKEN_RULE" <<<"$f" && ! grep -q -- '^-A KUBE-FIREWALL .*--mark 0x8000/0x8000' <<<"$f"
}
s6_not_ready() {
  local r
  r=$(node_ready "$S6_NODE")
  WHY="Ready=$r"
  [ "$r" != True ]
}
s6_stale() {
  local s r
  s=$(condition "$S6_NODE" Fresh status)
  r=$(condition "$S6_NODE" Fresh reason)
  WHY="Fresh=$s ($r)"
  [ "$s" = Unknown ] && [ "$r" = HeartbeatStale ]
}
# nfguard reports the corrupted chain: the hazard in the profile (on
# KUBE-FIREWALL), Healthy=False FirewallUnconditionalDrop and the taint.
s6_degraded() {
  local t h s z
  t=$(nfguard_taints "$S6_NODE")
  s=$(condition "$S6_NODE" Healthy status)
  h=$(condition "$S6_NODE" Healthy reason)
  z=$(nnp "$S6_NODE" '{range .status.hazards[?(@.code=="FirewallUnconditionalDrop")]}{.chain}{"\n"}{end}')
  WHY="hazards on chains: $(tr '\n' ' ' <<<"${z:-none}"); Healthy=$s $h; nfguard taints: ${t:-none}"
  grep -qx KUBE-FIREWALL <<<"$z" && [ "$s" = False ] && [ "$h" = FirewallUnconditionalDrop ] &&
    grep -qx 'nfguard.io/netfilter-degraded=FirewallUnconditionalDrop:NoSchedule' <<<"$t"
}
# The same, and the evidence still there: with kube-proxy frozen nothing may
# rewrite the corrupted chain while nfguard is expected to report it.
s6_reported() {
  if ! s6_corrupted; then
    fail "KUBE-FIREWALL on $S6_NODE was rewritten while its kube-proxy is frozen: $WHY"
  fi
  s6_degraded
}
s6_recovered() { # SINCE (epoch): Ready, a profile probed after SINCE, Fresh and Healthy, no nfguard taint
  local t
  [ "$(node_ready "$S6_NODE")" = True ] || { WHY="Ready=$(node_ready "$S6_NODE")"; return 1; }
  t=$(nnp "$S6_NODE" '{.status.lastProbeTime}')
  [ "$(epoch "$t")" -ge "$1" ] || { WHY="lastProbeTime $t predates the repair"; return 1; }
  [ "$(condition "$S6_NODE" Fresh status)" = True ] || { WHY="Fresh not True"; return 1; }
  [ "$(condition "$S6_NODE" Healthy status)" = True ] || { WHY="Healthy $(condition "$S6_NODE" Healthy reason)"; return 1; }
  [ -z "$(nfguard_taints "$S6_NODE")" ] || { WHY="taints: $(nfguard_taints "$S6_NODE" | tr '\n' ' ')"; return 1; }
  local keys
  keys=$(get node "$S6_NODE" '{.spec.taints[*].key}')
  [[ " $keys " != *" node.kubernetes.io/unreachable "* ]] ||
    { WHY="still tainted node.kubernetes.io/unreachable"; return 1; }
}
S6_TAINT=nfguard.io/netfilter-degraded
# The controllers' count of withheld nfguard.io/netfilter-degraded taints.
s6_withheld_total() {
  local pod v total=0
  for pod in $(kubectl -n "$NS" get pods -l app.kubernetes.io/component=controller -o jsonpath='{.items[*].metadata.name}'); do
    v=$(s8_metric "$pod" "nfguard_controller_taints_withheld_total{taint=\"$S6_TAINT\"}")
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
# Healthy=False FirewallUnconditionalDrop, no nfguard taint (the brake), and
# the withheld taint counted (above BEFORE).
s6_withheld() { # BEFORE
  local r t n
  r=$(condition "$S6_NODE" Healthy reason)
  t=$(nfguard_taints "$S6_NODE")
  [ -z "$t" ] || fail "$S6_NODE was tainted although the safety brake allows no taint: $t"
  n=$(s6_withheld_total)
  WHY="Healthy reason ${r:-none}; taints_withheld_total{taint=\"$S6_TAINT\"} $1 -> $n; nfguard taints: none"
  [ "$r" = FirewallUnconditionalDrop ] && [ "$n" -gt "$1" ]
}
s6_probe_interval() {
  local i
  i=$(nnp "$S6_NODE" '{.status.probeIntervalSeconds}')
  WHY="probeIntervalSeconds $i"
  [ "$i" = "$1" ]
}

s6_record() { # TITLE: what an operator sees
  say "what an operator sees ($1):"
  {
    echo "\$ kubectl get node $S6_NODE"
    kubectl get node "$S6_NODE"
    echo "\$ kubectl get node $S6_NODE -o jsonpath='{.spec.taints}'"
    get node "$S6_NODE" '{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}'
    echo "\$ kubectl get nnp $S6_NODE -o yaml   (status excerpt)"
    nnp "$S6_NODE" '{"lastProbeTime: "}{.status.lastProbeTime}{"\nprobeIntervalSeconds: "}{.status.probeIntervalSeconds}{"\nactiveBackend: "}{.status.activeBackend}{"\nminReaderVersion: "}{.status.minReaderVersion}{"\nhazards:\n"}{range .status.hazards[*]}{"- "}{.code}{" ("}{.severity}{"): "}{.message}{"\n"}{end}{"conditions:\n"}{range .status.conditions[*]}{"- "}{.type}{"="}{.status}{" "}{.reason}{": "}{.message}{" (since "}{.lastTransitionTime}{")\n"}{end}'
    echo "\$ kubectl get events --field-selector involvedObject.name=$S6_NODE,involvedObject.kind=Node   (Kubernetes, last 4)"
    kubectl get events -A --field-selector "involvedObject.name=$S6_NODE,involvedObject.kind=Node" \
      -o jsonpath='{range .items[?(@.source.component)]}{.lastTimestamp}{"  "}{.source.component}{" "}{.reason}{": "}{.message}{"\n"}{end}' 2>&1 |
      grep -v MissingClusterDNS | sort | tail -n 4
    echo "\$ kubectl get events.events.k8s.io --field-selector regarding.name=$S6_NODE   (nfguard-controller, last 6)"
    kubectl get events.v1.events.k8s.io -A --field-selector "regarding.name=$S6_NODE" \
      -o jsonpath='{range .items[?(@.reportingController=="nfguard-controller")]}{.eventTime}{"  "}{.regarding.kind}{" "}{.reason}{": "}{.note}{"\n"}{end}' 2>&1 | sort | tail -n 6
  } | show
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

# incident_pod NAME NODE ANNOTATIONS COMMAND: a pod with iptables-nft 1.8.7,
# hostNetwork + NET_ADMIN, on NODE (ANNOTATIONS and COMMAND in YAML flow style).
incident_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: $3
spec:
  nodeName: $2
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
  containers:
    - name: kube-router
      image: $IMG_INCIDENT
      command: $4
      securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
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

# The incident: iptables-nft 1.8.7 saving and restoring $S6_NODE's rules,
# exempt by annotation.
s6_incident_pod() { # NAME
  incident_pod "$1" "$S6_NODE" '{nfguard.io/exempt: "e2e: reproduce the incident"}' \
    '["sh", "-c", "iptables-nft-save | iptables-nft-restore; sleep infinity"]'
}

s6_incident() {
  local ns=nfguard-e2e-s6 n hb_before out traffic t0 repaired input reconnected labels withheld
  for n in "${NODES[@]}"; do
    [ "$(nnp "$n" '{.status.activeBackend}')" = nft ] || continue
    # The seed and the repair use the node's own iptables: not a node without one.
    [ -n "$(nnp "$n" '{.status.iptables.version}')" ] || continue
    if [ "${EXPECT[$n]:-}" = nft ]; then S6_NODE=$n; break; fi
    labels=$(get node "$n" '{.metadata.labels}')
    if [ -z "$S6_NODE" ] && [[ $labels != *'"node-role.kubernetes.io/control-plane"'* ]]; then
      S6_NODE=$n
    fi
  done
  [ -n "$S6_NODE" ] || fail "no worker node with an iptables command whose rules live in nft"
  say "the nft node: $S6_NODE"
  on_dump s6_filter
  S6_API=("$(get service kubernetes '{.spec.clusterIP}' -n default)"
    "$(kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes \
      -o jsonpath='{.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}')")
  if [ -z "${S6_API[0]}" ] || [ "${S6_API[1]}" = : ]; then
    fail "cannot find the apiserver's addresses: ${S6_API[*]}"
  fi

  # (b) a short heartbeat, and a policy that taints degraded nodes.
  hb_before=$(get daemonset nfguard-reporter '{.spec.template.spec.containers[0].env[?(@.name=="NFGUARD_HEARTBEAT_SECONDS")].value}' -n "$NS")
  defer s6_restore_heartbeat "$hb_before"
  kubectl -n "$NS" set env daemonset/nfguard-reporter NFGUARD_HEARTBEAT_SECONDS=10 >/dev/null
  kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=240s >/dev/null
  wait_for 60 "the reporter on $S6_NODE to announce a 10 s heartbeat" s6_probe_interval 10
  ok "reporter heartbeat 10 s (Fresh turns Unknown after 3 missed heartbeats: 30 s)"
  defer kubectl delete netfilterpolicy nfguard-e2e-taint-degraded --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-taint-degraded, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Deny
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $ns}}
  exemptionNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $ns}}
  taintDegradedNodes: true
  maxTaintedNodesPercent: 10
YAML
  ok "NetfilterPolicy nfguard-e2e-taint-degraded: taintDegradedNodes true, maxTaintedNodesPercent 10 (the safety brake: no taint below 10 nodes; lifted once it withholds one)"

  scenario_ns "$ns"

  # kube-proxy off the chain until the repair (resumed also on failure, after
  # the firewall is restored).
  defer node_kube_proxy "$S6_NODE" cont
  node_kube_proxy "$S6_NODE" stop || fail "cannot freeze kube-proxy on $S6_NODE"
  ok "kube-proxy on $S6_NODE frozen (SIGSTOP): nothing but the incident rewrites KUBE-FIREWALL"

  # (a) seed the old kubelet's firewall with the node's own iptables.
  if s6_ipt -S KUBE-FIREWALL >/dev/null 2>&1; then
    S6_HAD_CHAIN=1
    S6_CHAIN_RULES=$(s6_ipt -S KUBE-FIREWALL)
  fi
  S6_JUMPS=$(s6_jumps)
  defer s6_restore_firewall
  say "before: KUBE-FIREWALL on $S6_NODE ($(s6_ipt --version)):"
  { s6_filter | grep -E -- '(^:KUBE-FIREWALL|-j KUBE-FIREWALL|^-A KUBE-FIREWALL)' || echo "(no KUBE-FIREWALL)"; } | show
  [ "$S6_HAD_CHAIN" = 1 ] || s6_ipt -N KUBE-FIREWALL
  s6_ipt -I KUBE-FIREWALL 1 -m comment --comment "kubernetes firewall for dropping marked packets" \
    -m mark --mark 0x8000/0x8000 -j DROP
  for n in INPUT OUTPUT; do
    s6_ipt -C "$n" -j KUBE-FIREWALL 2>/dev/null || s6_ipt -I "$n" 1 -j KUBE-FIREWALL
  done
  s6_rule_present "$S6_MARK_RULE" || fail "the seeded rule is not in iptables-save: $(s6_filter | grep KUBE-FIREWALL)"
  [ "$(s6_jumps | awk '{print $1}' | sort -u | tr '\n' ' ')" = "INPUT OUTPUT " ] ||
    fail "KUBE-FIREWALL is not jumped to from both INPUT and OUTPUT: $(s6_jumps | tr '\n' ' ')"
  ok "seeded with the node's iptables: $S6_MARK_RULE (jumped to from INPUT and OUTPUT)"
  traffic=$(s6_traffic)
  [ "$traffic" = "ok ok ok" ] ||
    fail "before the incident the node's traffic must work: apiserver via ${S6_API[0]}, direct ${S6_API[1]}, loopback: $traffic"
  ok "traffic works: the node reaches the apiserver (https://${S6_API[0]}/healthz, https://${S6_API[1]}/healthz) and its loopback (kubelet healthz on 127.0.0.1:10248)"
  say "minReaderVersion of $S6_NODE: $(nnp "$S6_NODE" '{.status.minReaderVersion}'); native features: $(nnp "$S6_NODE" '{range .status.nativeFeatures[*]}{.feature}>={.minReader} {end}')"

  # (c) the incident: an exempted 1.8.7 container does save | restore (the
  # policy above lets nfguard.io/exempt count in this namespace).
  wait_for 60 "the webhook to honour nfguard.io/exempt in $ns" exempt_honoured "$ns" s6_incident_pod
  defer kubectl -n "$ns" delete pod incident --ignore-not-found --grace-period=0 --force --wait=false
  on_dump kubectl -n "$ns" logs incident --tail=20
  out=$(s6_incident_pod incident | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the exempted incident pod was not admitted: $out"
  grep -qF 'Warning: nfguard: [Exempt] exempt by annotation nfguard.io/exempt: e2e: reproduce the incident' <<<"$out" ||
    fail "the webhook admitted the exempted pod without nfguard's exemption warning: $out"
  ok "the webhook admits the exempted pod with a warning:"
  show <<<"$out"
  t0=$SECONDS

  # (d) what happens on the node.
  withheld=$(s6_withheld_total)
  wait_for 240 "the 1.8.7 save/restore to rewrite KUBE-FIREWALL on $S6_NODE" s6_corrupted
  say "after: KUBE-FIREWALL on $S6_NODE, as the host's iptables-save shows it:"
  s6_filter | grep -E -- '(-j KUBE-FIREWALL|^-A KUBE-FIREWALL)' | show
  ok "the mark match is gone: $S6_BROKEN_RULE"
  traffic=$(s6_traffic)
  [ "$traffic" = "dead dead dead" ] ||
    fail "after the incident the node's traffic should be dead (apiserver via Service, direct, loopback): $traffic"
  ok "the node's traffic is dead: apiserver (Service and direct) and loopback time out"

  # (e) what nfguard and Kubernetes report.
  wait_for 180 "Node $S6_NODE to go NotReady" s6_not_ready
  ok "Node $S6_NODE is NotReady ($(get node "$S6_NODE" '{.status.conditions[?(@.type=="Ready")].reason}')) $((SECONDS - t0)) s after the pod was created"
  wait_for 180 "the profile of $S6_NODE to turn stale" s6_stale
  ok "profile $S6_NODE: Fresh=Unknown HeartbeatStale ($((SECONDS - t0)) s): $(condition "$S6_NODE" Fresh message)"
  s6_record "the node cut off"
  # The stale reporter: its node is dark, its heartbeat stale.
  expect_alert firing NfguardTargetDown job=nfguard-reporter "node=$S6_NODE"
  expect_alert firing NfguardProfileStale "node=$S6_NODE"
  if [ -n "$(nfguard_taints "$S6_NODE")" ]; then
    ok "nfguard taint while cut off: $(nfguard_taints "$S6_NODE")"
  else
    say "note: no nfguard taint while the node is cut off: its reporter cannot write the hazard, and a stale heartbeat does not taint (Kubernetes' node.kubernetes.io/unreachable taints keep new pods away)"
  fi

  # (f) repair, in two steps: first the jumps (the node is reachable again,
  # the corrupted chain still there for nfguard to report; kube-proxy, which
  # would rewrite it at its first sync, is frozen), then the chain.
  input="*filter"$'\n'
  while read -r n p; do
    [ -n "$n" ] && input+="-D $n -j KUBE-FIREWALL"$'\n'
  done < <(s6_jumps)
  node_exec_in "$S6_NODE" iptables-restore -w --noflush <<<"${input}COMMIT"$'\n'
  reconnected=$(date -u +%s)
  traffic=$(s6_traffic)
  [ "$traffic" = "ok ok ok" ] || fail "without the jumps to KUBE-FIREWALL the node's traffic should work again: $traffic"
  ok "repair 1: the jumps from INPUT and OUTPUT deleted: traffic works again"
  # The brake, still on, withholds the taint; lifted, the taint follows.
  wait_for 180 "nfguard to report $S6_NODE degraded and the safety brake to withhold its taint" s6_withheld "$withheld"
  ok "the safety brake withholds $S6_TAINT: $WHY"
  caused_alert NfguardTaintBrakeEngaged "taint=$S6_TAINT"
  kubectl patch netfilterpolicy nfguard-e2e-taint-degraded --type=merge -p '{"spec":{"maxTaintedNodesPercent":100}}' >/dev/null
  lift_brake nfguard-e2e-taint-degraded
  ok "NetfilterPolicy nfguard-e2e-taint-degraded: maxTaintedNodesPercent 10 -> 100, the brake lifted"
  wait_for 180 "nfguard to report the corrupted KUBE-FIREWALL of $S6_NODE (hazard, Healthy=False, taint)" s6_reported
  ok "nfguard reports it $(($(date -u +%s) - reconnected)) s after the node came back: hazard FirewallUnconditionalDrop on KUBE-FIREWALL, Healthy=False FirewallUnconditionalDrop, Node tainted $(nfguard_taints "$S6_NODE")"
  s6_record "reachable again, the corrupted KUBE-FIREWALL still present"
  expect_alert firing NfguardNodeNetfilterDegraded "node=$S6_NODE"
  expect_alert firing NfguardNodeHazard code=FirewallUnconditionalDrop
  expect_alert firing NfguardNodesTainted
  # Its writes while cut off time out ("no answer within 10 s"): with the
  # test's shortened `for:` they fire NfguardReporterWriteFailures when
  # Prometheus scrapes them after the repair, but kubelet restarts the
  # reporter once its liveness probe has failed for 60 s (the node's own
  # traffic is dead too), and the new process counts from 0: so only
  # "may fire" here; scenario 27 causes a write failure for certain.
  caused_alert NfguardReporterWriteFailures "node=$S6_NODE"
  expect_alert gone NfguardTargetDown job=nfguard-reporter "node=$S6_NODE"
  expect_alert gone NfguardProfileStale "node=$S6_NODE"
  s6_restore_firewall
  if s6_rule_present "$S6_MARK_RULE"; then fail "the seeded rule is still there after the repair"; fi
  ok "repair 2: the seeded chain removed, KUBE-FIREWALL and its jumps as before the scenario:"
  { s6_filter | grep -E -- '(-j KUBE-FIREWALL|^-A KUBE-FIREWALL)' || echo "(no KUBE-FIREWALL)"; } | show
  node_kube_proxy "$S6_NODE" cont || fail "cannot resume kube-proxy on $S6_NODE"
  ok "kube-proxy on $S6_NODE resumed"
  kubectl -n "$ns" delete pod incident --grace-period=1 --wait=true --timeout=120s >/dev/null
  repaired=$(date -u +%s)
  wait_for 240 "$S6_NODE Ready, freshly profiled, Healthy, untainted" s6_recovered "$repaired"
  say "the reporter's log on $S6_NODE (warnings only, its default level) from the outage:"
  kubectl -n "$NS" logs "$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter \
    --field-selector "spec.nodeName=$S6_NODE" -o jsonpath='{.items[0].metadata.name}')" 2>&1 |
    sed 's/\x1b\[[0-9;]*m//g' | tail -n 12 | show
  expect_alert gone NfguardNodeNetfilterDegraded "node=$S6_NODE"
  expect_alert gone NfguardNodeHazard code=FirewallUnconditionalDrop
  expect_alert gone NfguardNodesTainted
  ok "Node $S6_NODE Ready, profile probed at $(nnp "$S6_NODE" '{.status.lastProbeTime}') Fresh and Healthy, nfguard's taint removed ($((SECONDS - t0)) s after the incident began; repair to recovery ${WAITED} s)"
}

s6_restore_heartbeat() { # VALUE (empty: the variable was not set)
  local rc=0
  if [ -n "$1" ]; then
    kubectl -n "$NS" set env daemonset/nfguard-reporter "NFGUARD_HEARTBEAT_SECONDS=$1" >/dev/null || rc=1
  else
    kubectl -n "$NS" set env daemonset/nfguard-reporter NFGUARD_HEARTBEAT_SECONDS- >/dev/null || rc=1
  fi
  kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=240s >/dev/null || rc=1
  return "$rc"
}

# ---- 7. RBAC and the reporter's admission policy ---------------------------------------------
# token_kubeconfig FILE TOKEN: a kubeconfig for this cluster that
# authenticates with TOKEN only (no client certificate of the admin's).
token_kubeconfig() {
  local server ca
  server=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  if [ -z "$ca" ]; then
    ca=$(base64 -w0 <"$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')")
  fi
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: token, user: {token: "$2"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: token}}]
current-context: e2e
EOF
}

# reporter_kubeconfig NODE: REPORTER is "KUBECONFIG POD": a kubeconfig (removed
# at the scenario's end) with a token bound to POD, the reporter pod on NODE,
# as that pod's own token is.
REPORTER=""
reporter_kubeconfig() {
  local pod kc
  pod=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter \
    --field-selector "spec.nodeName=$1" -o jsonpath='{.items[0].metadata.name}')
  [ -n "$pod" ] || fail "no reporter pod on $1"
  kc=$(mktemp)
  defer rm -f "$kc"
  token_kubeconfig "$kc" "$(kubectl -n "$NS" create token nfguard-reporter --bound-object-kind Pod \
    --bound-object-name "$pod" --duration=10m)"
  REPORTER="$kc $pod"
}

# as_token KUBECONFIG METHOD PATH CONTENT_TYPE BODY: one request to
# $PROFILES_API/PATH with the token of KUBECONFIG, sent as the reporter's
# code sends it (kubectl would GET first, which the reporter may not).
# Prints "HTTP <code>" and the API's message; fails on an HTTP error.
PROFILES_API=/apis/nfguard.io/v1alpha1/nodenetfilterprofiles
MERGE=application/merge-patch+json
as_token() { api_as_token "$1" "$2" "$PROFILES_API$3" "$4" "$5"; }

# api_as_token KUBECONFIG METHOD API_PATH CONTENT_TYPE BODY: as_token, for
# any path of the API server (/api/v1/nodes/NAME, ...). With API_ANSWER set
# to a file, the answer's body is written there.
api_as_token() {
  local kc=$1 method=$2 path=$3 ctype=$4 body=$5 server token ca out code msg
  server=$(kubectl --kubeconfig "$kc" config view --raw -o jsonpath='{.clusters[0].cluster.server}')
  token=$(kubectl --kubeconfig "$kc" config view --raw -o jsonpath='{.users[0].user.token}')
  ca=$(mktemp)
  kubectl --kubeconfig "$kc" config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
    base64 -d >"$ca"
  out=$(curl -sS --max-time 30 --cacert "$ca" -X "$method" -H "Authorization: Bearer $token" \
    -H "Content-Type: $ctype" --data-binary "$body" -w '\n%{http_code}' "$server$path" 2>&1) || true
  rm -f "$ca"
  code=${out##*$'\n'}
  out=${out%$'\n'*}
  [ -z "${API_ANSWER:-}" ] || printf '%s\n' "$out" >"$API_ANSWER"
  if [[ "$code" == 2?? ]]; then
    echo "HTTP $code"
    return 0
  fi
  msg=$(jq -r '.message // empty' <<<"$out" 2>/dev/null || true)
  echo "HTTP $code: ${msg:-${out:0:400}}"
  return 1
}

s7_rbac() {
  local c pod sa restarts logs a b pod_a kc who val other out applied
  for c in reporter controller webhook; do
    while read -r pod sa restarts; do
      [ -n "$pod" ] || continue
      [ "$sa" = "nfguard-$c" ] || fail "pod $pod runs as ServiceAccount '$sa', not nfguard-$c"
      logs=$(kubectl -n "$NS" logs "$pod" --all-containers 2>&1)
      if [ "${restarts:-0}" != 0 ]; then
        logs+=$'\n'$(kubectl -n "$NS" logs "$pod" --all-containers --previous 2>&1 || true)
      fi
      if grep -i 'forbidden' <<<"$logs" >/dev/null; then
        fail "pod $pod logged Forbidden errors: $(grep -i forbidden <<<"$logs" | sed -n 1,5p)"
      fi
      ok "$pod runs as ServiceAccount $sa; its log has no Forbidden"
    done < <(kubectl -n "$NS" get pods -l "app.kubernetes.io/component=$c" \
      -o jsonpath='{range .items[*]}{.metadata.name} {.spec.serviceAccountName} {.status.containerStatuses[0].restartCount}{"\n"}{end}')
    [ -n "$(kubectl -n "$NS" get pods -l "app.kubernetes.io/component=$c" -o name)" ] || fail "no $c pod"
  done

  a=${NODES[0]}
  b=${NODES[1]}
  reporter_kubeconfig "$a"
  read -r kc pod_a <<<"$REPORTER"
  who=$(kubectl --kubeconfig "$kc" auth whoami \
    -o jsonpath='{.status.userInfo.username} {.status.userInfo.extra.authentication\.kubernetes\.io/node-name[0]}')
  [ "$who" = "system:serviceaccount:$NS:nfguard-reporter $a" ] ||
    fail "the token bound to $pod_a should authenticate as nfguard-reporter on node $a, got: $who"
  ok "a token bound to reporter pod $pod_a authenticates as $who (node-name claim)"

  val=$(nnp "$b" '{.status.probeIntervalSeconds}')
  [ -n "$val" ] || fail "profile $b has no probeIntervalSeconds to patch"
  other=$((val + 1))
  if out=$(as_token "$kc" PATCH "/$b/status?dryRun=All" "$MERGE" "{\"status\":{\"probeIntervalSeconds\":$other}}"); then
    fail "node $a's reporter token may patch node $b's profile status: $out"
  fi
  s7_refused "$out" "$b" "merge patch of $b's status"
  if out=$(as_token "$kc" PATCH "/$b/status" "$MERGE" "{\"status\":{\"probeIntervalSeconds\":$val}}"); then
    fail "node $a's reporter token may patch node $b's profile status (unchanged value): $out"
  fi
  s7_refused "$out" "$b" "merge patch (unchanged value, not dry-run) of $b's status"
  applied="apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: $b}
status: {probeIntervalSeconds: $other}"
  # As the reporter itself would apply it (its field manager, taking the fields over).
  if out=$(as_token "$kc" PATCH "/$b/status?fieldManager=nfguard-reporter&force=true&dryRun=All" \
    application/apply-patch+yaml "$applied"); then
    fail "node $a's reporter token may server-side apply node $b's profile status: $out"
  fi
  s7_refused "$out" "$b" "server-side apply of $b's status"

  val=$(nnp "$a" '{.status.probeIntervalSeconds}')
  other=$((val + 1))
  out=$(as_token "$kc" PATCH "/$a/status?dryRun=All" "$MERGE" "{\"status\":{\"probeIntervalSeconds\":$other}}") ||
    fail "the reporter token of node $a may not patch its own profile's status: $out"
  ok "the same token may patch $a's own profile status (server dry-run): $out"
  out=$(as_token "$kc" PATCH "/$a/status" "$MERGE" "{\"status\":{\"probeIntervalSeconds\":$val}}") ||
    fail "the reporter token of node $a may not patch its own profile's status (unchanged value): $out"
  ok "the same token may patch $a's own profile status (unchanged value): $out"
}

s7_refused() { # OUTPUT NODE WHAT
  grep -qF "ValidatingAdmissionPolicy 'nfguard-reporter-own-node'" <<<"$1" ||
    fail "$3 was refused, but not by the ValidatingAdmissionPolicy nfguard-reporter-own-node: $1"
  grep -qF "the nfguard reporter may write only the NodeNetfilterProfile named after its own node, not $2" <<<"$1" ||
    fail "$3 was refused without the policy's message: $1"
  ok "$3 refused: $1"
}

# ---- 8. leader election ---------------------------------------------------------------------
S8_REPLICAS=""
s8_holder() { kubectl -n "$NS" get lease nfguard-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
s8_controller_pods() {
  kubectl -n "$NS" get pods -l app.kubernetes.io/component=controller \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}'
}
s8_two_ready() {
  local ready holder
  ready=$(s8_controller_pods | awk '$2 == "True" && $3 == "" { print $1 }')
  holder=$(s8_holder)
  WHY="ready: $(tr '\n' ' ' <<<"$ready"); holder: $holder"
  [ "$(grep -c . <<<"$ready")" = 2 ] && grep -qxF "$holder" <<<"$ready"
}
s8_holder_is() {
  WHY="holder: $(s8_holder)"
  [ "$(s8_holder)" = "$1" ]
}
s8_metric() { # POD NAME: a metric's value through the apiserver's pod proxy (empty if unreachable)
  # Read whole first: awk leaving early would kill kubectl with SIGPIPE (141).
  # The port named metrics: the webhook's differs from the others' (it may
  # share a node's network with the reporter).
  local text port
  port=$(get pod "$1" '{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}' -n "$NS")
  text=$(kubectl get --raw "/api/v1/namespaces/$NS/pods/$1:${port:-none}/proxy/metrics" 2>/dev/null) || true
  awk -v m="$2" '$1 == m && !done { print $2; done = 1 }' <<<"$text"
}
# Write markers in the controller's log (src/controller/{apply,run,cli}.rs).
S8_WRITES='node labels updated|nfguard taint changed|orphaned profiles deleted|reconcile failed|leading: reconciling nodes|safety brake'

s8_restore() { # NFGUARD_LOG (empty: was not set) REPLICAS
  local log=$1 replicas=$2 rc=0
  if [ -n "$log" ]; then
    kubectl -n "$NS" set env deployment/nfguard-controller "NFGUARD_LOG=$log" >/dev/null || rc=1
  else
    kubectl -n "$NS" set env deployment/nfguard-controller NFGUARD_LOG- >/dev/null || rc=1
  fi
  kubectl -n "$NS" scale deployment/nfguard-controller --replicas="$replicas" >/dev/null || rc=1
  kubectl -n "$NS" rollout status deployment/nfguard-controller --timeout=240s >/dev/null || rc=1
  return "$rc"
}

s8_leader_election() {
  local log_before leader standby holder t0 took logs head events transitions r
  S8_REPLICAS=$(get deployment nfguard-controller '{.spec.replicas}' -n "$NS")
  log_before=$(get deployment nfguard-controller '{.spec.template.spec.containers[0].env[?(@.name=="NFGUARD_LOG")].value}' -n "$NS")
  defer s8_restore "$log_before" "$S8_REPLICAS"
  # info shows taking the lease and leading; the lease module's debug line
  # "lease held by another replica" shows a replica standing by.
  kubectl -n "$NS" set env deployment/nfguard-controller 'NFGUARD_LOG=info,nfguard::controller::lease=debug' >/dev/null
  kubectl -n "$NS" scale deployment/nfguard-controller --replicas=2 >/dev/null
  kubectl -n "$NS" rollout status deployment/nfguard-controller --timeout=240s >/dev/null
  wait_for 120 "two Ready controller replicas, one holding the Lease" s8_two_ready
  say "controller replicas: $S8_REPLICAS -> 2 (log level info, lease debug)"
  leader=$(s8_holder)
  standby=$(s8_controller_pods | awk -v l="$leader" '$2 == "True" && $3 == "" && $1 != l { print $1 }')
  ok "Lease nfguard-controller held by $leader; $standby stands by"
  transitions=$(get lease nfguard-controller '{.spec.leaseTransitions}' -n "$NS")

  # The standby must not have written anything.
  sleep 5
  logs=$(s8_logs "$standby")
  grep -q 'nfguard controller starting' <<<"$logs" || fail "$standby's log lacks its start line: $logs"
  grep -q 'lease held by another replica' <<<"$logs" || fail "$standby's log does not show it standing by: $logs"
  if grep -E "$S8_WRITES|taking the lease" <<<"$logs"; then
    fail "the standby $standby led or wrote while $leader held the Lease"
  fi
  ok "$standby's log: started, 'lease held by another replica' $(grep -c 'lease held by another replica' <<<"$logs") times, no lease taken, no write"
  events=$(kubectl get events.v1.events.k8s.io -A -o jsonpath='{range .items[*]}{.reportingInstance}{"\n"}{end}' | grep -cxF "$standby" || true)
  [ "$events" = 0 ] || fail "the standby $standby published $events events"
  ok "no event reported by $standby"
  r=$(s8_metric "$standby" nfguard_controller_leader)
  if [ -n "$r" ]; then
    [ "$r" = 0 ] || fail "$standby's nfguard_controller_leader is $r while standing by"
    r=$(s8_metric "$standby" nfguard_controller_reconcile_duration_seconds_count)
    [ "${r:-0}" = 0 ] || fail "$standby reconciled $r node(s) while standing by"
    ok "$standby's metrics: nfguard_controller_leader 0, no reconcile"
  else
    skip "the controller's metrics are not reachable through the apiserver's pod proxy here"
  fi

  # An orphan for the next leader's first sweep: the profile of a node that
  # does not exist, without the ownerReference the garbage collector goes by
  # (the leader swept when its term began; its next sweep is 600 s away).
  kubectl apply -f - >/dev/null <<EOF
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata:
  name: $S8_GHOST
spec:
  nodeName: $S8_GHOST
EOF
  defer kubectl delete nodenetfilterprofile "$S8_GHOST" --ignore-not-found
  s8_ghost_gone && fail "the profile $S8_GHOST was deleted while $leader led (its next sweep is 600 s away)"
  ok "a profile of the node $S8_GHOST, which does not exist, is in place"

  # The leader goes and no replacement can race the standby for the Lease:
  # the leader's pod gets the lowest pod-deletion-cost and the Deployment is
  # scaled to 1, so its ReplicaSet deletes exactly that pod (SIGTERM, on which
  # the leader releases the Lease) and creates none; then the pod is deleted
  # at once. The standby, running all along, must be the next holder.
  kubectl -n "$NS" annotate pod "$leader" controller.kubernetes.io/pod-deletion-cost=-1000 >/dev/null
  sleep 1 # the ReplicaSet controller's informer sees the annotation before the scale
  t0=$SECONDS
  kubectl -n "$NS" scale deployment/nfguard-controller --replicas=1 >/dev/null
  wait_for 30 "the ReplicaSet to delete the leader $leader" s8_deleting "$leader"
  deleted_pod "$leader"
  kubectl -n "$NS" delete pod "$leader" --grace-period=0 --force >/dev/null 2>&1 || true
  wait_for 30 "another replica to take the Lease over from $leader" s8_holder_moved "$leader"
  took=$((SECONDS - t0))
  holder=$(s8_holder)
  [ "$holder" = "$standby" ] ||
    fail "the Lease went to $holder, not to the standby $standby (controller pods: $(s8_controller_pods | tr '\n' ';'))"
  ok "the standby $standby holds the Lease ${took} s after $leader was deleted (limit: lease 15 s + retry 2 s, allowed 30 s; leaseTransitions $transitions -> $(get lease nfguard-controller '{.spec.leaseTransitions}' -n "$NS"))"
  r=$(s8_controller_pods | awk '$3 == "" { print $1 }')
  [ "$r" = "$standby" ] || fail "live controller pods besides the standby: $(tr '\n' ' ' <<<"$r")"
  ok "no other controller pod was created: the standby won without a race"
  wait_for 30 "$holder to log that it leads" s8_logged "$holder" 'leading: reconciling nodes'
  logs=$(s8_logs "$holder")
  head=$(awk '/taking the lease/ { exit } { print }' <<<"$logs")
  grep -q 'taking the lease' <<<"$logs" || fail "$holder leads without having logged 'taking the lease': $logs"
  if grep -E "$S8_WRITES" <<<"$head"; then
    fail "$holder wrote before it took the Lease"
  fi
  ok "$holder's log: nothing written before '$(grep -m1 'taking the lease' <<<"$logs" | sed -E 's/^[^ ]+ +//')', then '$(grep -m1 'leading: reconciling nodes' <<<"$logs" | sed -E 's/^[^ ]+ +//')'"
  if grep -q 'taking the lease from=None' <<<"$logs"; then
    say "($leader released the Lease on SIGTERM, so it was taken over at the next attempt, not after expiry)"
  fi
  r=$(s8_metric "$holder" nfguard_controller_leader)
  if [ -n "$r" ]; then
    [ "$r" = 1 ] || fail "$holder leads but its nfguard_controller_leader is $r"
    ok "$holder's nfguard_controller_leader is 1"
  fi

  # The new leader's first sweep (from its caches, each candidate's Node
  # looked up by name) deletes the orphan and no profile of a real node.
  wait_for 150 "$holder's first orphan sweep to delete the profile $S8_GHOST" s8_ghost_gone
  logs=$(s8_logs "$holder")
  r=$(grep 'deleted the profile of a node that no longer exists' <<<"$logs" || true)
  grep -qF "$S8_GHOST" <<<"$r" || fail "$holder's log does not name the orphan it deleted: $r"
  [ "$(grep -c . <<<"$r")" = 1 ] || fail "$holder deleted more than the one orphan: $r"
  list_nodes
  for n in "${NODES[@]}" "${CP_NODES[@]}"; do
    [ "$(nnp "$n" '{.metadata.name}')" = "$n" ] || fail "the profile of node $n went with the sweep"
  done
  ok "$holder's first sweep deleted the profile $S8_GHOST and no other; every node's profile ($((${#NODES[@]} + ${#CP_NODES[@]}))) is in place"
}
# A node name no node has.
S8_GHOST=nfguard-e2e-ghost-node
s8_ghost_gone() { # the orphan's profile is gone (NotFound, not an API error)
  local out
  if out=$(kubectl get nodenetfilterprofile "$S8_GHOST" -o name 2>&1); then
    WHY="$out is still there"
    return 1
  fi
  WHY=$out
  grep -q NotFound <<<"$out"
}
s8_deleting() { # POD: the pod is being deleted or gone
  local pods
  pods=$(s8_controller_pods)
  WHY="controller pods: $(tr '\n' ';' <<<"$pods")"
  [ "$(awk -v p="$1" '$1 == p && $3 == "" { n++ } END { print n + 0 }' <<<"$pods")" = 0 ]
}
s8_holder_moved() { # OLD
  local h
  h=$(s8_holder)
  WHY="holder: ${h:-none}"
  [ -n "$h" ] && [ "$h" != "$1" ]
}
s8_logged() { # POD TEXT
  local logs
  logs=$(s8_logs "$1") || true
  grep -qF -- "$2" <<<"$logs"
}
# A controller's log without terminal colour codes.
s8_logs() { kubectl -n "$NS" logs "$1" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g'; }

# ---- 9. the webhook down -------------------------------------------------------------------
s9_no_endpoints() {
  local e p
  e=$(kubectl -n "$NS" get endpointslices -l kubernetes.io/service-name=nfguard-webhook \
    -o jsonpath='{range .items[*].endpoints[*]}{.addresses[0]}{" "}{end}' 2>/dev/null)
  p=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=webhook -o name 2>/dev/null)
  WHY="endpoints: ${e:-none}; pods: $(tr '\n' ' ' <<<"$p")"
  [ -z "${e// /}" ] && [ -z "$p" ]
}
pod_yaml() { # NAME IMAGE
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
  containers:
    - name: cni
      image: $2
      command: ["sleep", "infinity"]
      securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}
set_failure_policy() { # Ignore|Fail
  kubectl patch validatingwebhookconfiguration nfguard --type=json \
    -p="[{\"op\":\"replace\",\"path\":\"/webhooks/0/failurePolicy\",\"value\":\"$1\"}]" >/dev/null
}
webhook_down() { # REPLICAS: scale the webhook from REPLICAS to 0, wait for no endpoint
  # No webhook to scrape: NfguardWebhookUnavailable once its `for` passes.
  caused_alert NfguardWebhookUnavailable
  deleted_pods app.kubernetes.io/component=webhook
  kubectl -n "$NS" scale deployment/nfguard-webhook --replicas=0 >/dev/null
  wait_for 120 "no webhook pod and no endpoint" s9_no_endpoints
  ok "nfguard-webhook scaled $1 -> 0: no endpoints"
}
s9_restore() { # FAILURE_POLICY REPLICAS
  local rc=0
  set_failure_policy "$1" || rc=1
  kubectl -n "$NS" scale deployment/nfguard-webhook --replicas="$2" >/dev/null || rc=1
  kubectl -n "$NS" rollout status deployment/nfguard-webhook --timeout=240s >/dev/null || rc=1
  return "$rc"
}

s9_webhook_down() {
  local ns=nfguard-e2e-s9 policy replicas timeout ca t0 took out
  policy=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].failurePolicy}')
  timeout=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].timeoutSeconds}')
  ca=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].clientConfig.caBundle}')
  replicas=$(get deployment nfguard-webhook '{.spec.replicas}' -n "$NS")
  [ "$policy" = Ignore ] || fail "the webhook's failurePolicy is $policy, the shipped default is Ignore"
  scenario_ns "$ns"
  defer s9_restore "$policy" "$replicas"
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

  s9_restore "$policy" "$replicas"
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

# ---- 10. a Taint policy selecting namespaces by label; an invalid policy ------------------
# keep_out_of_namespace NS KEEP...: every NetfilterPolicy but KEEP... stops
# selecting NS (a `kubernetes.io/metadata.name NotIn` requirement); each
# selector is restored at the end. The strictest policy wins, so the shipped
# `action: Deny` default would otherwise deny what the scenario's Taint
# policy admits.
keep_out_of_namespace() {
  local ns=$1 p sel path expr
  shift
  expr="{\"key\":\"kubernetes.io/metadata.name\",\"operator\":\"NotIn\",\"values\":[\"$ns\"]}"
  for p in $(kubectl get netfilterpolicies -o jsonpath='{.items[*].metadata.name}'); do
    [[ " $* " != *" $p "* ]] || continue
    sel=$(get netfilterpolicy "$p" '{.spec.namespaceSelector}')
    if [ -z "$sel" ]; then
      defer kubectl patch netfilterpolicy "$p" --type=json -p='[{"op":"remove","path":"/spec/namespaceSelector"}]'
      kubectl patch netfilterpolicy "$p" --type=merge \
        -p "{\"spec\":{\"namespaceSelector\":{\"matchExpressions\":[$expr]}}}" >/dev/null
    else
      defer kubectl patch netfilterpolicy "$p" --type=json \
        -p="[{\"op\":\"replace\",\"path\":\"/spec/namespaceSelector\",\"value\":$sel}]"
      path=/spec/namespaceSelector/matchExpressions
      if [ -n "$(get netfilterpolicy "$p" '{.spec.namespaceSelector.matchExpressions}')" ]; then
        kubectl patch netfilterpolicy "$p" --type=json -p="[{\"op\":\"add\",\"path\":\"$path/-\",\"value\":$expr}]" >/dev/null
      else
        kubectl patch netfilterpolicy "$p" --type=json -p="[{\"op\":\"add\",\"path\":\"$path\",\"value\":[$expr]}]" >/dev/null
      fi
    fi
    say "NetfilterPolicy $p: does not select namespace $ns for this scenario"
  done
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

# The pod the webhook judges: hostNetwork + NET_ADMIN with iptables-nft
# 1.8.7, on node $S10_NODE only.
s10_pod() { # NAME
  pod_yaml "$1" "$IMG_INCIDENT" | sed "s/^spec:$/spec:\n  nodeName: $S10_NODE/"
}
S10_NODE=""
S10_OUT=""
s10_warned() { # NS: a server dry-run shows both warnings (the webhook's reflectors caught up)
  S10_OUT=$(s10_pod probe | kubectl -n "$1" create --dry-run=server -f - 2>&1) || {
    WHY="the dry-run was refused: $S10_OUT"
    return 1
  }
  WHY="the dry-run was admitted without both warnings: $S10_OUT"
  grep -qF '[OldReaderNewRules]' <<<"$S10_OUT" && grep -qF '[InvalidPolicyIgnored]' <<<"$S10_OUT"
}
# node_taint NODE KEY=VALUE:EFFECT YES|NO: NODE carries exactly that taint
# (NO: no taint KEY=VALUE, whatever its effect).
node_taint() {
  local t
  # Read directly: an unreadable Node must not pass for an untainted one.
  t=$(kubectl get node "$1" -o jsonpath='{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}') ||
    { WHY="cannot read node $1"; return 1; }
  WHY="$1 carries: ${t:-no taint}"
  case "$3" in
    YES) grep -qxF "$2" <<<"$t" ;;
    NO) if grep -qF "${2%:*}:" <<<"$t"; then return 1; fi ;;
  esac
}
s10_tainted() { node_taint "$S10_NODE" 'nfguard.io/iptables-incompatible=:NoSchedule' "$1"; } # YES|NO
s10_running() { # NS POD
  local phase
  phase=$(get pod "$2" '{.status.phase}' -n "$1")
  WHY="pod $2 is ${phase:-absent}"
  [ "$phase" = Running ]
}

# new_rules_node: RULES_NODE is the first nft node whose live rules need
# iptables >= 1.8.8 (status.minReaderVersion): iptables-nft 1.8.7 there is the incident.
RULES_NODE=""
new_rules_node() {
  local n
  for n in "${NODES[@]}"; do
    if [ "$(nnp "$n" '{.status.activeBackend}')" = nft ] && [ -n "$(nnp "$n" '{.status.minReaderVersion}')" ]; then
      RULES_NODE=$n
      return 0
    fi
  done
  fail "no nft node whose rules need iptables >= 1.8.8 (status.minReaderVersion)"
}

s10_namespace_selector() {
  local ns=nfguard-e2e-s10 out message
  new_rules_node
  S10_NODE=$RULES_NODE
  say "the node: $S10_NODE (minReaderVersion $(nnp "$S10_NODE" '{.status.minReaderVersion}'))"

  defer kubectl delete netfilterpolicy nfguard-e2e-team-net nfguard-e2e-broken --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-team-net, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Taint
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: {team: net}}
  maxTaintedNodesPercent: 100
---
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-broken, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Warn
  namespaceSelector: {matchLabels: {team: net}}
  exemptImages: ["a["]
YAML
  lift_brake nfguard-e2e-team-net
  keep_out_of_namespace "$ns" nfguard-e2e-team-net nfguard-e2e-broken
  on_dump kubectl get netfilterpolicies -o wide

  # The invalid policy is shown, the valid one accepted.
  wait_for 60 "nfguard-e2e-broken to be Valid=False (InvalidExemptImages)" policy_is nfguard-e2e-broken False InvalidExemptImages
  message=$(policy_condition nfguard-e2e-broken Valid message)
  grep -qF 'exemptImages[0] "a["' <<<"$message" || fail "Valid=False does not name the field and pattern: $message"
  [ "$(policy_condition nfguard-e2e-broken Accepted status)" = False ] ||
    fail "nfguard-e2e-broken is invalid but Accepted=$(policy_condition nfguard-e2e-broken Accepted status)"
  ok "nfguard-e2e-broken: Valid=False, reason InvalidExemptImages: $message"
  wait_for 60 "nfguard-e2e-team-net to be Valid=True" policy_is nfguard-e2e-team-net True
  ok "nfguard-e2e-team-net: Valid=True, Accepted=$(policy_condition nfguard-e2e-team-net Accepted status)"

  scenario_ns "$ns"
  kubectl label namespace "$ns" team=net >/dev/null
  wait_for 60 "the webhook to judge namespace $ns (team=net) with both policies" s10_warned "$ns"
  defer kubectl -n "$ns" delete pod router --ignore-not-found --grace-period=0 --force --wait=false
  out=$(s10_pod router | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the pod was denied in a team=net namespace under action: Taint: $out"
  [ -n "$(reason_part "$out" OldReaderNewRules)" ] ||
    fail "admitted without nfguard's [OldReaderNewRules] warning: $out"
  grep -qF 'NetfilterPolicy nfguard-e2e-broken: exemptImages[0] "a["' <<<"$(reason_part "$out" InvalidPolicyIgnored)" ||
    fail "the admission does not name the ignored policy and its field: $out"
  ok "admitted under action: Taint with nfguard's warnings (judged with nfguard-e2e-team-net, nfguard-e2e-broken ignored and named):"
  show <<<"$out"

  wait_for 120 "pod router to run on $S10_NODE" s10_running "$ns" router
  wait_for 120 "the controller to taint $S10_NODE nfguard.io/iptables-incompatible:NoSchedule" s10_tainted YES
  ok "$S10_NODE tainted after ${WAITED} s: $(nfguard_taints "$S10_NODE" | tr '\n' ' ')"

  kubectl label namespace "$ns" team=web --overwrite >/dev/null
  wait_for 120 "the taint on $S10_NODE to go once $ns is relabelled team=web" s10_tainted NO
  ok "namespace relabelled team=web: no policy selects it any more, taint removed after ${WAITED} s"
}

# ---- 11. node identity: a reporter token speaks for its own node only ---------------------
s11_refused() { # OUTPUT WHAT TEXT...: OUTPUT refuses WHAT and names every TEXT
  local out=$1 what=$2 t
  shift 2
  for t in "$@"; do
    grep -qF "$t" <<<"$out" || fail "$what was refused, but not with '$t': $out"
  done
  ok "$what refused: $out"
}
s11_probed_after() { # NODE EPOCH
  local t
  t=$(nnp "$1" '{.status.lastProbeTime}')
  WHY="lastProbeTime of $1 is ${t:-unset}"
  [ "$(epoch "$t")" -gt "$2" ]
}

s11_node_identity() {
  local a b pod_a kc out t0 start writers newest other interval logs
  local vap="ValidatingAdmissionPolicy 'nfguard-reporter-own-node'"
  start=$SECONDS
  a=${NODES[0]}
  b=${NODES[1]}
  reporter_kubeconfig "$a"
  read -r kc pod_a <<<"$REPORTER"
  writers=$(nnp "$a" '{.status.writers}')
  newest=$(nnp "$a" '{.status.newestWriterVersion}')
  interval=$(nnp "$a" '{.status.probeIntervalSeconds}')
  say "a token bound to reporter pod $pod_a (node $a); node B is $b; none of these writes is a dry run"

  # Node B's profile: its status, and creating it.
  if out=$(as_token "$kc" PATCH "/$b/status" "$MERGE" '{"status":{"lastProbeTime":"2001-01-01T00:00:00Z"}}'); then
    fail "node $a's reporter token wrote node $b's profile status: $out"
  fi
  s11_refused "$out" "writing node $b's status" "$vap" "named after its own node, not $b"
  if out=$(as_token "$kc" POST "" application/json \
    "{\"apiVersion\":\"nfguard.io/v1alpha1\",\"kind\":\"NodeNetfilterProfile\",\"metadata\":{\"name\":\"$b\"},\"spec\":{\"nodeName\":\"$b\"}}"); then
    fail "node $a's reporter token created node $b's profile: $out"
  fi
  s11_refused "$out" "creating a profile named $b" "$vap" "named after its own node, not $b"

  # Node A's own profile pointed at node B: RBAC (no patch on the object),
  # and the CRD for everyone (the admin too).
  defer kubectl patch nodenetfilterprofile "$a" --type=merge -p "{\"spec\":{\"nodeName\":\"$a\"}}"
  if out=$(as_token "$kc" PATCH "/$a" "$MERGE" "{\"spec\":{\"nodeName\":\"$b\"}}"); then
    fail "node $a's reporter token changed its profile's spec.nodeName to $b: $out"
  fi
  s11_refused "$out" "the reporter setting $a's spec.nodeName to $b" 'cannot patch resource "nodenetfilterprofiles"'
  if out=$(kubectl patch nodenetfilterprofile "$a" --type=merge -p "{\"spec\":{\"nodeName\":\"$b\"}}" 2>&1); then
    fail "the admin changed $a's spec.nodeName to $b: $out"
  fi
  s11_refused "$out" "the admin setting $a's spec.nodeName to $b" "spec.nodeName must equal metadata.name" \
    "spec.nodeName is immutable"
  [ "$(nnp "$a" '{.spec.nodeName}')" = "$a" ] || fail "$a's spec.nodeName is now $(nnp "$a" '{.spec.nodeName}')"

  # The controller's fields of A's own status.
  if out=$(as_token "$kc" PATCH "/$a/status" "$MERGE" \
    '{"status":{"writers":[{"pod":"kube-system/forged","container":"c","image":"forged:1.8.11"}]}}'); then
    fail "node $a's reporter token wrote status.writers: $out"
  fi
  s11_refused "$out" "the reporter writing $a's status.writers" "$vap" "may not write status.writers"
  other=1.8.11
  [ "$newest" != "$other" ] || other=1.8.10
  if out=$(as_token "$kc" PATCH "/$a/status" "$MERGE" "{\"status\":{\"newestWriterVersion\":\"$other\"}}"); then
    fail "node $a's reporter token wrote status.newestWriterVersion: $out"
  fi
  s11_refused "$out" "the reporter writing $a's status.newestWriterVersion" "$vap" "may not write status.newestWriterVersion"
  # As the reporter itself applies, taking the field over by force.
  if out=$(as_token "$kc" PATCH "/$a/status?fieldManager=nfguard-reporter&force=true" application/apply-patch+yaml \
    "{\"apiVersion\":\"nfguard.io/v1alpha1\",\"kind\":\"NodeNetfilterProfile\",\"metadata\":{\"name\":\"$a\"},\"status\":{\"newestWriterVersion\":\"$other\"}}"); then
    fail "node $a's reporter token applied status.newestWriterVersion: $out"
  fi
  s11_refused "$out" "the reporter's server-side apply of $a's status.newestWriterVersion" "$vap" \
    "may not write status.newestWriterVersion"
  [ "$(nnp "$a" '{.status.writers}')" = "$writers" ] || fail "status.writers of $a changed: $(nnp "$a" '{.status.writers}')"
  [ "$(nnp "$a" '{.status.newestWriterVersion}')" = "$newest" ] ||
    fail "status.newestWriterVersion of $a changed: $(nnp "$a" '{.status.newestWriterVersion}')"
  ok "the controller's fields of $a are as they were (writers: ${writers:-none}; newestWriterVersion: ${newest:-none})"

  # Its own writes go on: a heartbeat as the reporter sends it, with the
  # token, then the reporter pod's own.
  t0=$(date -u +%s)
  out=$(as_token "$kc" PATCH "/$a/status" "$MERGE" \
    "{\"status\":{\"lastProbeTime\":\"$(date -u -d "@$t0" +%Y-%m-%dT%H:%M:%SZ)\"}}") ||
    fail "the reporter token of $a may not send its own heartbeat: $out"
  ok "the same token sends $a's heartbeat: $out"
  wait_for $((${interval:-30} * 3 + 30)) "the reporter on $a to write a heartbeat after $t0" s11_probed_after "$a" "$t0"
  ok "the reporter pod's heartbeat advanced after ${WAITED} s: $(nnp "$a" '{.status.lastProbeTime}')"
  logs=$(kubectl -n "$NS" logs "$pod_a" --since=$((SECONDS - start + 5))s 2>&1)
  if grep -i 'forbidden' <<<"$logs" >/dev/null; then
    fail "reporter $pod_a logged Forbidden errors: $(grep -i forbidden <<<"$logs" | sed -n 1,5p)"
  fi
  ok "reporter $pod_a logged no Forbidden meanwhile"
}

# ---- 12. kubectl set image on a running pod -----------------------------------------------
s12_set_image() {
  local ns=nfguard-e2e-s12 node out part img
  new_rules_node
  node=$RULES_NODE
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete pod router --ignore-not-found --grace-period=0 --force --wait=false
  out=$(pod_yaml router "$IMG_COMPATIBLE" | sed "s/^spec:$/spec:\n  nodeName: $node/" | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the compatible hostNetwork + NET_ADMIN pod was refused on $node: $out"
  wait_for 120 "pod router to run on $node" s10_running "$ns" router
  ok "pod router (iptables 1.8.11, hostNetwork + NET_ADMIN) runs on $node"

  if out=$(kubectl -n "$ns" set image pod/router cni="$IMG_INCIDENT" 2>&1); then
    fail "kubectl set image swapped iptables-nft 1.8.7 into the running pod: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the image swap failed, but not by nfguard's webhook: $out"
  grep -qF "nfguard denied Pod/$ns/router" <<<"$out" || fail "the denial is not nfguard's: $out"
  part=$(reason_part "$out" OldReaderNewRules)
  names_node "$part" "$node" || fail "the denial does not name node $node as [OldReaderNewRules]: $out"
  img=$(get pod router '{.spec.containers[0].image}' -n "$ns")
  [ "$img" = "$IMG_COMPATIBLE" ] || fail "the pod's image is now $img"
  ok "kubectl set image pod/router cni=<iptables-nft 1.8.7> denied; the pod still runs $img:"
  show <<<"$out"
  out=$(kubectl -n "$ns" label pod router tier=net 2>&1) || fail "relabelling the pod was refused: $out"
  ok "relabelling the same pod is admitted (no image changed): $out"
}

# ---- 13. the gate without a webhook replica under failurePolicy Fail ----------------------
plain_pod_yaml() { # NAME IMAGE: no hostNetwork, no capability, not privileged
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: $2
      command: ["sleep", "infinity"]
YAML
}

s13_gate_without_webhook() {
  local ns=nfguard-e2e-s13 policy replicas out line name want got checked=0
  policy=$(get validatingwebhookconfiguration nfguard '{.webhooks[0].failurePolicy}')
  replicas=$(get deployment nfguard-webhook '{.spec.replicas}' -n "$NS")
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete pod gated ordinary --ignore-not-found --grace-period=0 --force --wait=false
  # Admitted while the webhook is up (a compatible image).
  out=$(pod_yaml gated "$IMG_COMPATIBLE" | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the compatible hostNetwork + NET_ADMIN pod was refused: $out"
  defer s9_restore "$policy" "$replicas"
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

# ---- 14. RBAC: what each ServiceAccount may do, against the committed expectation ---------
RBAC_EXPECTED=$REPO/e2e/rbac-expected
# s14_can_i SA: `kubectl auth can-i --list` of SA's own token, in the
# default namespace and in nfguard's, one normalized rule a line.
s14_can_i() {
  local kc ns out rc=0
  kc=$(mktemp)
  token_kubeconfig "$kc" "$(kubectl -n "$NS" create token "$1" --duration=10m)"
  for ns in default "$NS"; do
    out=$(kubectl --kubeconfig "$kc" auth can-i --list -n "$ns" 2>&1) || { rc=1; printf '%s\n' "$out"; break; }
    echo "== namespace $ns"
    tail -n +2 <<<"$out" | tr -s ' ' | sed 's/ *$//' | LC_ALL=C sort
  done
  rm -f "$kc"
  return "$rc"
}

s14_rbac_can_i() {
  local sa got file out
  for sa in nfguard-reporter nfguard-controller nfguard-webhook; do
    file=$RBAC_EXPECTED/$sa.txt
    got=$(s14_can_i "$sa") || fail "kubectl auth can-i --list as $sa failed: $got"
    if [ "${NFGUARD_E2E_UPDATE_RBAC:-}" = 1 ]; then
      mkdir -p "$RBAC_EXPECTED"
      printf '%s\n' "$got" >"$file"
      say "NFGUARD_E2E_UPDATE_RBAC=1: wrote $file"
      continue
    fi
    [ -f "$file" ] || fail "no $file (NFGUARD_E2E_UPDATE_RBAC=1 writes it)"
    if ! out=$(diff -u "$file" <(printf '%s\n' "$got")); then
      fail "$sa may do other things than $file says (- expected, + live):"$'\n'"$out"
    fi
    ok "$sa: kubectl auth can-i --list equals e2e/rbac-expected/$sa.txt ($(grep -vc '^==' "$file") rules)"
  done
}

# ---- 15. only the API server may call /validate --------------------------------------------
# Refusals for want of a client certificate, summed over the webhook's pods
# (the Service picks one).
s15_refused_total() {
  local pod v total=0
  for pod in $(kubectl -n "$NS" get pods -l app.kubernetes.io/component=webhook -o jsonpath='{.items[*].metadata.name}'); do
    v=$(s8_metric "$pod" 'nfguard_webhook_refused_requests_total{cause="no_client_certificate"}')
    [ -n "$v" ] || { echo "unreadable"; return 0; }
    total=$((total + ${v%.*}))
  done
  echo "$total"
}
s15_finished() { # NS POD
  local phase
  phase=$(get pod "$2" '{.status.phase}' -n "$1")
  WHY="phase ${phase:-none}"
  [ "$phase" = Succeeded ] || [ "$phase" = Failed ]
}

s15_forged_review_refused() {
  local ns=nfguard-e2e-s15 ca ip before after review out
  ca=$(get deployment nfguard-webhook '{.spec.template.spec.containers[0].env[?(@.name=="NFGUARD_CLIENT_CA_FILE")].value}' -n "$NS")
  if [ -z "$ca" ]; then
    if [ "$PROVIDER" = kind ]; then
      skip "kind's API server presents no client certificate to webhooks (e2e/run.sh installs manifests/ without the webhook-client-ca component)"
      return 0
    fi
    fail "the webhook does not require a client certificate (no NFGUARD_CLIENT_CA_FILE): e2e/local-cluster.sh installs it with one"
  fi
  ok "the webhook requires a client certificate chained to $ca ($(get deployment nfguard-webhook '{.spec.template.spec.containers[0].env[?(@.name=="NFGUARD_CLIENT_CERT_NAMES")].value}' -n "$NS"))"
  scenario_ns "$ns"
  ip=$(get service nfguard-webhook '{.spec.clusterIP}' -n "$NS")
  [ -n "$ip" ] || fail "the Service nfguard-webhook has no cluster IP"
  before=$(s15_refused_total)
  [ "$before" != unreadable ] || fail "the webhook's refused_requests_total is not readable through the pod proxy"

  # What a tenant would forge: a privileged pod of kube-system naming a pull
  # secret there, so that the webhook would read it for the look-up.
  review=$(jq -cn --arg img "$IMG_INCIDENT" '{apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
    request: {uid: "00000000-0000-0000-0000-000000000015",
      kind: {group: "", version: "v1", kind: "Pod"}, resource: {group: "", version: "v1", resource: "pods"},
      namespace: "kube-system", name: "forged", operation: "CREATE",
      userInfo: {username: "system:serviceaccount:kube-system:default"},
      object: {apiVersion: "v1", kind: "Pod", metadata: {name: "forged", namespace: "kube-system"},
        spec: {hostNetwork: true, imagePullSecrets: [{name: "kube-system-registry"}],
          containers: [{name: "c", image: $img, securityContext: {capabilities: {add: ["NET_ADMIN"]}}}]}}}}')
  # An ordinary pod on the pod network (not gated), no client certificate.
  # Its TLS client is the node's curl, run through a read-only hostPath of
  # the node's root (the node_exec contract: every node has curl): the
  # workload images' busybox wget, with its own TLS, gets alert 40
  # (handshake_failure) from any rustls server, RSA or ECDSA key (no cipher
  # suite in common). HTTP/1.1: over HTTP/2 curl reported error 92 (HTTP/2
  # framing) instead of the early 401 here, the answer given while the body
  # is still unread. It prints what the webhook answered; its deadline
  # bounds it.
  jq -n --arg img "$IMG_COMPATIBLE" --arg review "$review" --arg url "https://$ip/validate" '{
    apiVersion: "v1", kind: "Pod", metadata: {name: "forger", labels: {"app.kubernetes.io/part-of": "nfguard-e2e"}},
    spec: {restartPolicy: "Never", activeDeadlineSeconds: 60, terminationGracePeriodSeconds: 1, tolerations: [{operator: "Exists"}],
      volumes: [{name: "node", hostPath: {path: "/", type: "Directory"}}],
      containers: [{name: "forger", image: $img, env: [{name: "REVIEW", value: $review}, {name: "URL", value: $url}],
        volumeMounts: [{name: "node", mountPath: "/node", readOnly: true}],
        command: ["sh", "-c", "busybox chroot /node curl -sS -k --http1.1 -m 20 -w \"\\nHTTP %{http_code}\\n\" -H \"Content-Type: application/json\" --data-binary \"$REVIEW\" \"$URL\" 2>&1; echo \"curl exit $?\""]}]}}' |
    kubectl -n "$ns" apply -f - >/dev/null || fail "cannot create the pod forger"
  wait_for 120 "the pod forger to finish" s15_finished "$ns" forger
  out=$(kubectl -n "$ns" logs forger 2>&1) || fail "no log of the pod forger: $out"
  if grep -qF '"allowed"' <<<"$out"; then
    fail "the forged review was judged (an AdmissionReview answer came back): $out"
  fi
  grep -qxF 'HTTP 401' <<<"$out" || fail "the forged review was not refused with 401: $out"
  ok "a pod's forged AdmissionReview (kube-system, a pull secret there) to https://$ip/validate was refused:"
  show <<<"$out"
  after=$(s15_refused_total)
  if [ "$after" = unreadable ] || [ "$after" -le "$before" ]; then
    fail "nfguard_webhook_refused_requests_total{cause=\"no_client_certificate\"} did not rise ($before -> $after)"
  fi
  ok "counted: nfguard_webhook_refused_requests_total{cause=\"no_client_certificate\"} $before -> $after"

  # The API server's own call presents its certificate: the incident is
  # judged and denied (a refused call would be admitted under Ignore).
  incident_denied "$ns"
  ok "the API server's own call (its client certificate) is judged: the incident DaemonSet is denied"

  # On the node's network (the default) no NetworkPolicy can hold the
  # webhook: the client certificate is its only guard, proven above.
  out=$(get deployment nfguard-webhook '{.spec.template.spec.hostNetwork}' -n "$NS")
  [ "$out" = true ] || fail "the webhook is not on the node's network (hostNetwork: '$out'): the install's default"
  out=$(kubectl -n "$NS" get networkpolicy -o name)
  [ -z "$out" ] || fail "a NetworkPolicy is installed for pods on the node's network, where it has no effect: $out"
  ok "the webhook serves on the node's network with no NetworkPolicy (none could hold it): the client certificate is what refused the pod"
}

# ---- 17. the controller's Node writes: nfguard's own labels and taints only ----------------
NODES_API=/api/v1/nodes
S17_NODE=""
S17_VAP="ValidatingAdmissionPolicy 'nfguard-controller-node-writes'"
s17_refused() { # KUBECONFIG WHAT TEXT BODY: a merge patch of S17_NODE with BODY is refused with TEXT
  local out
  if out=$(api_as_token "$1" PATCH "$NODES_API/$S17_NODE" "$MERGE" "$4"); then
    fail "the controller's token could $2: $out"
  fi
  grep -qF "$S17_VAP" <<<"$out" || fail "$2 was refused, but not by the $S17_VAP: $out"
  grep -qF "$3" <<<"$out" || fail "$2 was refused without the policy's message '$3': $out"
  ok "$2: refused: $out"
}
# What the policy protects on S17_NODE, in one line per part.
s17_guarded() {
  kubectl get node "$S17_NODE" -o jsonpath='{.metadata.annotations}{"\n"}{.spec.unschedulable}{"\n"}{.spec.taints}{"\n"}{.spec.podCIDR}{"\n"}' &&
    kubectl get node "$S17_NODE" -o json | jq -c '.metadata.labels | with_entries(select(.key | startswith("nfguard.io/") | not))'
}
s17_probe_taint() { node_taint "$S17_NODE" 'nfguard.io/netfilter-degraded=E2EProbe:NoSchedule' "$1"; } # YES|NO
s17_cleanup() { # whatever a failed step may have left on S17_NODE
  kubectl label node "$S17_NODE" nfguard.io/e2e-probe- nfguard-e2e/foreign- >/dev/null 2>&1 || true
  kubectl annotate node "$S17_NODE" nfguard-e2e/s17- >/dev/null 2>&1 || true
  kubectl uncordon "$S17_NODE" >/dev/null 2>&1 || true
  kubectl taint node "$S17_NODE" nfguard.io/netfilter-degraded- >/dev/null 2>&1 || true
  kubectl taint node "$S17_NODE" nfguard-e2e/other- >/dev/null 2>&1 || true
}

s17_controller_node_writes() {
  local pod kc who since before after taints out logs answer
  S17_NODE=${NODES[0]}
  pod=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=controller -o jsonpath='{.items[0].metadata.name}')
  [ -n "$pod" ] || fail "no controller pod"
  kc=$(mktemp)
  defer rm -f "$kc"
  token_kubeconfig "$kc" "$(kubectl -n "$NS" create token nfguard-controller --bound-object-kind Pod \
    --bound-object-name "$pod" --duration=10m)"
  who=$(kubectl --kubeconfig "$kc" auth whoami -o jsonpath='{.status.userInfo.username}')
  [ "$who" = "system:serviceaccount:$NS:nfguard-controller" ] ||
    fail "the token bound to $pod should authenticate as nfguard-controller, got: $who"
  ok "a token bound to controller pod $pod authenticates as $who; node $S17_NODE; none of these writes is a dry run"
  since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  defer s17_cleanup
  # A taint of another component (its effect keeps pods where they are).
  kubectl taint node "$S17_NODE" nfguard-e2e/other=s17:PreferNoSchedule >/dev/null
  [ -n "$(get node "$S17_NODE" '{.metadata.labels.kubernetes\.io/hostname}')" ] ||
    fail "node $S17_NODE has no kubernetes.io/hostname label to remove"
  taints=$(kubectl get node "$S17_NODE" -o json | jq -c '.spec.taints')
  before=$(s17_guarded)

  s17_refused "$kc" "add the label nfguard-e2e/foreign" "may change only nfguard.io/ labels of Node $S17_NODE" \
    '{"metadata":{"labels":{"nfguard-e2e/foreign":"s17"}}}'
  s17_refused "$kc" "remove the kubelet's label kubernetes.io/hostname" "may change only nfguard.io/ labels of Node $S17_NODE" \
    '{"metadata":{"labels":{"kubernetes.io/hostname":null}}}'
  s17_refused "$kc" "change another component's taint (PreferNoSchedule -> NoExecute)" \
    "may change only nfguard.io/ taints of Node $S17_NODE" \
    "{\"spec\":{\"taints\":$(jq -c 'map(if .key == "nfguard-e2e/other" then .effect = "NoExecute" else . end)' <<<"$taints")}}"
  s17_refused "$kc" "remove another component's taint" "may change only nfguard.io/ taints of Node $S17_NODE" \
    "{\"spec\":{\"taints\":$(jq -c 'map(select(.key != "nfguard-e2e/other"))' <<<"$taints")}}"
  s17_refused "$kc" "set an nfguard.io/ taint with effect NoExecute" "may set only NoSchedule taints on Node $S17_NODE" \
    "{\"spec\":{\"taints\":$(jq -c '. + [{"key":"nfguard.io/netfilter-degraded","value":"E2EProbe","effect":"NoExecute"}]' <<<"$taints")}}"
  s17_refused "$kc" "mark the node unschedulable" "may not change spec fields of Node $S17_NODE other than nfguard.io/ taints" \
    '{"spec":{"unschedulable":true}}'
  s17_refused "$kc" "annotate the node" "may not change the annotations of Node $S17_NODE" \
    '{"metadata":{"annotations":{"nfguard-e2e/s17":"x"}}}'
  after=$(s17_guarded)
  [ "$after" = "$before" ] || fail "node $S17_NODE changed although every write was refused: before $before, after $after"
  ok "node $S17_NODE is as it was (labels other than nfguard.io/, annotations, spec.unschedulable, taints, podCIDR)"

  # The controller's own writes: a server-side apply of an nfguard.io/ label
  # under its field manager, its removal, and its NoSchedule taint.
  out=$(api_as_token "$kc" PATCH "$NODES_API/$S17_NODE?fieldManager=nfguard-controller" application/apply-patch+yaml \
    "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$S17_NODE\",\"labels\":{\"nfguard.io/e2e-probe\":\"s17\"}}}") ||
    fail "the controller's server-side apply of an nfguard.io/ label was refused: $out"
  [ "$(get node "$S17_NODE" '{.metadata.labels.nfguard\.io/e2e-probe}')" = s17 ] ||
    fail "the apply answered $out but the label nfguard.io/e2e-probe is not on $S17_NODE"
  ok "server-side apply (field manager nfguard-controller) of the label nfguard.io/e2e-probe=s17: $out"
  out=$(api_as_token "$kc" PATCH "$NODES_API/$S17_NODE" "$MERGE" '{"metadata":{"labels":{"nfguard.io/e2e-probe":null}}}') ||
    fail "the controller's removal of its nfguard.io/ label was refused: $out"
  [ -z "$(get node "$S17_NODE" '{.metadata.labels.nfguard\.io/e2e-probe}')" ] || fail "nfguard.io/e2e-probe is still on $S17_NODE"
  ok "its removal (merge patch): $out"
  answer=$(mktemp)
  defer rm -f "$answer"
  out=$(API_ANSWER=$answer api_as_token "$kc" PATCH "$NODES_API/$S17_NODE" "$MERGE" \
    "{\"metadata\":{\"resourceVersion\":\"$(get node "$S17_NODE" '{.metadata.resourceVersion}')\"},\"spec\":{\"taints\":$(kubectl get node "$S17_NODE" -o json | jq -c '.spec.taints + [{"key":"nfguard.io/netfilter-degraded","value":"E2EProbe","effect":"NoSchedule"}]')}}") ||
    fail "the controller's taint write was refused: $out"
  # The Node as written (the running controller may lift the taint at once).
  taints=$(jq -r '.spec.taints[] | "\(.key)=\(.value // ""):\(.effect)"' "$answer")
  grep -qxF 'nfguard.io/netfilter-degraded=E2EProbe:NoSchedule' <<<"$taints" ||
    fail "the taint write answered $out, but the Node it returned carries: $taints"
  ok "nfguard.io/netfilter-degraded=E2EProbe:NoSchedule set as the controller sets its taints (merge patch of spec.taints with a resourceVersion precondition): $out"
  # The controller itself sees a taint nothing asks for and removes it: its
  # own write goes through the policy too.
  wait_for 120 "the controller to remove the taint nothing asks for from $S17_NODE" s17_probe_taint NO
  ok "the controller removed it after ${WAITED} s: $(nfguard_taints "$S17_NODE" | tr '\n' ' ')"
  logs=$(kubectl -n "$NS" logs -l app.kubernetes.io/component=controller --since-time="$since" --tail=-1 2>&1)
  if grep -F 'nfguard-controller-node-writes' <<<"$logs" >/dev/null; then
    fail "the controller logged a refusal by its own policy: $(grep -F 'nfguard-controller-node-writes' <<<"$logs" | sed -n 1,3p)"
  fi
  ok "the controller's log since $since has no refusal by nfguard-controller-node-writes"
}

# ---- 18. nfguard.io/exempt counts only where a NetfilterPolicy allows it --------------------
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
  defer kubectl delete netfilterpolicy nfguard-e2e-exemptions --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-exemptions, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Deny
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: {app.kubernetes.io/part-of: nfguard-e2e}}
  exemptionNamespaceSelector: {matchLabels: {nfguard.io/exemptions: allowed}}
YAML
  on_dump kubectl get netfilterpolicies -o wide
  wait_for 60 "nfguard-e2e-exemptions to be Valid=True" policy_is nfguard-e2e-exemptions True
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

# ---- 16. the reporter's blast radius ------------------------------------------------------
# The reporter sees only the host directories it probes, read-only; its
# /metrics answers only a token allowed `get /metrics`, from anywhere; its
# probes' port says "ok" and nothing else; control-plane nodes get a reporter
# only by opt-in.
S16_MOUNTS="/host/bin /host/etc/alternatives /host/sbin /host/usr"
S16_CP_TAINT="node-role.kubernetes.io/control-plane"
S16_TAINTED=""

s16_pod_on() { # NODE: the reporter pod there (empty: none)
  kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter \
    --field-selector "spec.nodeName=$1" -o jsonpath='{.items[*].metadata.name}' 2>/dev/null || true
}

# s16_pid NODE: the reporter's pid as the node sees it (its argv and NODE_NAME).
s16_pid() {
  # shellcheck disable=SC2016 # expanded by the node's shell
  node_exec "$1" bash -c '
    for p in /proc/[0-9]*; do
      argv=$(tr "\0" " " <"$p/cmdline" 2>/dev/null) || continue
      case "$argv" in *" reporter --host-root "*) ;; *) continue ;; esac
      env=$(tr "\0" "\n" <"$p/environ" 2>/dev/null) || continue
      while IFS= read -r line; do
        [ "$line" != "NODE_NAME=$0" ] || { echo "${p#/proc/}"; exit 0; }
      done <<<"$env"
    done
    exit 1' "$1"
}

s16_mounts() {
  local node=${NODES[0]} pod pid info mp opts line seen="" bad="" listing rro top out stored minor
  pod=$(s16_pod_on "$node")
  [ -n "$pod" ] || fail "no reporter pod on $node"
  pid=$(s16_pid "$node") || fail "no reporter process for $node on the node"
  info=$(node_exec "$node" cat "/proc/$pid/mountinfo") || fail "cannot read /proc/$pid/mountinfo on $node"
  while read -r line; do
    # mountinfo: id parent dev root MOUNTPOINT OPTIONS ...
    read -r _ _ _ _ mp opts _ <<<"$line"
    case "$mp" in /host | /host/*) ;; *) continue ;; esac
    seen+="$mp $opts"$'\n'
    [[ ",$opts," == *,ro,* ]] || bad+="$mp ($opts) "
  done <<<"$info"
  say "mounts under /host of reporter $pod (pid $pid on $node):"
  show <<<"${seen%$'\n'}"
  [ -z "$bad" ] || fail "writable mounts under /host: $bad"
  top=$(awk 'NF {print $1}' <<<"$seen" | { grep -vE '^/host/(usr|bin|sbin|etc/alternatives)/' || true; } |
    LC_ALL=C sort | tr '\n' ' ')
  [ "$top" = "$S16_MOUNTS " ] || fail "the host mounts are '$top', not '$S16_MOUNTS' (and what lies below them)"
  ok "only $S16_MOUNTS are mounted from the host, every mount under /host read-only"
  listing=$(node_exec "$node" ls -A "/proc/$pid/root/host" | tr '\n' ' ')
  [ "$listing" = "bin etc sbin usr " ] || fail "the reporter's /host holds '$listing'"
  listing=$(node_exec "$node" ls -A "/proc/$pid/root/host/etc" | tr '\n' ' ')
  [ "$listing" = "alternatives " ] || fail "the reporter's /host/etc holds '$listing' (admin.conf, kubelet credentials?)"
  ok "the reporter's /host holds bin etc sbin usr; /host/etc only alternatives"
  # Even root on the node, through the reporter's own view, cannot write there.
  defer node_exec "$node" rm -f "/proc/$pid/root/host/usr/.nfguard-e2e-write"
  if out=$(node_exec "$node" touch "/proc/$pid/root/host/usr/.nfguard-e2e-write" 2>&1); then
    fail "a file could be created in the reporter's /host/usr"
  fi
  [[ "$out" == *"Read-only file system"* ]] || fail "writing to /host/usr failed otherwise than read-only: $out"
  ok "writing through the reporter's /host/usr: $out"
  # recursiveReadOnly is beta (served by default) from 1.31; a 1.30 API
  # server without the RecursiveReadOnlyMounts gate drops the field, and the
  # mountinfo check above is then the whole proof.
  stored=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.spec.containers[0].volumeMounts[*].recursiveReadOnly}')
  if [ -z "$stored" ]; then
    minor=$(kubectl get --raw /version | jq -r .minor)
    [ "${minor%%[!0-9]*}" -lt 31 ] ||
      fail "the API server (minor $minor) dropped recursiveReadOnly from reporter $pod's mounts"
    ok "the API server (1.$minor) does not serve recursiveReadOnly: every mount under /host is read-only (mountinfo above), none recursively by request"
  else
    rro=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{range .status.containerStatuses[0].volumeMounts[*]}{.mountPath}={.recursiveReadOnly}{" "}{end}')
    say "recursiveReadOnly as the kubelet reports it: $rro"
    for mp in $S16_MOUNTS; do
      [[ " $rro" == *" $mp=Enabled "* || " $rro" == *" $mp=Disabled "* ]] ||
        fail "the kubelet reports no recursiveReadOnly for $mp: $rro"
    done
    ok "recursiveReadOnly IfPossible resolved for every host mount (Enabled where the runtime supports it)"
  fi
  [ -n "$(nnp "$node" '{.status.iptables.version}')" ] || fail "$node's profile lost its iptables version"
  [ -n "$(nnp "$node" '{.status.activeBackend}')" ] || fail "$node's profile has no activeBackend"
  ok "$node's profile still has the host's iptables $(nnp "$node" '{.status.iptables.version}') and backend $(nnp "$node" '{.status.activeBackend}')"
}

s16_curl() { # FROM_NODE URL [CURL ARGS...]: "CODE BODY..." (CODE 000: no HTTP answer)
  local from=$1 url=$2 out
  shift 2
  out=$(node_exec "$from" curl -sk --max-time 10 -o - -w '\n%{http_code}' "$@" "$url" 2>/dev/null) || true
  printf '%s %s' "${out##*$'\n'}" "${out%$'\n'*}"
}

s16_metrics() {
  local a=${NODES[0]} b=${NODES[1]} ip pod port hport url r reader nobody
  pod=$(s16_pod_on "$a")
  ip=$(get node "$a" '{.status.addresses[?(@.type=="InternalIP")].address}')
  port=$(get pod "$pod" '{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}' -n "$NS")
  hport=$(get pod "$pod" '{.spec.containers[0].ports[?(@.name=="health")].containerPort}' -n "$NS")
  if [ -z "$ip" ] || [ -z "$port" ] || [ -z "$hport" ]; then
    fail "reporter $pod on $a: address '$ip', ports '$port' '$hport'"
  fi
  url="https://$ip:$port/metrics"
  r=$(s16_curl "$b" "$url")
  [[ "$r" == "401 unauthorized"* ]] || fail "$url from node $b without a token: '$r', not 401"
  ok "from node $b, $url without a token: ${r%%$'\n'*}"
  r=$(s16_curl "$b" "http://$ip:$port/metrics")
  [[ "$r" != 200* ]] || fail "plain HTTP on $ip:$port answered 200"
  ok "plain HTTP on $ip:$port: no metrics (code ${r%% *})"
  r=$(s16_curl "$b" "$url" -H "Authorization: Bearer not-a-token")
  [[ "$r" == "401 "* ]] || fail "a made-up token: '$r', not 401"
  ok "a made-up token: 401"

  scenario_ns e2e-s16
  kubectl -n e2e-s16 create serviceaccount nobody >/dev/null
  kubectl -n e2e-s16 create serviceaccount scraper >/dev/null
  defer kubectl delete clusterrolebinding e2e-s16-scraper --ignore-not-found
  kubectl create clusterrolebinding e2e-s16-scraper --clusterrole nfguard-metrics-reader \
    --serviceaccount e2e-s16:scraper >/dev/null
  nobody=$(kubectl -n e2e-s16 create token nobody --duration=10m)
  reader=$(kubectl -n e2e-s16 create token scraper --duration=10m)
  r=$(s16_curl "$b" "$url" -H "Authorization: Bearer $nobody")
  [[ "$r" == "403 forbidden"* ]] || fail "a ServiceAccount without nfguard-metrics-reader: '$r', not 403"
  ok "a ServiceAccount without nfguard-metrics-reader: 403"
  r=$(s16_curl "$b" "$url" -H "Authorization: Bearer $reader")
  [[ "$r" == 200* && "$r" == *"nfguard_reporter_status_writes_total"* ]] ||
    fail "the scraper bound to nfguard-metrics-reader: '${r:0:300}'"
  ok "a ServiceAccount bound to nfguard-metrics-reader scrapes from node $b: $(grep '^nfguard_reporter_status_writes_total' <<<"$r" || true)"

  r=$(s16_curl "$b" "http://$ip:$hport/healthz")
  [ "$r" = "200 ok" ] || fail "the health port's /healthz: '$r'"
  r=$(s16_curl "$b" "http://$ip:$hport/readyz")
  [ "$r" = "200 ok" ] || fail "the health port's /readyz: '$r'"
  r=$(s16_curl "$b" "http://$ip:$hport/metrics")
  [[ "$r" == 404* ]] || fail "the health port serves /metrics: '${r:0:200}'"
  ok "the health port $hport answers /healthz and /readyz with 'ok' only, no /metrics"
}

s16_no_pod_on() { # NODE
  [ -z "$(s16_pod_on "$1")" ] || { WHY="reporter $(s16_pod_on "$1") on $1"; return 1; }
}
s16_ready_on() { # NODE
  local pod
  pod=$(s16_pod_on "$1")
  if [ -z "$pod" ] || [ "$(get pod "$pod" '{.status.containerStatuses[0].ready}' -n "$NS")" != true ]; then
    WHY="reporter on $1: '${pod}' not ready"
    return 1
  fi
}
s16_desired() { get daemonset nfguard-reporter '{.status.desiredNumberScheduled}' -n "$NS"; }
s16_desired_is() { # N
  [ "$(s16_desired)" = "$1" ] || { WHY="desired $(s16_desired)"; return 1; }
}

s16_untaint() {
  [ -n "$S16_TAINTED" ] || return 0
  kubectl taint nodes "$S16_TAINTED" "$S16_CP_TAINT:NoSchedule-" >/dev/null 2>&1 || true
  S16_TAINTED=""
}

s16_control_plane() {
  local b=${NODES[1]} want=${#NODES[@]} pod i n
  for n in "${CP_NODES[@]}"; do
    s16_no_pod_on "$n" || fail "control-plane node $n runs a reporter without the opt-in: $WHY"
    ok "control-plane node $n (tainted by the cluster): no reporter"
  done
  [ -z "$(get node "$b" "{.spec.taints[?(@.key==\"$S16_CP_TAINT\")].effect}")" ] ||
    fail "$b already carries $S16_CP_TAINT"
  kubectl taint nodes "$b" "$S16_CP_TAINT=:NoSchedule" >/dev/null
  S16_TAINTED=$b
  defer s16_untaint
  # The opt-in, as the chart's reporter.controlPlaneNodes renders it.
  defer s16_opt_out
  pod=$(s16_pod_on "$b")
  # NoSchedule does not evict a running pod: the DaemonSet no longer places one.
  deleted_pod "$pod"
  kubectl -n "$NS" delete pod "$pod" --wait=true >/dev/null
  wait_for 60 "the reporter DaemonSet to want $((want - 1)) pods" s16_desired_is "$((want - 1))"
  for i in 1 2 3 4 5; do
    s16_no_pod_on "$b" || fail "a reporter came back on control-plane-tainted $b: $WHY"
    sleep 2
  done
  ok "$b tainted $S16_CP_TAINT:NoSchedule: its reporter went and none came back (desired $(s16_desired) of $want nodes)"
  kubectl -n "$NS" patch daemonset nfguard-reporter --type=json -p "[{\"op\":\"add\",\"path\":\"/spec/template/spec/tolerations/-\",\"value\":{\"key\":\"$S16_CP_TAINT\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}}]" >/dev/null
  wait_for 120 "a ready reporter on $b after the opt-in" s16_ready_on "$b"
  ok "opted in (a toleration for $S16_CP_TAINT): $b has reporter $(s16_pod_on "$b") again"
  s16_untaint
  s16_opt_out
  kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=240s >/dev/null
  ok "taint and opt-in undone; the reporter DaemonSet rolled back"
}

s16_opt_out() { # removes the control-plane toleration again (if there)
  local list i=0 t
  list=$(get daemonset nfguard-reporter '{range .spec.template.spec.tolerations[*]}{.key}{"\n"}{end}' -n "$NS")
  while IFS= read -r t; do
    if [ "$t" = "$S16_CP_TAINT" ]; then
      kubectl -n "$NS" patch daemonset nfguard-reporter --type=json \
        -p "[{\"op\":\"remove\",\"path\":\"/spec/template/spec/tolerations/$i\"}]" >/dev/null
      return 0
    fi
    i=$((i + 1))
  done <<<"$list"
}

s16_reporter_blast_radius() {
  s16_mounts
  s16_metrics
  s16_control_plane
}

# ---- 19-22. the node without iptables, kube-proxy in nftables mode ---------------------------
# NFT_NODE (NFGUARD_E2E_NFTABLES_NODE; local: e2e-nftables) has no iptables
# command at all and runs kube-proxy in nftables mode: its Service rules
# live only in the native tables ip/ip6 kube-proxy, which iptables never
# lists. Each scenario first checks that premise (nftables_node).

# kubelet_log NODE: the node's kubelet log, whole.
kubelet_log() {
  case "$PROVIDER" in
    local) cat "${NFGUARD_E2E_LOG_DIR:?the local cluster exports NFGUARD_E2E_LOG_DIR}/kubelet-$1.log" ;;
    kind) docker exec "$1" journalctl -u kubelet --no-pager </dev/null ;;
  esac
}

# The premise: NFT_NODE is a worker node without any iptables command, and
# its kube-proxy table exists.
nftables_node() {
  local found tables
  [[ " ${NODES[*]} " == *" $NFT_NODE "* ]] ||
    fail "NFGUARD_E2E_NFTABLES_NODE=$NFT_NODE is not a worker node (${NODES[*]})"
  # shellcheck disable=SC2016 # expanded by the node's shell
  found=$(node_exec "$NFT_NODE" sh -c 'for c in iptables ip6tables iptables-nft iptables-legacy \
    iptables-save iptables-restore xtables-nft-multi xtables-legacy-multi; do command -v "$c"; done; true')
  [ -z "$found" ] || fail "$NFT_NODE has iptables commands: $(tr '\n' ' ' <<<"$found")"
  tables=$(node_exec "$NFT_NODE" nft list tables) || fail "nft list tables failed on $NFT_NODE"
  grep -qxF 'table ip kube-proxy' <<<"$tables" ||
    fail "$NFT_NODE has no table ip kube-proxy (is kube-proxy in nftables mode?): $(tr '\n' ' ' <<<"$tables")"
}

# ---- 19. the profile of a node without iptables ------------------------------------------
S19_PROFILE=""
s19_profile_native() { # NFT_NODE's profile says nft, nftables, notExpected (WHY otherwise)
  local j v
  j=$(kubectl get nodenetfilterprofile "$NFT_NODE" -o json 2>/dev/null) || { WHY="no profile"; return 1; }
  S19_PROFILE=$j
  v=$(jq -r '.status.activeBackend // "absent"' <<<"$j")
  [ "$v" = nft ] || { WHY="activeBackend $v"; return 1; }
  v=$(jq -r '.status.kubeProxyMode // "absent"' <<<"$j")
  [ "$v" = nftables ] || { WHY="kubeProxyMode $v"; return 1; }
  v=$(jq -r '[.status.nativeTables[]? | select(.family == "ip" and .name == "kube-proxy") | .chains] | first // 0' <<<"$j")
  [ "$v" -gt 0 ] ||
    { WHY="nativeTables has no ip/kube-proxy with chains: $(jq -c '.status.nativeTables' <<<"$j")"; return 1; }
  v=$(jq -r '.status.kubeletMarkers.state // "absent"' <<<"$j")
  [ "$v" = notExpected ] || { WHY="kubeletMarkers.state $v"; return 1; }
  v=$(jq -r '[.status.hazards[]?.code] | join(" ")' <<<"$j")
  [[ " $v " != *" KubeletChainsMissing "* ]] || { WHY="hazards: $v"; return 1; }
  v=$(jq -r '.status.conditions[]? | select(.type == "Consistent") | "\(.status) \(.reason)"' <<<"$j")
  [ "${v%% *}" = True ] || { WHY="Consistent ${v:-absent}"; return 1; }
}

s19_nftables_profile() {
  local log pid listing kminor skipped
  nftables_node
  wait_for 150 "$NFT_NODE's profile: activeBackend nft, kubeProxyMode nftables, ip/kube-proxy in nativeTables, kubeletMarkers notExpected, no KubeletChainsMissing, Consistent=True" s19_profile_native
  ok "$NFT_NODE: activeBackend nft, kubeProxyMode nftables, kubeletMarkers $(jq -c '.status.kubeletMarkers' <<<"$S19_PROFILE"), hazards [$(jq -r '[.status.hazards[]?.code] | join(", ")' <<<"$S19_PROFILE")], Consistent=True ($(jq -r '.status.conditions[] | select(.type == "Consistent") | .reason' <<<"$S19_PROFILE"))"
  jq -r '.status.nativeTables[] | "\(.family)/\(.name): \(.chains) chains, \(.rules) rules, \(.sets) sets"' <<<"$S19_PROFILE" | show
  # kubelet's own account (pkg/kubelet/kubelet_network_linux.go): no
  # iptables command for either family, so no marker chains. 1.34 says so
  # (kubernetes#129826); 1.30 tries, fails and says that instead.
  log=$(kubelet_log "$NFT_NODE") || fail "cannot read $NFT_NODE's kubelet log"
  kminor=$(kubectl get node "$NFT_NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion}')
  kminor=${kminor#v1.}
  kminor=${kminor%%.*}
  skipped='"No iptables support on this system; not creating the KUBE-IPTABLES-HINT chain"'
  [ "$kminor" -ge 34 ] || skipped='"Failed to initialize iptables rules; some functionality may be missing."'
  grep -qF "$skipped" <<<"$log" ||
    fail "$NFT_NODE's kubelet (1.$kminor) did not log $skipped"
  if grep -qF 'Initialized iptables rules' <<<"$log"; then
    fail "$NFT_NODE's kubelet initialized iptables rules: $(grep -F 'Initialized iptables rules' <<<"$log")"
  fi
  ok "$NFT_NODE's kubelet (1.$kminor) log: $(grep -F "${skipped//\"/}" <<<"$log" | sed -n 1p)"
  # The reporter reads the node's binaries through its /host mounts: it
  # must see the same host (nft, no iptables).
  pid=$(s16_pid "$NFT_NODE") || fail "no reporter process found on $NFT_NODE"
  listing=$(node_exec "$NFT_NODE" ls -A "/proc/$pid/root/host/usr/sbin") || fail "cannot list the reporter's /host/usr/sbin"
  if grep -E '^(ip6?|arp|eb)tables|^xtables-' <<<"$listing"; then
    fail "the reporter on $NFT_NODE sees iptables binaries under /host/usr/sbin"
  fi
  grep -qx nft <<<"$listing" || fail "the reporter on $NFT_NODE does not see nft under /host/usr/sbin"
  ok "the reporter (pid $pid on $NFT_NODE) sees /host/usr/sbin/nft and no iptables, ip6tables, arptables, ebtables or xtables binary"
}

# ---- 20. Service traffic through kube-proxy's nftables rules -----------------------------
S20_BODY="nfguard-e2e-s20: served on the node without iptables"
s20_pod() { # NAME COMMAND (YAML flow): an ordinary pod on NFT_NODE
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: $1, app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  nodeName: $NFT_NODE
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: $IMG_COMPATIBLE
      command: $2
YAML
}
S20_CHAIN=""
s20_programmed() { # IP PODIP: the ClusterIP's element and the endpoint chain are in ip kube-proxy
  local table
  table=$(node_exec "$NFT_NODE" nft list table ip kube-proxy) || { WHY="nft list table ip kube-proxy failed"; return 1; }
  S20_CHAIN=$(grep -oE "${1//./\\.} \. tcp \. 80 : goto service-[A-Z0-9]+-$S20_NS/web/tcp/http" <<<"$table" | sed 's/.* goto //') || true
  WHY="no element '$1 . tcp . 80 : goto service-...-$S20_NS/web/tcp/http' in map service-ips"
  [ -n "$S20_CHAIN" ] || return 1
  WHY="no endpoint chain dnat to $2:8080"
  grep -qF "dnat to $2:8080" <<<"$table"
}

S20_NS=nfguard-e2e-s20
s20_service_nftables() {
  local ns=$S20_NS ip podip out tables ruleset ct chain
  nftables_node
  scenario_ns "$ns"
  s20_pod web "[\"sh\", \"-c\", \"mkdir -p /tmp/www && echo '$S20_BODY' >/tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www\"]" |
    kubectl -n "$ns" apply -f - >/dev/null
  s20_pod client '["sleep", "infinity"]' | kubectl -n "$ns" apply -f - >/dev/null
  kubectl -n "$ns" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
YAML
  kubectl -n "$ns" wait --for=condition=Ready pod/web pod/client --timeout=120s >/dev/null ||
    fail "the pods web and client are not Ready on $NFT_NODE"
  ip=$(get service web '{.spec.clusterIP}' -n "$ns")
  podip=$(get pod web '{.status.podIP}' -n "$ns")
  if [ -z "$ip" ] || [ -z "$podip" ]; then fail "Service web has ClusterIP '$ip', pod web IP '$podip'"; fi
  wait_for 60 "kube-proxy on $NFT_NODE to program $ip:80 -> $podip:8080 in table ip kube-proxy" s20_programmed "$ip" "$podip"
  chain=$S20_CHAIN
  ok "table ip kube-proxy on $NFT_NODE: map service-ips has '$ip . tcp . 80 : goto $chain', an endpoint chain does dnat to $podip:8080"
  node_exec "$NFT_NODE" nft list chain ip kube-proxy "$chain" | show

  # No other rule set on the node: only kube-proxy's native tables exist,
  # no iptables-owned table of either backend, no KUBE-SERVICES anywhere.
  tables=$(node_exec "$NFT_NODE" nft list tables)
  [ "$tables" = $'table ip kube-proxy\ntable ip6 kube-proxy' ] ||
    fail "$NFT_NODE holds nftables tables besides kube-proxy's: $(tr '\n' ' ' <<<"$tables")"
  ruleset=$(node_exec "$NFT_NODE" nft list ruleset)
  if grep -q 'KUBE-SERVICES' <<<"$ruleset"; then fail "$NFT_NODE has a KUBE-SERVICES chain"; fi
  out=$(node_exec "$NFT_NODE" cat /proc/net/ip_tables_names 2>/dev/null || true)
  [ -z "$out" ] || fail "$NFT_NODE's network namespace has legacy xtables tables: $out"
  ok "$NFT_NODE's only tables are ip/ip6 kube-proxy (no iptables-nft table, no legacy table, no KUBE-SERVICES chain, no iptables command)"

  out=$(node_exec "$NFT_NODE" curl -sS --max-time 10 "http://$ip/") || fail "the node could not reach http://$ip/: $out"
  [ "$out" = "$S20_BODY" ] || fail "the node got '$out' from http://$ip/"
  ok "from $NFT_NODE's network namespace: http://$ip/ answers '$out'"
  # busybox nc: the image's busybox wget crashes (SIGSEGV) on any URL.
  out=$(kubectl -n "$ns" exec client -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 10 $ip 80" 2>&1) ||
    fail "pod client could not reach $ip:80: $out"
  out=${out//$'\r'/}
  if [[ "$(sed -n 1p <<<"$out")" != "HTTP/1."?" 200 OK" ]] || ! grep -qxF "$S20_BODY" <<<"$out"; then
    fail "pod client got from http://$ip/: $out"
  fi
  ok "from pod client ($(get pod client '{.status.podIP}' -n "$ns")) on $NFT_NODE: http://$ip/ answers $(sed -n 1p <<<"$out"), '$S20_BODY'"
  # The connections were translated to the pod: the node's conntrack entries
  # for the ClusterIP reply from the pod's address (only kube-proxy's table
  # has a dnat rule on this node).
  ct=$(node_exec "$NFT_NODE" conntrack -L -p tcp --orig-dst "$ip" 2>/dev/null) || true
  grep -qE "dst=$ip sport=[0-9]+ dport=80 .*src=$podip " <<<"$ct" ||
    fail "no conntrack entry of $NFT_NODE translates $ip:80 to $podip: $ct"
  ok "conntrack on $NFT_NODE: $ip:80 translated to $podip:8080 ($(grep -cE "dst=$ip .*src=$podip " <<<"$ct") connection(s))"
}

# ---- 21. a legacy hostNetwork writer on the node without iptables ------------------------
s21_legacy_denied() {
  local ns=nfguard-e2e-s21 out part
  nftables_node
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete pod legacy-writer --ignore-not-found --grace-period=0 --force --wait=false
  if out=$(pod_yaml legacy-writer "$IMG_LEGACY" | sed "s/^spec:$/spec:\n  nodeName: $NFT_NODE/" |
    kubectl -n "$ns" create -f - 2>&1); then
    fail "the legacy hostNetwork + NET_ADMIN pod was admitted on $NFT_NODE: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the legacy pod failed, but not by nfguard's webhook: $out"
  part=$(reason_part "$out" BackendMismatch)
  [ -n "$part" ] || fail "the denial has no [BackendMismatch] reason: $out"
  names_node "$part" "$NFT_NODE" || fail "the [BackendMismatch] reason does not name $NFT_NODE: $part"
  grep -qF "image writes through iptables-legacy but the node's rules live in nft" <<<"$part" ||
    fail "the [BackendMismatch] reason does not say legacy image against nft rules: $part"
  if kubectl -n "$ns" get pod legacy-writer >/dev/null 2>&1; then fail "the pod legacy-writer exists after the denial"; fi
  ok "the legacy writer pinned to $NFT_NODE (whose rules live only in kube-proxy's native tables) is denied:"
  show <<<"$out"
}

# ---- 22. an iptables-nft 1.8.7 writer of its own rules on the node without iptables -----
# Expected verdict: allowed. The minimum reader is computed over
# iptables-owned rules only, and the node has none: kube-proxy's rules are
# in its native table ip kube-proxy, which iptables-nft never lists (its
# save and restore read and write only the tables filter, nat, mangle, raw
# and security), so a 1.8.7 reader cannot mangle them; and the image's
# backend (nft) is the node's. The pod adds a chain of its own, jumped to
# from nowhere, and nothing else.
S22_CHAIN=NFGUARD-E2E-OWN
s22_written() {
  local t
  t=$(node_exec "$NFT_NODE" nft list table ip filter 2>&1) || { WHY="no table ip filter: $t"; return 1; }
  WHY="table ip filter: $(tr '\n' ' ' <<<"$t")"
  grep -qF "chain $S22_CHAIN {" <<<"$t" && grep -qE 'ip saddr 127\.0\.0\.2 .*return' <<<"$t"
}
s22_drop_table() { # the table the pod's iptables-nft made (the node had none)
  node_exec "$NFT_NODE" nft delete table ip filter 2>/dev/null || true
}

s22_own_rules_allowed() {
  local ns=nfguard-e2e-s22 out tables code
  nftables_node
  tables=$(node_exec "$NFT_NODE" nft list tables)
  if grep -qxF 'table ip filter' <<<"$tables"; then
    fail "$NFT_NODE already has table ip filter: the scenario could not remove what it adds"
  fi
  scenario_ns "$ns"
  defer s22_drop_table
  defer kubectl -n "$ns" delete pod own-rules --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
  out=$(incident_pod own-rules "$NFT_NODE" '{}' \
    "[\"sh\", \"-c\", \"iptables-nft -N $S22_CHAIN && iptables-nft -A $S22_CHAIN -s 127.0.0.2/32 -j RETURN && echo written; sleep infinity\"]" |
    kubectl -n "$ns" create -f - 2>&1) ||
    fail "the iptables-nft 1.8.7 writer of its own rules was denied on $NFT_NODE: $out"
  for code in OldReaderNewRules BackendMismatch; do
    if grep -qF "[$code]" <<<"$out"; then fail "admitted, but with a [$code] warning: $out"; fi
  done
  ok "the iptables-nft 1.8.7 hostNetwork + NET_ADMIN pod pinned to $NFT_NODE is admitted: $out"
  audit_checked pods "$ns" own-rules allow "$IMG_INCIDENT"
  kubectl -n "$ns" wait --for=condition=Ready pod/own-rules --timeout=120s >/dev/null || fail "pod own-rules is not Ready"
  wait_for 60 "iptables-nft 1.8.7's chain $S22_CHAIN in $NFT_NODE's table ip filter" s22_written
  out=$(node_exec "$NFT_NODE" nft list tables)
  [ "$(sort <<<"$out")" = "$(printf '%s\ntable ip filter\n' "$tables" | sort)" ] ||
    fail "the tables of $NFT_NODE went from '$(tr '\n' ' ' <<<"$tables")' to '$(tr '\n' ' ' <<<"$out")'"
  ok "it wrote its own chain in table ip filter, the only table added beside kube-proxy's:"
  node_exec "$NFT_NODE" nft list table ip filter | show
}

# ---- 23. the what-if gate ----------------------------------------------------------------
# s23_check OUT [ARGS...]: `nfguard check --running` against this cluster, its
# JSON report in OUT; the exit status is returned (1 is a denial, not an error).
s23_check() {
  local out=$1 rc=0
  shift
  # The cluster's images are looked up with the in-cluster egress policy:
  # the test registry is on loopback, so it is allowed here by name.
  "$S23_BIN" check --kubeconfig "$KUBECONFIG" --running \
    --insecure-registry "$S23_REGISTRY" --registry-allow-cidr "${S23_REGISTRY%:*}/32" \
    --timeout 60 -o json "$@" \
    >"$out" 2>"$out.err" || rc=$?
  return "$rc"
}

s23_what_if() {
  local ns=nfguard-e2e-s23 work rc pod verdict message sel
  S23_BIN=${NFGUARD_BIN:-$REPO/target/release/nfguard}
  [ -x "$S23_BIN" ] || fail "NFGUARD_BIN=$S23_BIN is not an executable nfguard"
  nftables_node
  command -v jq >/dev/null || fail "jq is not on PATH"
  work=$(mktemp -d)
  defer rm -rf "$work"
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete pod writer-187 --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
  # Named by the loopback address this machine reads the registry at (the
  # nodes pull that name through their mirror): the CLI reads what runs from
  # here, and only loopback is dialled. The webhook cannot read that name in
  # its pod, so admission only warns ([ImageUnresolved]).
  S23_REGISTRY=${NFGUARD_E2E_REGISTRY:-}
  [ -n "$S23_REGISTRY" ] || fail "scenario 23 needs NFGUARD_E2E_REGISTRY (the registry as this machine reaches it)"
  incident_pod writer-187 "$NFT_NODE" '{}' '["sleep", "infinity"]' |
    sed "s|image: $IMG_INCIDENT|image: $S23_REGISTRY/nfguard-e2e/incident:1.8.7-nft|" |
    kubectl -n "$ns" create -f - >/dev/null ||
    fail "the iptables-nft 1.8.7 writer was not admitted on $NFT_NODE"
  kubectl -n "$ns" wait --for=condition=Ready pod/writer-187 --timeout=120s >/dev/null || fail "pod writer-187 is not Ready"
  pod="Pod/$ns/writer-187"

  rc=0
  s23_check "$work/today" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || fail "nfguard check --running exited $rc: $(cat "$work/today.err")"
  verdict=$(jq -r --arg o "$pod" '.results[] | select(.object == $o) | .verdict' "$work/today")
  [ "$verdict" = allow ] || fail "today the running 1.8.7 writer on $NFT_NODE should be allowed, got '$verdict': $(cat "$work/today")"
  ok "today (no iptables on $NFT_NODE) nfguard check --running allows $pod"

  sel="kubernetes.io/hostname=$NFT_NODE"
  rc=0
  s23_check "$work/assumed" --assume-nodes "$sel" --assume iptables=1.8.11/nft || rc=$?
  [ "$rc" = 1 ] || fail "the what-if exited $rc, want 1 (deny): $(cat "$work/assumed" "$work/assumed.err")"
  verdict=$(jq -r --arg o "$pod" '.results[] | select(.object == $o) | .verdict' "$work/assumed")
  [ "$verdict" = deny ] || fail "the what-if should deny $pod, got '$verdict': $(cat "$work/assumed")"
  message=$(jq -r --arg o "$pod" --arg n "$NFT_NODE" \
    '.results[] | select(.object == $o) | .reasons[] | select(.code == "OldReaderNewRules" and (.nodes | index($n))) | .message' \
    "$work/assumed")
  [ -n "$message" ] || fail "no [OldReaderNewRules] naming $NFT_NODE for $pod: $(cat "$work/assumed")"
  [[ "$message" == "what-if [$sel: iptables=1.8.11/nft]: "* ]] ||
    fail "the finding is not labelled as a prediction under the assumption: $message"
  [ "$(jq -r '.whatIf.nodes | join(" ")' "$work/assumed")" = "$NFT_NODE" ] ||
    fail "the assumed nodes are not just $NFT_NODE: $(jq -c .whatIf "$work/assumed")"
  [ "$(jq -r '.whatIf.denied' "$work/assumed")" -ge 1 ] || fail "the what-if counts no denial: $(jq -c .whatIf "$work/assumed")"
  ok "with $NFT_NODE assumed to get Debian trixie's iptables (1.8.11, nft), the what-if denies $pod: $message"
  ok "the what-if: $(jq -c '.whatIf | {selector, assume, nodes, denied, warned}' "$work/assumed")"
}

# Scenarios in files of their own.
# shellcheck source=e2e/s24-node-change.sh
source "$REPO/e2e/s24-node-change.sh"
# shellcheck source=e2e/s25-private-image-taint.sh
source "$REPO/e2e/s25-private-image-taint.sh"
# shellcheck source=e2e/s26-nft-skew.sh
source "$REPO/e2e/s26-nft-skew.sh"
# shellcheck source=e2e/scenario-reports.sh
source "$REPO/e2e/scenario-reports.sh"
# shellcheck source=e2e/s31-gate-without-pod-network.sh
source "$REPO/e2e/s31-gate-without-pod-network.sh"
# shellcheck source=e2e/s32-cluster-restart.sh
source "$REPO/e2e/s32-cluster-restart.sh"
# shellcheck source=e2e/s33-write-fences.sh
source "$REPO/e2e/s33-write-fences.sh"
# shellcheck source=e2e/s34-image-digests.sh
source "$REPO/e2e/s34-image-digests.sh"
# shellcheck source=e2e/s35-private-egress.sh
source "$REPO/e2e/s35-private-egress.sh"

# ---- main --------------------------------------------------------------------------------
case "$PROVIDER" in
  kind) command -v docker >/dev/null || fail "NFGUARD_E2E_PROVIDER=kind needs docker" ;;
  local) [ -x "$REPO/e2e/local-cluster.sh" ] || fail "NFGUARD_E2E_PROVIDER=local needs e2e/local-cluster.sh" ;;
  *) fail "NFGUARD_E2E_PROVIDER must be kind or local, not '${PROVIDER}'" ;;
esac
[ -n "$REGISTRY" ] || fail "NFGUARD_E2E_REGISTRY_PULL is not set"
[ -n "${KUBECONFIG:-}" ] || fail "KUBECONFIG is not set"
command -v kubectl >/dev/null || fail "kubectl is not on PATH"
for n in ${NFGUARD_E2E_ONLY:-}; do
  if [ -z "$NFT_NODE" ] && [[ " $NFT_SCENARIOS " == *" $n "* ]]; then
    fail "NFGUARD_E2E_ONLY: scenario $n needs NFGUARD_E2E_NFTABLES_NODE (a node without iptables, kube-proxy in nftables mode)"
  fi
  if [ "$PROVIDER" != local ] && [[ " $LOCAL_SCENARIOS " == *" $n "* ]]; then
    fail "NFGUARD_E2E_ONLY: scenario $n needs the local provider (e2e/local-cluster.sh)"
  fi
  [[ " $ALL_SCENARIOS " == *" $n "* ]] || fail "NFGUARD_E2E_ONLY: no scenario $n ($ALL_SCENARIOS)"
done
for e in ${NFGUARD_E2E_EXPECT_BACKENDS:-}; do
  [[ "$e" == ?*=?* ]] || fail "NFGUARD_E2E_EXPECT_BACKENDS: '$e' is not NODE=BACKEND"
  EXPECT[${e%%=*}]=${e#*=}
done
say "provider $PROVIDER, registry $REGISTRY, $(kubectl version 2>/dev/null | tr '\n' ' ')"

monitoring_up
run_scenario 1 "a NodeNetfilterProfile per node, owned by its Node, with its backend" s1_profiles
run_scenario 2 "the incident DaemonSet (iptables-nft 1.8.7) is denied" s2_incident_denied
run_scenario 3 "a compatible DaemonSet (1.8.11, iptables-wrapper) runs on every node with an iptables command" s3_compatible_runs
run_scenario 4 "a legacy-only image is allowed only where the rules are legacy" s4_legacy_only
run_scenario 5 "restarting the reporter keeps every profile" s5_reporter_restart
run_scenario 6 "the incident for real: an old reader's save/restore on an nft node" s6_incident
run_scenario 7 "RBAC: own ServiceAccounts; a reporter cannot write another node's profile" s7_rbac
run_scenario 8 "two controller replicas: hand-over without double writes, and the new leader sweeps an orphaned profile" s8_leader_election
run_scenario 9 "the webhook down: failurePolicy Ignore, then Fail" s9_webhook_down
run_scenario 10 "a Taint policy selecting namespaces by label; an invalid policy is shown and ignored" s10_namespace_selector
run_scenario 11 "a reporter token of node A is refused for node B's profile, A's spec.nodeName and the controller's status fields; A's heartbeat advances" s11_node_identity
run_scenario 12 "kubectl set image swapping iptables-nft 1.8.7 into a running hostNetwork + NET_ADMIN pod is denied" s12_set_image
run_scenario 13 "failurePolicy Fail, no webhook replica: an ordinary pod is created, hostNetwork pods refused, matchConditions as e2e/gate-match.yaml says" s13_gate_without_webhook
run_scenario 14 "RBAC: kubectl auth can-i --list of each ServiceAccount equals e2e/rbac-expected/" s14_rbac_can_i
run_scenario 15 "a forged AdmissionReview from a pod is refused (no client certificate); the API server's own call is judged" s15_forged_review_refused
run_scenario 16 "the reporter's blast radius: only the probed host paths, read-only; /metrics for allowed tokens only; control-plane nodes by opt-in" s16_reporter_blast_radius
run_scenario 17 "a controller token may write only nfguard.io/ labels and NoSchedule taints of a Node; the controller's own writes pass" s17_controller_node_writes
run_scenario 18 "nfguard.io/exempt counts only in a namespace a NetfilterPolicy's exemptionNamespaceSelector selects" s18_exemptions
run_scenario 30 "policy reports: none without a CRD, PolicyReport as the fallback, Report with the openreports CRDs; written only on change; the openreports CRDs removed without an error; removed with the workload" s30_policy_reports
run_scenario 33 "the webhook's and the controller's own tokens: no Secret created, of the gate only its caBundle, only nfguard's reports, only the controller's profile status fields; their own writes pass" s33_write_fences
run_scenario 34 "the opt-in require-image-digests: a gated pod or template by tag is refused by its policy, by digest judged by nfguard (compatible admitted, incident denied); an ordinary pod by tag admitted; admitted again once the policy is deleted" s34_image_digests
run_scenario 35 "the in-cluster egress policy refuses the cluster's own private addresses: an image on the kubernetes Service's IP or a node's kubelet port is answered 'refused by the registry egress policy', the allowed test registry read in the same review" s35_private_egress
run_scenario 31 "the gate without the pod network: the webhook on the node's network; routes to the pod ranges blackholed; under Ignore and Fail a compatible CNI repair pod is admitted and judged, the incident pod denied by nfguard's verdict, an ordinary pod created; look-ups and watches keep working" s31_gate_without_pod_network
run_scenario 32 "a power cut of the whole cluster: under failurePolicy Fail the gate comes back by itself (nfguard denies the incident pod again, same caBundle), ordinary pods admitted meanwhile" s32_cluster_restart
# 26 first among the node's scenarios: 19-22 then check that it left the
# node as it found it (20: kube-proxy's tables the only ones, Services answer).
run_scenario 26 "the nft skew incident for real: trixie's nft 1.1.3 denied at admission naming kube-proxy's nft 1.0.6; let through, its type set makes the node's nft and kube-proxy's sync segfault and a new Service unreachable; NftSetsCrashHostNft within seconds; recovery" s26_nft_skew
run_scenario 19 "the node without iptables: profile nft, kube-proxy mode nftables, kube-proxy's native table, marker chains not expected, no KubeletChainsMissing, Consistent; kubelet logs that it skips them; its reporter sees no iptables" s19_nftables_profile
run_scenario 20 "the node without iptables: a ClusterIP Service is reached from the node and from a pod through kube-proxy's nftables rules, the only rules there" s20_service_nftables
run_scenario 21 "the node without iptables: a legacy hostNetwork + NET_ADMIN writer pinned to it is denied as [BackendMismatch] naming it" s21_legacy_denied
run_scenario 22 "the node without iptables: an iptables-nft 1.8.7 writer of its own chain pinned to it is admitted and adds that chain in table ip filter, the only table beside kube-proxy's" s22_own_rules_allowed
run_scenario 23 "the what-if: the 1.8.7 writer running on the node without iptables is allowed today and predicted denied if the node gets iptables 1.8.11 (nft)" s23_what_if
run_scenario 24 "the what-if against the change done for real: two nodes moved to iptables 1.8.11 give exactly the predicted findings" s24_real_node_change
run_scenario 25 "a private image under a Taint policy: the controller reads the pod's pull secret (own or its ServiceAccount's) and taints the node" s25_private_image_taint
run_scenario 27 "monitoring, live: the operator's CRDs validate monitoring/; a real Prometheus scrapes every component as the PodMonitors say; alerts fire and resolve; every dashboard query answers" s27_monitoring
monitoring_down

CURRENT=finished
echo "$PASSED passed, 0 failed"
