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
  rpm                               # a real rpmdb.sqlite for the rpm probe test
  # the local Kubernetes cluster of the e2e scenarios (e2e/local-cluster.sh)
  containerd runc containernetworking-plugins conntrack util-linux socat openssl
  busybox-static gcc libc6-dev
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest

# Offline manifest validation (scripts/check-install.sh) and the JUnit/SARIF
# schema checks of tests/check_ci_*.rs: pinned PyPI packages.
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  kubernetes-validate==1.37.0 jsonschema==4.26.0 PyYAML==6.0.3 common-expression-language==0.10.0 \
  xmlschema==4.3.2 elementpath==5.1.4

# helm for the chart's checks (tests/install_helm.rs) and the e2e's Helm
# install: built once from the Go module proxy (scripts/go-tool.sh; needs Go).
NFGUARD_HELM="$(scripts/go-tool.sh helm)/helm"
export NFGUARD_HELM

# promtool and kustomize for tests/monitoring.rs (alert rules, dashboard,
# monitoring/ kustomization): built once from the Go module proxy.
NFGUARD_PROMTOOL="$(scripts/go-tool.sh promtool)/promtool"
NFGUARD_KUSTOMIZE="$(scripts/go-tool.sh kustomize)/kustomize"
export NFGUARD_PROMTOOL NFGUARD_KUSTOMIZE

# Real iptables releases 1.8.7 / 1.8.9 / 1.8.11 from Debian's archive.
export NFGUARD_FIXTURES="${NFGUARD_FIXTURES:-$PWD/target/fixtures}"
scripts/fetch-iptables.sh "$NFGUARD_FIXTURES/iptables"

# Privileged tests must run here, never skip silently.
export NFGUARD_REQUIRE_PRIVILEGED=1

# krew's manifest validator and installer for tests/plugin_krew.rs.
NFGUARD_KREW_TOOLS="$(scripts/go-tool.sh krew)"
export NFGUARD_KREW_TOOLS

cargo build --locked --all-targets

# The e2e scenarios on a real cluster built from Kubernetes' sources
# (e2e/local.sh; needs Go and the Go module proxy; the build is cached in
# /var/cache/nfguard-e2e). NFGUARD_E2E=0 skips them, loudly, for quick runs.
e2e_rc=0
if [ "${NFGUARD_E2E:-1}" = 0 ]; then
  echo "skipped: the local-cluster e2e scenarios (NFGUARD_E2E=0)"
else
  command -v go >/dev/null || { echo "scripts/test.sh: the e2e needs Go (Kubernetes is built from its Go modules)" >&2; exit 2; }
  cargo build --release --locked --bin nfguard
  e2e/local.sh || e2e_rc=$?
fi

test_rc=0
cargo nextest run --locked --no-fail-fast "$@" || test_rc=$?
if [ "$e2e_rc" != 0 ]; then
  echo "scripts/test.sh: the e2e scenarios failed (exit $e2e_rc; output above)" >&2
  exit "$e2e_rc"
fi
exit "$test_rc"
