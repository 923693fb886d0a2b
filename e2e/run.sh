#!/usr/bin/env bash
# nfguard end to end on kind: builds the image, loads it into a fresh kind
# cluster (one control plane, two workers), installs manifests/, waits for
# readiness and runs the scenarios:
#   1. a NodeNetfilterProfile, owned by its Node, appears for every node;
#   2. every node gets the label nfguard.io/iptables-backend;
#   3. the incident DaemonSet (hostNetwork + NET_ADMIN, bundling iptables
#      1.8.7 nft) is denied: the nodes' rules were written by 1.8.8+;
#   4. a compatible DaemonSet (iptables 1.8.11 behind iptables-wrapper) is admitted;
#   5. restarting the reporter keeps every profile (same uid, fresh heartbeat).
# Where docker, kind or kubectl are missing it prints "skipped: ..." and exits
# 0 (NFGUARD_REQUIRE_E2E=1 turns that into a failure).
# Env: KIND_CLUSTER (nfguard-e2e), KEEP_CLUSTER=1 keeps it afterwards,
#      NFGUARD_FIXTURES (iptables .debs from scripts/fetch-iptables.sh, optional).
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER:-nfguard-e2e}
IMAGE=ghcr.io/nfguard/nfguard:dev
REGISTRY_NAME="${CLUSTER}-registry"
REGISTRY_PORT=${E2E_REGISTRY_PORT:-5001}
# Images are pushed through the published loopback port and pulled in the
# cluster (by containerd and by nfguard) under the registry's container name.
PUSH_PREFIX="127.0.0.1:${REGISTRY_PORT}/nfguard-e2e"
PULL_PREFIX="${REGISTRY_NAME}:5000/nfguard-e2e"
NS=nfguard-system
FIXTURES=${NFGUARD_FIXTURES:-$PWD/target/fixtures}

log() { printf 'e2e: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

skip() {
  if [ "${NFGUARD_REQUIRE_E2E:-}" = 1 ]; then
    die "$1 (NFGUARD_REQUIRE_E2E=1)"
  fi
  echo "skipped: $1"
  exit 0
}

command -v docker >/dev/null || skip "docker not installed"
docker info >/dev/null 2>&1 || skip "docker daemon not reachable"
command -v kind >/dev/null || skip "kind not installed"
command -v kubectl >/dev/null || skip "kubectl not installed"

# wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND every 3 s.
wait_for() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out waiting for $what"
    sleep 3
  done
  log "ok: $what"
}

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    log "collecting diagnostics"
    kubectl get nodes -o wide --show-labels || true
    kubectl get nodenetfilterprofiles -o yaml || true
    kubectl -n "$NS" get pods -o wide || true
    for c in reporter controller webhook; do
      kubectl -n "$NS" logs -l "app.kubernetes.io/component=$c" --tail=50 --prefix || true
    done
  fi
  if [ "${KEEP_CLUSTER:-}" != 1 ]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    docker rm -f "$REGISTRY_NAME" >/dev/null 2>&1 || true
  fi
  exit "$rc"
}
trap cleanup EXIT

# ---- image ------------------------------------------------------------------
log "building $IMAGE"
docker build -t "$IMAGE" .
# nfguard never ships iptables or nft: look at the image's files, not the Dockerfile.
cid=$(docker create "$IMAGE")
if docker export "$cid" | tar -t | grep -E '(^|/)(iptables|ip6tables|nft|xtables-[a-z]+-multi)$'; then
  docker rm "$cid" >/dev/null
  die "the nfguard image contains iptables or nft"
fi
docker rm "$cid" >/dev/null

# ---- cluster and local registry ----------------------------------------------
kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
docker rm -f "$REGISTRY_NAME" >/dev/null 2>&1 || true
docker run -d --restart=always --name "$REGISTRY_NAME" \
  -p "127.0.0.1:${REGISTRY_PORT}:5000" registry:2 >/dev/null
kind create cluster --name "$CLUSTER" --config e2e/kind-config.yaml --wait 180s
docker network connect kind "$REGISTRY_NAME" 2>/dev/null || true
for node in $(kind get nodes --name "$CLUSTER"); do
  docker exec "$node" mkdir -p "/etc/containerd/certs.d/${REGISTRY_NAME}:5000"
  printf '[host."http://%s:5000"]\n' "$REGISTRY_NAME" |
    docker exec -i "$node" tee "/etc/containerd/certs.d/${REGISTRY_NAME}:5000/hosts.toml" >/dev/null
done
kind load docker-image "$IMAGE" --name "$CLUSTER"

