#!/bin/sh
# Warm-cache HTTPS admission benchmark: `nfguard webhook` vs a trivial rustls
# handler, both driven by wrk (Debian package `wrk`) in the same run.
# Needs: wrk, docker-registry, the iptables fixtures (scripts/fetch-iptables.sh).
# Tunables: BENCH_SECONDS (10), BENCH_CONNECTIONS (16), BENCH_ROUNDS (3).
set -eu
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench-webhook: wrk not found (apt-get install wrk)" >&2; exit 2; }
cargo build --release --bin nfguard
NFGUARD_BIN="$PWD/target/release/nfguard" cargo bench --bench webhook_admission
