# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 25: a private image under a Taint policy: the controller reads the pod's pull secret (own or its ServiceAccount's) and taints the node.
#
# (a registry with credentials: NFGUARD_E2E_PRIVATE_REGISTRY_PULL and
# _AUTH_FILE, local provider) an iptables-nft 1.8.7 writer only in that
# registry, under an `action: Taint` policy: a DaemonSet with
# imagePullSecrets, then one whose ServiceAccount has the secret, each
# admitted with [OldReaderNewRules] (not [ImageUnresolved]); the
# controller reads the pods' pull secrets, taints the nft node, its
# Tainted event names pod, reason and image; deleted, the taint goes
# (e2e/scenarios/25-private-image-taint.sh)
#
# Runs on: local. Needs: private-registry.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - kubectl -n "$S25_NS" delete daemonset "$name" --ignore-not-found --wait=false
#   - kubectl delete netfilterpolicy "$S25_POLICY" --ignore-not-found
#   - namespace "$S25_NS" (scenario_ns)

SCENARIO_TITLE="a private image under a Taint policy: the controller reads the pod's pull secret (own or its ServiceAccount's) and taints the node"
SCENARIO_PROVIDERS="local"
SCENARIO_NEEDS="private-registry"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s25_private_image_taint

# a
# private image under a Taint policy, on the real cluster. The controller
# must read the pod's own pull secret (src/judgement/pull_secrets.rs) to
# judge an image that only answers with credentials; before it did, such an
# image was "unresolved" to the controller and the node was never tainted.
#
# The iptables-nft 1.8.7 writer is only in the private registry
# (NFGUARD_E2E_PRIVATE_REGISTRY_PULL, htpasswd; e2e/local-cluster.sh). The
# policy says `unresolvedImages: Warn`, so only a resolved image can taint.
# Two hostNetwork + NET_ADMIN DaemonSets, one after the other: one naming
# the secret in imagePullSecrets, on the nft node with new rules
# ([OldReaderNewRules]); one whose ServiceAccount carries it, on the legacy
# node ([BackendMismatch]) (the webhook reads the ServiceAccount for the
# template; the API server's ServiceAccount admission copies its secrets
# into each pod, where the controller reads them). Each: admitted with that
# warning and no [ImageUnresolved], the controller taints the node, its
# Tainted event names the pod, the reason and the image; the DaemonSet
# deleted, the taint goes. Local provider only.

S25_NS=nfguard-e2e-s25
S25_POLICY=nfguard-e2e-private
S25_NODE=""
S25_IMAGE=""

# s25_ds NAME MODE: the writer DaemonSet on $S25_NODE; MODE secret (the
# template names the pull secret), sa (its ServiceAccount has it) or none.
s25_ds() {
  local extra
  case "$2" in
    secret) extra='imagePullSecrets: [{name: regcred}]' ;;
    sa) extra='serviceAccountName: puller' ;;
    none) extra='enableServiceLinks: false' ;;
  esac
  ds_yaml "$1" "$S25_IMAGE" "kubernetes.io/hostname=$S25_NODE" |
    sed "s|^      tolerations: \[{operator: Exists}\]\$|&\n      $extra|"
}

s25_tainted() { node_taint "$S25_NODE" 'nfguard.io/iptables-incompatible=:NoSchedule' "$1"; } # YES|NO

# s25_event_for POD: the node's Tainted event that names POD (in S25_EVENT).
S25_EVENT=""
s25_event_for() {
  local all
  all=$(kubectl get events -A \
    --field-selector "involvedObject.kind=Node,involvedObject.name=$S25_NODE,reason=Tainted" \
    -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null) || true
  S25_EVENT=$(grep -F "pod $S25_NS/$1" <<<"$all" || true)
  WHY="no Tainted event on $S25_NODE names pod $S25_NS/$1"
  [ -n "$S25_EVENT" ]
}

