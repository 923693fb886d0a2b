#!/usr/bin/env bash
# Prints the directory of a Go module's source, downloaded from the Go module
# proxy into the module cache and checked against the go.sum of the pinning
# module in tools/NAME (its go.mod requires MODULE at one version; nothing is
# built). For files a module ships that the tests read: e.g. the Prometheus
# Operator's CRDs, `scripts/go-module-dir.sh prometheus-operator
# github.com/prometheus-operator/prometheus-operator`.
#   usage: scripts/go-module-dir.sh NAME MODULE
set -euo pipefail
name="${1:?usage: scripts/go-module-dir.sh NAME MODULE}"
module="${2:?usage: scripts/go-module-dir.sh NAME MODULE}"
mod="$(cd "$(dirname "$0")/.." && pwd)/tools/$name"
if [ ! -f "$mod/go.mod" ] || [ ! -f "$mod/go.sum" ]; then echo "go-module-dir.sh: no go.mod and go.sum in $mod" >&2; exit 2; fi
command -v go >/dev/null || { echo "go-module-dir.sh: needs Go (with access to the Go module proxy)" >&2; exit 2; }
# Only a module the pinning go.mod requires: its version and sum come from there.
required=$(awk -v m="$module" '$1 == m || ($1 == "require" && $2 == m) {print "yes"}' "$mod/go.mod")
[ -n "$required" ] || { echo "go-module-dir.sh: $mod/go.mod does not require $module" >&2; exit 2; }
cd "$mod"
json=$(GOFLAGS=-mod=readonly go mod download -json "$module")
dir=$(jq -r '.Dir // empty' <<<"$json")
err=$(jq -r '.Error // empty' <<<"$json")
if [ -n "$err" ] || [ ! -d "$dir" ]; then echo "go-module-dir.sh: $module: ${err:-no directory}" >&2; exit 1; fi
echo "$dir"
