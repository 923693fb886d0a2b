#!/usr/bin/env bash
# Benchmark: `nfguard inspect node` on a network namespace holding RULES rules
# in nf_tables AND RULES rules in x_tables, against the baseline that
# iptables-wrappers/Calico run to detect the backend
# (`iptables-nft-save; iptables-legacy-save`), measured in the same run.
# Usage (as root): scripts/bench-node.sh [RULES=10000] [ITERATIONS=30]
# Prints the median wall time of each and the ratio (target: <= 0.2).
set -euo pipefail
cd "$(dirname "$0")/.."
RULES=${1:-10000}
ITER=${2:-30}
[ "$(id -u)" = 0 ] || { echo "bench-node.sh: run as root" >&2; exit 2; }
cargo build --release --quiet --bin nfguard
BIN=$PWD/target/release/nfguard
NS="nfg-bench-$$"
cleanup() { ip netns del "$NS" 2>/dev/null || true; rm -f /tmp/nfg-bench-perf.$$; }
trap cleanup EXIT
ip netns add "$NS"

# kube-proxy-shaped rules: RULES/10 service chains of 10 rules each, with
# comments, ports (native in nft) and marks, plus kubelet's marker chains.
gen() {
  local chains=$((RULES / 10))
  echo "*mangle"; echo ":KUBE-IPTABLES-HINT - [0:0]"; echo "COMMIT"
  echo "*filter"
  echo ":INPUT ACCEPT [0:0]"; echo ":FORWARD ACCEPT [0:0]"; echo ":OUTPUT ACCEPT [0:0]"
  for ((c = 0; c < chains; c++)); do echo ":KUBE-SVC-$c - [0:0]"; done
  for ((c = 0; c < chains; c++)); do
    echo "-A INPUT -p tcp -m comment --comment \"svc $c\" --dport $((1000 + c)) -j KUBE-SVC-$c"
    for ((r = 0; r < 9; r++)); do
      echo "-A KUBE-SVC-$c -s 10.$((c % 250)).$r.0/24 -p tcp -m mark --mark 0x$((r + 1))/0xff -m comment --comment \"ep $c/$r\" -j ACCEPT"
    done
  done
  echo "COMMIT"
}
gen | ip netns exec "$NS" iptables-nft-restore
gen | ip netns exec "$NS" iptables-legacy-restore

# Sanity: both backends hold the rules.
nft_rules=$(ip netns exec "$NS" iptables-nft-save 2>/dev/null | grep -c '^-A')
legacy_rules=$(ip netns exec "$NS" iptables-legacy-save | grep -c '^-A')
echo "rules: nft $nft_rules, legacy $legacy_rules"

# Wall time (median) and CPU time (user+sys of the commands and their
# children, median): on a loaded machine the wall clock is mostly waiting for
# a core, so the CPU ratio is the steadier figure; both are printed.
now() { date +%s%N; }
# CPU: perf's task-clock of the command and all its children, in us.
cpu_of() {
  if command -v perf >/dev/null; then
    perf stat -x, -e task-clock -o /tmp/nfg-bench-perf.$$ -- "$@" >/dev/null 2>&1
    awk -F, '/task-clock/ {printf "%d\n", $1 * 1000}' /tmp/nfg-bench-perf.$$
  else
    "$@" >/dev/null 2>&1; echo 0
  fi
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base_wall=(); probe_wall=(); base_cpu=(); probe_cpu=()
for ((i = 0; i < ITER; i++)); do
  # Interleaved, so both see the same machine load.
  t0=$(now)
  ip netns exec "$NS" sh -c 'iptables-nft-save >/dev/null 2>&1; iptables-legacy-save >/dev/null'
  t1=$(now)
  ip netns exec "$NS" "$BIN" inspect node -o json >/dev/null
  t2=$(now)
  base_wall+=($(( (t1 - t0) / 1000 ))); probe_wall+=($(( (t2 - t1) / 1000 )))
  base_cpu+=($(cpu_of ip netns exec "$NS" sh -c 'iptables-nft-save >/dev/null 2>&1; iptables-legacy-save >/dev/null'))
  probe_cpu+=($(cpu_of ip netns exec "$NS" "$BIN" inspect node -o json))
done
m() { printf '%s\n' "$@" | median; }
bw=$(m "${base_wall[@]}"); pw=$(m "${probe_wall[@]}"); bc=$(m "${base_cpu[@]}"); pc=$(m "${probe_cpu[@]}")
echo "baseline (iptables-nft-save; iptables-legacy-save): wall median ${bw} us, cpu median ${bc} us over $ITER runs"
echo "nfguard inspect node -o json:                      wall median ${pw} us, cpu median ${pc} us over $ITER runs"
awk -v p="$pw" -v b="$bw" 'BEGIN { printf "wall ratio: %.3f (target <= 0.2)\n", p / b }'
awk -v p="$pc" -v b="$bc" 'BEGIN { if (b > 0) printf "cpu ratio:  %.3f (target <= 0.2)\n", p / b }'
ip netns exec "$NS" "$BIN" inspect node -o json | jq -c '{activeBackend, minReaderVersion, nft: .backends.nft.rules, legacy: .backends.legacy.rules}'
