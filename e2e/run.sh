#!/usr/bin/env bash
# nfguard end to end on kind, the "kind" provider of e2e/scenarios.sh: builds
# the nfguard image, loads it into a fresh kind cluster (one control plane,
# two workers), starts a local registry on kind's network holding the three
# workload images the scenarios need (real Debian iptables releases):
#   incident:1.8.7-nft, compatible:1.8.11-wrapper, legacy:1.8.9-legacy
# installs crds/ and manifests/, waits for readiness and runs e2e/scenarios.sh
# (profiles, admission, reporter restart, the incident for real, RBAC, leader
# election, webhook outage; see its header) with NFGUARD_E2E_PROVIDER=kind.
# Where docker, kind or kubectl are missing it prints "skipped: ..." and exits
# 0 (NFGUARD_REQUIRE_E2E=1 turns that into a failure).
# Env: KIND_CLUSTER (nfguard-e2e), KEEP_CLUSTER=1 keeps it afterwards,
#      NFGUARD_FIXTURES (iptables .debs from scripts/fetch-iptables.sh, optional),
#      NFGUARD_E2E_ONLY (e.g. "1 2 5": only these scenarios).
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
WORK=""
SCENARIOS=0

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
  # scenarios.sh dumps what concerns its own failures.
  if [ "$rc" != 0 ] && [ "$SCENARIOS" = 0 ]; then
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
    [ -z "$WORK" ] || rm -rf "$WORK"
  elif [ -n "$WORK" ]; then
    log "cluster kept: export KUBECONFIG=$WORK/kubeconfig"
  fi
  exit "$rc"
}
trap cleanup EXIT

# The cluster's own kubeconfig: never the user's current context.
WORK=$(mktemp -d)
export KUBECONFIG="$WORK/kubeconfig"

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
build_iptables_image legacy:1.8.9-legacy 1.8.9 legacy debian:bookworm-slim debian:bookworm-slim

# ---- install ----------------------------------------------------------------
kubectl apply --server-side -k crds/
kubectl wait --for=condition=Established --timeout=60s \
  crd/nodenetfilterprofiles.nfguard.io crd/netfilterpolicies.nfguard.io
kubectl apply --server-side -k manifests/
# The test registry speaks plain HTTP, on the kind network's private
# addresses: allowed by name (the in-cluster egress policy refuses private
# addresses otherwise).
for d in nfguard-webhook nfguard-controller; do
  kubectl -n "$NS" set env "deployment/$d" "NFGUARD_INSECURE_REGISTRIES=${REGISTRY_NAME}:5000" \
    "NFGUARD_REGISTRY_ALLOW_HOSTS=${REGISTRY_NAME}"
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

# ---- the scenarios ------------------------------------------------------------------
# kind's nodes are containers: scenarios.sh reaches them with docker exec.
SCENARIOS=1
NFGUARD_E2E_PROVIDER=kind NFGUARD_E2E_REGISTRY_PULL="${REGISTRY_NAME}:5000" e2e/scenarios.sh

# ---- kubectl nfguard ----------------------------------------------------------------
# The plugin on the same cluster, with the binary out of the image under test.
bin_dir="$(mktemp -d)"
cid="$(docker create "$IMAGE")"
docker cp "$cid:/usr/local/bin/nfguard" "$bin_dir/nfguard"
docker rm "$cid" >/dev/null
NFGUARD_BIN="$bin_dir/nfguard" NFGUARD_E2E_REGISTRY="127.0.0.1:${REGISTRY_PORT}" e2e/plugin-status.sh
