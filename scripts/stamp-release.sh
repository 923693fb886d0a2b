#!/usr/bin/env bash
# Makes a checkout install release TAG (vX.Y.Z) by default, as the release
# workflow does before it packages the chart and the manifests:
#   scripts/stamp-release.sh vX.Y.Z [DIR]
# The version lives in one place, Cargo.toml; the release commit sets it (and
# charts/nfguard/Chart.yaml `version`, which a test keeps equal to it). This
# checks TAG against it and then sets the image tag both installs default to:
# the chart's appVersion and manifests/kustomization.yaml's `newTag` (on main
# both say `dev`). DIR defaults to the repository this script is in.
set -euo pipefail
fail() { echo "stamp-release.sh: $*" >&2; exit 1; }
if [ $# -lt 1 ] || [ $# -gt 2 ]; then fail "usage: $0 vX.Y.Z [DIR]"; fi
tag=$1
dir=${2:-$(cd "$(dirname "$0")/.." && pwd)}
[[ "$tag" =~ ^v([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]] || fail "TAG must look like v0.1.0, not '$tag'"
version=${BASH_REMATCH[1]}

field() { # FILE REGEX: the first capture of the first line matching REGEX
  local text line
  text=$(<"$1")
  while IFS= read -r line; do
    if [[ "$line" =~ $2 ]]; then echo "${BASH_REMATCH[1]}"; return 0; fi
  done <<<"$text"
  return 1
}
crate=$(field "$dir/Cargo.toml" '^version = "([^"]+)"') || fail "no version in Cargo.toml"
chart=$(field "$dir/charts/nfguard/Chart.yaml" '^version: ([^[:space:]]+)') || fail "no version in Chart.yaml"
[ "$crate" = "$version" ] || fail "Cargo.toml says $crate, the tag $tag: bump Cargo.toml (and Chart.yaml) in the release commit"
[ "$chart" = "$version" ] || fail "charts/nfguard/Chart.yaml says $chart, Cargo.toml $crate: they must agree"

sed -i -E "s/^appVersion: .*/appVersion: \"$tag\"/" "$dir/charts/nfguard/Chart.yaml"
sed -i -E "s/^([[:space:]]+newTag: ).*/\1$tag/" "$dir/manifests/kustomization.yaml"
app=$(field "$dir/charts/nfguard/Chart.yaml" '^appVersion: "([^"]+)"') || true
tagged=$(field "$dir/manifests/kustomization.yaml" '^[[:space:]]+newTag: (.+)$') || true
if [ "$app" != "$tag" ] || [ "$tagged" != "$tag" ]; then fail "stamping failed (appVersion '$app', newTag '$tagged')"; fi
echo "stamp-release.sh: $dir installs ghcr.io/nfguard/nfguard:$tag by default" >&2
