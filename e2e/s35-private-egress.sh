# shellcheck shell=bash
# Scenario 35, sourced by e2e/scenarios.sh (its helpers and state): the
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
