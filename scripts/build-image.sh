#!/usr/bin/env bash
# The nfguard image without Docker, for a newcomer's kind cluster or registry:
#   scripts/build-image.sh [--name IMAGE] [--out FILE] [--binary FILE]
# builds the release binary (cargo build --release --locked, unless --binary)
# and from it the Dockerfile's runtime stage (the binary, the C libraries it
# links, the CA bundle, the distroless accounts, user 65532, no iptables or
# nft), as an OCI archive named IMAGE. The local e2e cluster builds its image
# with this same script; tests/it/install_dockerfile.rs checks that what it
# builds equals the Dockerfile's runtime stage.
#
# IMAGE defaults to the image manifests/ and the chart install
# (ghcr.io/nfguard/nfguard:dev); FILE to target/nfguard-image.tar. The
# archive is for this machine's architecture.
#
#   kind load image-archive target/nfguard-image.tar        # kind: every node imports it
#   skopeo copy oci-archive:target/nfguard-image.tar \
#     docker://registry.example/nfguard:dev                 # a registry
#
# Needs: cargo (unless --binary), and the builder's Debian packages (see
# e2e/images/build.sh): coreutils findutils tar gzip jq libc-bin ca-certificates.
set -euo pipefail
cd "$(dirname "$0")/.."

NAME="" OUT=target/nfguard-image.tar BINARY=""
while [ $# -gt 0 ]; do
  case $1 in
    --name) NAME=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --binary) BINARY=$2; shift 2 ;;
    -h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done

# The image every install names (one place: manifests/controller.yaml; a test
# keeps the reporter, webhook and chart equal to it).
default_name() {
  local line
  line=$(grep -E '^[[:space:]]+image: ' manifests/controller.yaml)
  line=${line%%$'\n'*}
  echo "${line##*image: }"
}
[ -n "$NAME" ] || NAME=$(default_name)
[ -n "$NAME" ] || { echo "build-image.sh: no image name in manifests/controller.yaml" >&2; exit 1; }

if [ -z "$BINARY" ]; then
  cargo build --release --locked --bin nfguard >&2
  BINARY=target/release/nfguard
fi
e2e/images/build.sh nfguard "$BINARY" "$OUT" "$NAME"
cat >&2 <<MSG
build-image.sh: $OUT holds $NAME. Next:
  kind:       kind load image-archive $OUT [--name CLUSTER]
  a registry: skopeo copy oci-archive:$OUT docker://REGISTRY/nfguard:TAG
              and point the install at it (docs/install.md, "Another image or tag")
MSG
