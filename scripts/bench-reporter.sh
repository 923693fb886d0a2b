#!/usr/bin/env bash
# Reporter benchmark: idle resident memory and change-to-status latency of the
# release binary in a fresh network namespace (needs root, the iptables
# fixtures from scripts/fetch-iptables.sh, curl not needed).
# Usage: scripts/bench-reporter.sh   (env: NFGUARD_BENCH_SAMPLES=100,
#        NFGUARD_BENCH_LEGACY_SAMPLES=20, NFGUARD_BENCH_RULES=2000)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin nfguard
export NFGUARD_BENCH_BIN="$PWD/target/release/nfguard"
# The driver only spawns processes and watches a file; a dev build is fine.
cargo test --test reporter_bench -- --ignored --nocapture --test-threads 1