# s25_round NAME MODE NODE CODE: one DaemonSet on NODE through admission
# (warned with CODE), the taint and back.
s25_round() {
  local name=$1 mode=$2 code=$4 out pod
  S25_NODE=$3
  defer kubectl -n "$S25_NS" delete daemonset "$name" --ignore-not-found --wait=false
  out=$(s25_ds "$name" "$mode" | kubectl -n "$S25_NS" create -f - 2>&1) ||
    fail "DaemonSet $name ($mode) was denied under action: Taint: $out"
  [ -n "$(reason_part "$out" "$code")" ] ||
    fail "DaemonSet $name ($mode) admitted without [$code]: the webhook did not read the private image: $out"
  if grep -qF '[ImageUnresolved]' <<<"$out"; then
    fail "DaemonSet $name ($mode): the webhook could not read the private image: $out"
  fi
  ok "DaemonSet $name (pull secret: $mode) admitted with nfguard's warning:"
  show <<<"$out"
  wait_for 120 "DaemonSet $name to run on $S25_NODE (pulled with the secret)" ds_running "$S25_NS" "$name" 1
  wait_for 120 "the controller to taint $S25_NODE over $name's private image" s25_tainted YES
  ok "$S25_NODE tainted nfguard.io/iptables-incompatible:NoSchedule ${WAITED} s after $name ran"
  pod=$(kubectl -n "$S25_NS" get pods -l "app=$name" -o jsonpath='{.items[0].metadata.name}')
  wait_for 30 "the Tainted event naming $pod" s25_event_for "$pod"
  grep -qF "($code)" <<<"$S25_EVENT" ||
    fail "the Tainted event does not name the reason: $S25_EVENT"
  grep -qF "$S25_IMAGE" <<<"$S25_EVENT" || fail "the Tainted event does not name the image $S25_IMAGE: $S25_EVENT"
  ok "the taint's event: $S25_EVENT"
  kubectl -n "$S25_NS" delete daemonset "$name" --wait=true --timeout=60s >/dev/null
  wait_for 120 "the taint on $S25_NODE to go once $name is deleted" s25_tainted NO
  ok "DaemonSet $name deleted: taint removed after ${WAITED} s"
}

s25_private_image_taint() {
  # SCENARIO_NEEDS: the harness runs this only with both set.
  local registry=$NFGUARD_E2E_PRIVATE_REGISTRY_PULL auth=$NFGUARD_E2E_PRIVATE_REGISTRY_AUTH_FILE out n legacy=""
  [ -r "$auth" ] || fail "NFGUARD_E2E_PRIVATE_REGISTRY_AUTH_FILE=$auth is not readable"
  S25_IMAGE=$registry/nfguard-e2e/private-writer:1.8.7-nft
  new_rules_node
  for n in "${NODES[@]}"; do
    [ "$(nnp "$n" '{.status.activeBackend}')" != legacy ] || legacy=$n
  done
  [ -n "$legacy" ] || fail "no node whose rules are legacy"
  S25_NODE=$RULES_NODE
  say "the nodes: $RULES_NODE (minReaderVersion $(nnp "$RULES_NODE" '{.status.minReaderVersion}')), $legacy (legacy); the image: $S25_IMAGE"

  defer kubectl delete netfilterpolicy "$S25_POLICY" --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: $S25_POLICY, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Taint
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $S25_NS}}
  maxTaintedNodesPercent: 100
YAML
  lift_brake "$S25_POLICY"
  keep_out_of_namespace "$S25_NS" "$S25_POLICY"
  wait_for 60 "$S25_POLICY to be Valid=True" policy_is "$S25_POLICY" True
  on_dump kubectl get events -A --field-selector reason=Tainted
  scenario_ns "$S25_NS"
  kubectl -n "$S25_NS" create secret docker-registry regcred --docker-server="$registry" \
    --docker-username="$(cut -d: -f1 "$auth")" --docker-password="$(cut -d: -f2- "$auth")" >/dev/null
  kubectl -n "$S25_NS" create serviceaccount puller >/dev/null
  kubectl -n "$S25_NS" patch serviceaccount puller -p '{"imagePullSecrets":[{"name":"regcred"}]}' >/dev/null

  # Without a secret the image is unreadable to nfguard: the policy only warns.
  out=$(s25_ds probe none | kubectl -n "$S25_NS" create --dry-run=server -f - 2>&1) ||
    fail "the DaemonSet without a pull secret was denied (unresolvedImages: Warn): $out"
  grep -qF '[ImageUnresolved]' <<<"$out" ||
    fail "without a pull secret the private image was read (is it private?): $out"
  ok "without a pull secret: admitted with [ImageUnresolved] (the registry wants credentials)"

  s25_round writer-secret secret "$RULES_NODE" OldReaderNewRules
  # On another node, for a second reason. (A second pod's taint of the same
  # node soon after used to fold into the first Tainted event's series,
  # which keeps the first note; the pod is now the event's related object:
  # tests/it/controller_reconcile.rs.)
  s25_round writer-sa sa "$legacy" BackendMismatch
}
