#!/usr/bin/env bash
# Pushes the workload images bundling real Debian iptables releases to the
# local cluster's test registry ($NFGUARD_E2E_REGISTRY, the loopback
# address `e2e/local-cluster.sh up` exports) as nfguard-e2e/NAME:TAG; nodes
# and nfguard pull them as $NFGUARD_E2E_REGISTRY_PULL/... (or under the
# loopback name, which the nodes mirror). Used by e2e/local.sh and
# scripts/bench-cluster.sh. Fetches the iptables fixtures when missing. With
# NFGUARD_E2E_PRIVATE_REGISTRY (and its _AUTH_FILE, USER:PASSWORD), the
# 1.8.7 writer also goes there as nfguard-e2e/private-writer:1.8.7-nft.
# Each image is built once (e2e/images/build.sh, ~50 s) into an OCI archive
# in $NFGUARD_E2E_CACHE/images, keyed by everything the build reads (its
# scripts, the release's .debs, this machine's busybox and libc); later
# pushes copy the archive (~1 s).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${NFGUARD_E2E_REGISTRY:?run e2e/local-cluster.sh up first (it exports NFGUARD_E2E_REGISTRY)}"
CACHE=${NFGUARD_E2E_CACHE:-/var/cache/nfguard-e2e}

export NFGUARD_FIXTURES=${NFGUARD_FIXTURES:-$PWD/target/fixtures}
[ -d "$NFGUARD_FIXTURES/iptables/1.8.7" ] || scripts/fetch-iptables.sh "$NFGUARD_FIXTURES/iptables"

push() { # repo:tag version mode [registry USER:PASSWORD-file]
  local ref=$1 version=$2 mode=$3 registry=${4:-$NFGUARD_E2E_REGISTRY} auth=${5:-} key archive creds=()
  key=$(
    {
      cat e2e/images/build.sh e2e/images/Dockerfile.iptables e2e/images/iptables-wrapper
      (cd "$NFGUARD_FIXTURES/iptables/$version" && find . -type f -name '*.deb' | sort | xargs sha256sum)
      dpkg-query -W busybox-static libc6
      echo "$version $mode"
    } | sha256sum | cut -c1-16
  )
  archive="$CACHE/images/iptables-$version-$mode-$key.tar"
  if [ ! -f "$archive" ]; then
    mkdir -p "$CACHE/images"
    e2e/images/build.sh iptables "$version" "$mode" "oci-archive:$archive.tmp:nfguard-e2e/$ref"
    mv "$archive.tmp" "$archive"
  fi
  [ -z "$auth" ] || creds=(--dest-creds "$(cat "$auth")")
  skopeo --insecure-policy copy --quiet --dest-tls-verify=false "${creds[@]}" "oci-archive:$archive" \
    "docker://$registry/nfguard-e2e/$ref" >&2
}
push incident:1.8.7-nft 1.8.7 nft
push compatible:1.8.11-wrapper 1.8.11 wrapper
push legacy:1.8.9-legacy 1.8.9 legacy
# The private registry (local provider): an iptables-nft 1.8.7 writer under a
# name only it holds, readable only with its credentials (scenario 25).
if [ -n "${NFGUARD_E2E_PRIVATE_REGISTRY:-}" ]; then
  push private-writer:1.8.7-nft 1.8.7 nft "$NFGUARD_E2E_PRIVATE_REGISTRY" "$NFGUARD_E2E_PRIVATE_REGISTRY_AUTH_FILE"
fi
