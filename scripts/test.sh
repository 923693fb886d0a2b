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

APT_PACKAGES=(
  iptables nftables iproute2 kmod   # the host tools and netns for scenario tests
  docker-registry skopeo umoci      # a real OCI registry on loopback, image tooling
  libclang-dev pkg-config           # build-time needs of -sys crates
  shellcheck jq zstd curl ca-certificates
  python3 python3-venv              # the Python test tools' virtual environment
  time                              # GNU time: a child's own peak RSS in the hostile-image tests
  rpm                               # a real rpmdb.sqlite for the rpm probe test
  # the local Kubernetes cluster of the e2e scenarios (e2e/local-cluster.sh)
  containerd runc containernetworking-plugins conntrack util-linux socat openssl
  busybox-static gcc libc6-dev
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || true
  [[ $status == *'install ok installed'* ]] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest

# Offline manifest validation (scripts/check-install.sh) and the JUnit/SARIF
# schema checks of tests/it/check_ci_*.rs: pinned PyPI packages, in a
# virtual environment of their own (Debian's Python refuses `pip install`
# into the system: PEP 668), first on PATH for every script and test below.
venv="$PWD/target/test-venv"
[ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r scripts/test-requirements.txt
export PATH="$venv/bin:$PATH"

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
  cargo build --release --locked --bin nfguard
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
