#!/usr/bin/env bash
# Pushes the workload images bundling real Debian iptables releases (and
# trixie's nftables 1.1.3, nfguard-e2e/nft-writer:1.1.3) to the
# local cluster's test registry ($NFGUARD_E2E_REGISTRY, the loopback
# address `e2e/local-cluster.sh up` exports) as nfguard-e2e/NAME:TAG; nodes
# and nfguard pull them as $NFGUARD_E2E_REGISTRY_PULL/... (or under the
# loopback name, which the nodes mirror). Used by e2e/local.sh and
# scripts/bench-cluster.sh. Fetches the iptables and nftables fixtures when
# missing (scripts/fetch-iptables.sh, scripts/fetch-nftables.sh). With
# NFGUARD_E2E_PRIVATE_REGISTRY (and its _AUTH_FILE, USER:PASSWORD), the
# 1.8.7 writer also goes there as nfguard-e2e/private-writer:1.8.7-nft.
# Each image is built once (e2e/images/build.sh, ~50 s) into an OCI archive
# in $NFGUARD_E2E_CACHE/images, keyed by everything the build reads (its
# scripts, the release's .debs, this machine's busybox and libc; the nft
# image's inputs as `build.sh nft-inputs` lists them, ~5 s to build); later
# pushes copy the archive (~1 s).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${NFGUARD_E2E_REGISTRY:?run e2e/local-cluster.sh up first (it exports NFGUARD_E2E_REGISTRY)}"
CACHE=${NFGUARD_E2E_CACHE:-/var/cache/nfguard-e2e}

export NFGUARD_FIXTURES=${NFGUARD_FIXTURES:-$PWD/target/fixtures}
[ -d "$NFGUARD_FIXTURES/iptables/1.8.7" ] || scripts/fetch-iptables.sh "$NFGUARD_FIXTURES/iptables"
[ -f "$NFGUARD_FIXTURES/nftables/1.1.3/.complete" ] || scripts/fetch-nftables.sh "$NFGUARD_FIXTURES/nftables"

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
# push_nft repo:tag VERSION: Debian's nftables VERSION (e2e/images/build.sh
# nft; 1.1.3 carries trixie's libc6 and loader), cached the same way, keyed
# by build.sh and what it says the build reads (`build.sh nft-inputs`: the
# release's .debs and every file taken from this machine).
push_nft() {
  local ref=$1 version=$2 key archive inputs
  inputs=$(e2e/images/build.sh nft-inputs "$version")
  key=$(
    {
      cat e2e/images/build.sh
      echo "$inputs"
      echo "nft $version"
    } | sha256sum | cut -c1-16
  )
  archive="$CACHE/images/nft-$version-$key.tar"
  if [ ! -f "$archive" ]; then
    mkdir -p "$CACHE/images"
    e2e/images/build.sh nft "$version" "oci-archive:$archive.tmp:nfguard-e2e/$ref"
    mv "$archive.tmp" "$archive"
  fi
  skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci-archive:$archive" \
    "docker://$NFGUARD_E2E_REGISTRY/nfguard-e2e/$ref" >&2
}
push incident:1.8.7-nft 1.8.7 nft
push compatible:1.8.11-wrapper 1.8.11 wrapper
push legacy:1.8.9-legacy 1.8.9 legacy
# A writer of the new nft set userdata (trixie's nftables 1.1.3): scenario 26.
push_nft nft-writer:1.1.3 1.1.3
# The private registry (local provider): an iptables-nft 1.8.7 writer under a
# name only it holds, readable only with its credentials (scenario 25).
if [ -n "${NFGUARD_E2E_PRIVATE_REGISTRY:-}" ]; then
  push private-writer:1.8.7-nft 1.8.7 nft "$NFGUARD_E2E_PRIVATE_REGISTRY" "$NFGUARD_E2E_PRIVATE_REGISTRY_AUTH_FILE"
fi
