#!/usr/bin/env bash
# The nfguard binary of an earlier commit, for e2e/upgrade.sh: built once from
# COMMIT's tree (git archive: no worktree entry in a repository other
# checkouts share) and cached in $NFGUARD_E2E_CACHE/nfguard-<commit>/nfguard
# (rebuilt only when missing). Built as the tests build the current one (the
# dev profile: dependencies optimized, nfguard's own code not; its debug
# information stripped for the image), starting from a copy of this
# checkout's built dependencies in target/debug, so only what the commit
# changed compiles. Prints the binary's path on stdout.
#   e2e/build-old-nfguard.sh COMMIT
# A clone without COMMIT (a shallow one) fails with what to fetch: the
# upgrade test never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CACHE=${NFGUARD_E2E_CACHE:-/var/cache/nfguard-e2e}

log() { printf 'build-old-nfguard: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[ $# = 1 ] || die "usage: $0 COMMIT"
commit=$(git rev-parse --verify --quiet "$1^{commit}") ||
  die "commit $1 is not in this clone ($(git rev-parse --is-shallow-repository 2>/dev/null | sed 's/true/a shallow clone/; s/false/not shallow/')): fetch it, e.g. git fetch --unshallow origin, or git fetch origin $1"
out="$CACHE/nfguard-$commit"
if [ -x "$out/nfguard" ]; then
  log "cached: $out/nfguard"
  echo "$out/nfguard"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
git -C "$REPO" archive "$commit" | tar -x -C "$work/src"
# A target directory of its own, seeded from ours: the old build never
# overwrites this checkout's binaries. Only the dependencies' artefacts are
# copied (libraries, dep-info, build scripts' output, fingerprints), not
# the test executables beside them.
mkdir -p "$work/target/debug/deps"
if [ -d target/debug/deps ]; then
  find target/debug/deps -maxdepth 1 -type f \( -name '*.rlib' -o -name '*.rmeta' -o -name '*.so' -o -name '*.d' \) \
    -exec cp -p -t "$work/target/debug/deps/" {} +
  for d in build .fingerprint; do
    [ ! -d "target/debug/$d" ] || cp -a "target/debug/$d" "$work/target/debug/$d"
  done
fi
start=$SECONDS
(cd "$work/src" && CARGO_TARGET_DIR="$work/target" CARGO_INCREMENTAL=0 \
  cargo build --locked --bin nfguard) >&2
mkdir -p "$out"
objcopy --strip-debug "$work/target/debug/nfguard" "$out/nfguard.tmp"
mv "$out/nfguard.tmp" "$out/nfguard"
log "built nfguard at ${commit:0:7} in $((SECONDS - start)) s: $out/nfguard"
echo "$out/nfguard"