# ---- workload images bundling real Debian iptables releases -------------------
# With the .debs of scripts/fetch-iptables.sh the release is installed from
# them onto a supported base (apt resolves the remaining libraries there);
# without them the release's own Debian suite image installs its iptables.
build_iptables_image() { # tag version mode base-with-debs base-without
  local tag=$1 version=$2 mode=$3 base=$5 ctx
  ctx=$(mktemp -d)
  mkdir -p "$ctx/debs"
  if compgen -G "$FIXTURES/iptables/$version/debs/*.deb" >/dev/null; then
    cp "$FIXTURES/iptables/$version/debs/"*.deb "$ctx/debs/"
    base=$4
  fi
  cp e2e/images/Dockerfile.iptables e2e/images/iptables-wrapper "$ctx/"
  docker build -q -f "$ctx/Dockerfile.iptables" --build-arg "BASE=$base" \
    --build-arg "VERSION=$version" --build-arg "MODE=$mode" -t "$PUSH_PREFIX/$tag" "$ctx" >/dev/null
  docker push -q "$PUSH_PREFIX/$tag" >/dev/null
  rm -rf "$ctx"
  log "pushed $PULL_PREFIX/$tag (iptables $version, $mode, on $base)"
}
build_iptables_image incident:1.8.7-nft 1.8.7 nft debian:bookworm-slim debian:bullseye-slim
build_iptables_image compatible:1.8.11-wrapper 1.8.11 wrapper debian:trixie-slim debian:trixie-slim

# ---- install ----------------------------------------------------------------
kubectl apply --server-side -k crds/
kubectl wait --for=condition=Established --timeout=60s \
  crd/nodenetfilterprofiles.nfguard.io crd/netfilterpolicies.nfguard.io
kubectl apply --server-side -k manifests/
# The test registry speaks plain HTTP.
for d in nfguard-webhook nfguard-controller; do
  kubectl -n "$NS" set env "deployment/$d" "NFGUARD_INSECURE_REGISTRIES=${REGISTRY_NAME}:5000"
done
kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=180s
kubectl -n "$NS" rollout status deployment/nfguard-controller --timeout=180s
kubectl -n "$NS" rollout status deployment/nfguard-webhook --timeout=180s

ca_bundle_set() {
  [ -n "$(kubectl get validatingwebhookconfiguration nfguard -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]
}
wait_for 120 "the webhook patched its caBundle" ca_bundle_set

mapfile -t NODES < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
[ "${#NODES[@]}" -ge 3 ] || die "expected 3 nodes, found ${#NODES[@]}"

# ---- 1. a profile for every node, owned by the Node ----------------------------
profiles_complete() {
  local n
  for n in "${NODES[@]}"; do
    [ -n "$(kubectl get nodenetfilterprofile "$n" -o jsonpath='{.status.lastProbeTime}' 2>/dev/null)" ] || return 1
    [ "$(kubectl get nodenetfilterprofile "$n" -o jsonpath='{.metadata.ownerReferences[0].kind}')" = Node ] || return 1
  done
}
wait_for 120 "a probed profile owned by its Node for each of ${#NODES[@]} nodes" profiles_complete
kubectl get nodenetfilterprofiles

# ---- 2. node labels ----------------------------------------------------------
labels_present() {
  local n
  for n in "${NODES[@]}"; do
    [ -n "$(kubectl get node "$n" -o jsonpath='{.metadata.labels.nfguard\.io/iptables-backend}')" ] || return 1
  done
}
wait_for 120 "nfguard.io/iptables-backend on every node" labels_present

# ---- 3./4. admission --------------------------------------------------------------
daemonset() { # name image
  cat <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: $1, namespace: default}
spec:
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      hostNetwork: true
      tolerations: [{operator: Exists}]
      containers:
        - name: cni
          image: $2
          command: ["sleep", "infinity"]
          securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}

new_rules_nodes=$(kubectl get nodenetfilterprofiles -o jsonpath='{range .items[*]}{.status.minReaderVersion}{"\n"}{end}' | grep -c . || true)
[ "$new_rules_nodes" -ge 1 ] || die "no node reports rules that need iptables >= 1.8.8 (minReaderVersion)"
if out=$(daemonset incident "$PULL_PREFIX/incident:1.8.7-nft" | kubectl apply -f - 2>&1); then
  kubectl delete daemonset incident --ignore-not-found
  die "the incident DaemonSet was admitted: $out"
fi
grep -q 'denied' <<<"$out" || die "the incident DaemonSet failed, but not by a denial: $out"
grep -q '1.8.7' <<<"$out" || die "the denial does not name the image's iptables 1.8.7: $out"
log "ok: incident DaemonSet denied: $out"

out=$(daemonset compatible "$PULL_PREFIX/compatible:1.8.11-wrapper" | kubectl apply -f - 2>&1) ||
  die "the compatible DaemonSet was not admitted: $out"
log "ok: compatible DaemonSet admitted"
kubectl rollout status daemonset/compatible --timeout=120s
kubectl delete daemonset compatible

# ---- 5. restarting the reporter keeps the profiles --------------------------------
node=${NODES[0]}
uid_before=$(kubectl get nodenetfilterprofile "$node" -o jsonpath='{.metadata.uid}')
probe_before=$(kubectl get nodenetfilterprofile "$node" -o jsonpath='{.status.lastProbeTime}')
kubectl -n "$NS" rollout restart daemonset/nfguard-reporter
kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=180s
[ "$(kubectl get nodenetfilterprofile "$node" -o jsonpath='{.metadata.uid}')" = "$uid_before" ] ||
  die "the profile of $node was recreated by a reporter restart"
fresh_probe() {
  [ "$(kubectl get nodenetfilterprofile "$node" -o jsonpath='{.status.lastProbeTime}')" != "$probe_before" ]
}
wait_for 90 "a fresh heartbeat on the same profile of $node after the restart" fresh_probe

echo "e2e: 5 passed, 0 failed"
