#!/usr/bin/env bash
# Builds the Go tools a test needs (helm, promtool, ...) from the Go module
# proxy and prints the directory holding them. Each tool set is a module in
# tools/NAME: go.mod names the binaries with `tool` lines and pins every
# module they need (go.sum); an optional tools/NAME/ldflags adds link flags
# (version stamps), an optional tools/NAME/tags build tags (to leave out
# code whose modules the proxy does not serve). The build is cached outside
# the work tree, keyed by those files, so a second run returns at once.
#   usage: scripts/go-tool.sh NAME     e.g. PATH="$(scripts/go-tool.sh helm):$PATH"
set -euo pipefail
name="${1:?usage: scripts/go-tool.sh NAME}"
mod="$(cd "$(dirname "$0")/.." && pwd)/tools/$name"
cache="${NFGUARD_E2E_CACHE:-/var/cache/nfguard-e2e}"
[ -f "$mod/go.mod" ] || { echo "go-tool.sh: no module at $mod" >&2; exit 2; }

ldflags="-s -w"
[ -f "$mod/ldflags" ] && ldflags="$ldflags $(tr '\n' ' ' < "$mod/ldflags")"
tags=""
[ -f "$mod/tags" ] && tags="$(paste -sd, "$mod/tags")"
key="$(cat "$mod/go.mod" "$mod/go.sum" <(echo "$ldflags${tags:+ tags=$tags}") | sha256sum | cut -c1-12)"
out="$cache/tools/$name-$key"
mapfile -t pkgs < <(awk '$1 == "tool" {print $2}' "$mod/go.mod")
[ ${#pkgs[@]} -gt 0 ] || { echo "go-tool.sh: $mod/go.mod names no tool" >&2; exit 2; }

# The binary's name, as `go install` names it: a /vN major-version suffix is skipped.
bin_name() { local b; b="$(basename "$1")"; [[ $b =~ ^v[0-9]+$ ]] && b="$(basename "$(dirname "$1")")"; echo "$b"; }
have_all() { for p in "${pkgs[@]}"; do [ -x "$out/$(bin_name "$p")" ] || return 1; done; }
if have_all; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "go-tool.sh: needs Go (with access to the Go module proxy)" >&2; exit 2; }
rm -rf "$out.tmp"; mkdir -p "$out.tmp"
cd "$mod"
start=$SECONDS
for p in "${pkgs[@]}"; do
  echo "go-tool.sh: building $p" >&2
  GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out.tmp/$(bin_name "$p")" "$p"
done
rm -rf "$out"; mv "$out.tmp" "$out"
echo "go-tool.sh: built in $((SECONDS - start)) s into $out" >&2
echo "$out"
