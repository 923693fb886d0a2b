# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 35: the in-cluster egress policy refuses the cluster's own private addresses: an image on the kubernetes Service's IP or a node's kubelet port is answered 'refused by the registry egress policy', the allowed test registry read in the same review.
#
# the in-cluster egress policy: an image on the kubernetes Service's
# cluster IP or a node's kubelet port is refused (a warning under
# unresolvedImages: Warn), the allowed test registry read beside it
# (e2e/scenarios/35-private-egress-refused.sh)
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$S35_NS" (scenario_ns)

SCENARIO_TITLE="the in-cluster egress policy refuses the cluster's own private addresses: an image on the kubernetes Service's IP or a node's kubelet port is answered 'refused by the registry egress policy', the allowed test registry read in the same review"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s35_private_egress

# the
# in-cluster egress policy refuses the cluster's own private addresses.
# A gated pod (hostNetwork + NET_ADMIN) whose image names the kubernetes
# Service's cluster IP (port 443) or a node's kubelet (its InternalIP, port
# 10250) is admitted under the default unresolvedImages: Warn with the
# warning "refused by the registry egress policy" for that image, while the
# test registry on its allowed address (NFGUARD_REGISTRY_ALLOW_CIDRS of the
# install: one /32) is read in the same review and judged. Server-side dry
# runs; the policy's decision is made before any connection
# (tests/it/registry_egress.rs counts 0 connections on a listener).

S35_NS=nfguard-e2e-s35

s35_pod() { # NAME IMAGE: a gated pod with the compatible image and IMAGE
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  hostNetwork: true
  tolerations: [{operator: Exists}]
  containers:
    - name: cni
      image: $IMG_COMPATIBLE
      securityContext: {capabilities: {add: ["NET_ADMIN"]}}
    - name: probe
      image: $2
      securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}

s35_private_egress() {
  local svc node out target lines
  svc=$(get service kubernetes '{.spec.clusterIP}' -n default)
  [ -n "$svc" ] || fail "the kubernetes Service has no cluster IP"
  node=$(get node "${NODES[0]}" '{.status.addresses[?(@.type=="InternalIP")].address}')
  [ -n "$node" ] || fail "node ${NODES[0]} has no InternalIP"
  [ "$node" != "${REGISTRY%:*}" ] || fail "node ${NODES[0]} shares the registry's address $node"
  scenario_ns "$S35_NS"
  for target in "$svc:443" "$node:10250"; do
    out=$(s35_pod "probe-${target//[.:]/-}" "$target/nfguard-e2e/probe:1" |
      kubectl -n "$S35_NS" create --dry-run=server -f - 2>&1) ||
      fail "the pod naming $target was refused (unresolvedImages: Warn admits it with a warning): $out"
    lines=$(grep -F "$target/nfguard-e2e/probe:1" <<<"$out" || true)
    [[ "$lines" == *"refused by the registry egress policy"* ]] ||
      fail "no 'refused by the registry egress policy' warning for $target: $out"
    lines=$(grep -F "$IMG_COMPATIBLE" <<<"$out" || true)
    if [[ "$lines" == *"refused by the registry egress policy"* || "$lines" == *unreachable* ]]; then
      fail "the allowed test registry ${REGISTRY%:*} was not read in the same review: $out"
    fi
    ok "an image on $target (a private address of the cluster) is refused by the egress policy; the allowed registry ${REGISTRY%:*} read beside it:"
    grep -F 'Warning:' <<<"$out" | show
  done
}
