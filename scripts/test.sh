#!/usr/bin/env bash
# Installs everything nfguard's tests need on a fresh Debian bookworm machine
# (as root) and runs every test. This is the README's test command and what
# CI (.ci/run) calls.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: run as root (tests create network namespaces and write netfilter rules inside them)" >&2
  exit 2
fi

# Debian packages and the Python test tools (PATH: their virtual environment).
# shellcheck source=scripts/test-setup.sh
source scripts/test-setup.sh

# The test runner in the dev profile: it starts processes and reads their
# output, so optimizing it buys nothing measurable and cost 4.5 more minutes
# (docs/ci.md, "One build of the crate").
command -v cargo-nextest >/dev/null || cargo install --debug --locked cargo-nextest

# Real iptables releases 1.8.7 / 1.8.9 / 1.8.11 / 1.8.13 and nftables releases 0.9.8
# / 1.0.6 / 1.1.3 / sid's from Debian's archive.
export NFGUARD_FIXTURES="${NFGUARD_FIXTURES:-$PWD/target/fixtures}"
scripts/fetch-iptables.sh "$NFGUARD_FIXTURES/iptables"
scripts/fetch-nftables.sh "$NFGUARD_FIXTURES/nftables"

# Privileged tests must run here: they are #[ignore]d for plain `cargo test`
# and run below with --run-ignored all; the install checks' scripts fail
# rather than skip when a tool is missing.
export NFGUARD_REQUIRE_PRIVILEGED=1

# The Go tools the tests need (scripts/go-tools-env.sh: helm, promtool,
# kustomize, krew, actionlint) and Kubernetes itself for the e2e
# (e2e/build-kube.sh), built once from the Go module proxy into
# /var/cache/nfguard-e2e. On a fresh machine that is ~20 min of compiling, so
# it runs beside the cargo build; cached, it takes a second.
command -v go >/dev/null || { echo "scripts/test.sh: the tests need Go (helm, promtool, kustomize, krew, actionlint and Kubernetes are built from Go modules)" >&2; exit 2; }
go_log="$(mktemp)"
go_env="$(mktemp)"
(
  scripts/go-tools-env.sh >"$go_env"
  if [ "${NFGUARD_E2E:-1}" != 0 ]; then e2e/build-kube.sh; fi
) >"$go_log" 2>&1 &
go_pid=$!

cargo build --locked --all-targets

if ! wait "$go_pid"; then
  cat "$go_log" >&2
  echo "scripts/test.sh: building the Go tools failed (output above)" >&2
  exit 2
fi
# NFGUARD_HELM, NFGUARD_PROMTOOL, NFGUARD_KUSTOMIZE, NFGUARD_KREW_TOOLS, NFGUARD_ACTIONLINT.
while IFS= read -r line; do export "${line?}"; done <"$go_env"
grep -h 'built in' "$go_log" || true

# The e2e scenarios on a real cluster built from Kubernetes' sources
# (e2e/local.sh; needs Go and the Go module proxy; the build is cached in
# /var/cache/nfguard-e2e). NFGUARD_E2E=0 skips them, loudly, for quick runs.
e2e_rc=0
if [ "${NFGUARD_E2E:-1}" = 0 ]; then
  echo "skipped: the local-cluster e2e scenarios (NFGUARD_E2E=0)"
else
  # The e2e runs the binary the tests built (the dev profile: dependencies
  # optimized, nfguard's own code not), its debug information stripped for
  # the image: no second build of the crate (a release build cost 12.5 min
  # on a new machine; docs/ci.md, "Build time").
  mkdir -p target/e2e
  objcopy --strip-debug target/debug/nfguard target/e2e/nfguard
  export NFGUARD_E2E_BINARY="$PWD/target/e2e/nfguard" NFGUARD_BIN="$PWD/target/e2e/nfguard"
  # Kept whole so its failure can be repeated last (below): the diagnostics
  # and the test suite's output follow it. A process substitution, not a
  # pipe: a straggler that kept the output open could not hold up the run.
  e2e_log="$(mktemp)"
  e2e/local.sh > >(tee "$e2e_log") 2>&1 || e2e_rc=$?
fi

# Every test, the #[ignore]d privileged ones too (.config/nextest.toml keeps
# out the two that have runners of their own: the reporter benchmark and the
# kind e2e).
test_rc=0
cargo nextest run --locked --no-fail-fast --run-ignored all "$@" || test_rc=$?
if [ "$e2e_rc" != 0 ]; then
  echo "==== the e2e's failure, repeated from its output above:" >&2
  scripts/repeat-failure.sh "$e2e_log" >&2 || true
  echo "scripts/test.sh: the e2e scenarios failed (exit $e2e_rc; output above)" >&2
  exit "$e2e_rc"
fi
exit "$test_rc"
