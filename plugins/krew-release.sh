#!/usr/bin/env bash
# Packages kubectl-nfguard for krew. For each OS/ARCH=BINARY it writes a
# reproducible archive kubectl-nfguard_VERSION_OS_ARCH.tar.gz (the binary as
# kubectl-nfguard, and LICENSE) into OUT_DIR, then fills the placeholders of
# plugins/nfguard.yaml and writes the finished manifest to OUT_DIR/nfguard.yaml.
# Upload the archives to BASE_URL/VERSION/ (a GitHub release's download URL
# has that shape) and submit the manifest to the krew index.
#   usage: plugins/krew-release.sh VERSION BASE_URL OUT_DIR OS/ARCH=BINARY...
#   e.g.   plugins/krew-release.sh v0.1.0 https://github.com/nfguard/nfguard/releases/download dist \
#            linux/amd64=target/x86_64-unknown-linux-gnu/release/nfguard \
#            linux/arm64=target/aarch64-unknown-linux-gnu/release/nfguard
set -euo pipefail
fail() { echo "krew-release.sh: $*" >&2; exit 2; }
[ $# -ge 4 ] || fail "usage: $0 VERSION BASE_URL OUT_DIR OS/ARCH=BINARY..."
version="$1"
base_url="${2%/}"
out="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
license="$here/../LICENSE"

# krew wants a v-prefixed semantic version.
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "VERSION must look like v0.1.0, not '$version'"
[[ "$base_url" =~ ^https?://[^[:space:]\"]+$ ]] || fail "BASE_URL must be an http(s) URL, not '$base_url'"
[ -f "$license" ] || fail "no LICENSE at $license (krew requires one in every archive)"

# The template without its header comment.
manifest="$(grep -v '^#' "$here/nfguard.yaml")"
manifest="${manifest//@VERSION@/"$version"}"
manifest="${manifest//@BASE_URL@/"$base_url"}"

mkdir -p "$out"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
for spec in "$@"; do
  platform="${spec%%=*}"
  bin="${spec#*=}"
  [[ "$spec" == *=* && "$platform" =~ ^[a-z0-9]+/[a-z0-9]+$ ]] || fail "bad platform '$spec' (want OS/ARCH=BINARY, e.g. linux/amd64=target/release/nfguard)"
  [[ -f "$bin" && -x "$bin" ]] || fail "$platform: not an executable file: $bin"
  os="${platform%/*}"
  arch="${platform#*/}"
  key="SHA256_$(echo "${os}_${arch}" | tr '[:lower:]' '[:upper:]')"
  [[ "$manifest" == *"@$key@"* ]] || fail "plugins/nfguard.yaml has no platform $platform (no @$key@)"

  archive="kubectl-nfguard_${version}_${os}_${arch}.tar.gz"
  rm -rf "${stage:?}/$platform"
  mkdir -p "$stage/$platform"
  install -m 0755 "$bin" "$stage/$platform/kubectl-nfguard"
  install -m 0644 "$license" "$stage/$platform/LICENSE"
  # Same bytes for the same inputs: fixed order, owner and times; no gzip name or time.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -C "$stage/$platform" -cf - kubectl-nfguard LICENSE | gzip -n > "$out/$archive"
  sum="$(sha256sum "$out/$archive" | cut -d' ' -f1)"
  manifest="${manifest//"@$key@"/"$sum"}"
  echo "$out/$archive $sum"
done

left="$(grep -o '@[A-Z0-9_]*@' <<<"$manifest" | sort -u | tr '\n' ' ' || true)"
[ -z "$left" ] || fail "no binary given for: $left"
printf '%s\n' "$manifest" > "$out/nfguard.yaml"
echo "$out/nfguard.yaml"
