#!/usr/bin/env bash
# nfguard and Kyverno side by side on one real API server (docs/benchmarks.md,
# "Side by side with Kyverno"; issue #23). Not in CI.
#
#   scripts/bench-peer.sh NODES...        e.g. 1000 5000 (ascending)
#
# Builds Kyverno's admission controller from the Go module proxy
# (tools/kyverno, cached like the other Go tools), brings the local cluster
# up in bench mode (scripts/bench-lib.sh), installs Kyverno's CRDs from its
# module and runs Kyverno out of cluster (its own debug mode, --serverIP) in
# the control plane's network namespace, against the same API server, with
# scripts/bench-peer/kyverno-policy.yaml: the nearest equivalent of
# nfguard's incident check a Kyverno user can write. For each NODES (hollow
# nodes with their NodeNetfilterProfiles, added between the sizes), the same
# hostNetwork + NET_ADMIN pods are created through nfguard's webhook alone,
# Kyverno's alone, then neither, two rounds of each, sequentially and 32 at a
# time; it prints each webhook's added p50/p99 and their ratio, and each
# webhook process's peak RSS (VmHWM). Before measuring it checks that each
# webhook alone denies the incident image (iptables-nft 1.8.7) and that
# neither admits it, so neither side is measured doing nothing.
#
# Needs root and the cluster lock:
#   flock /tmp/nfguard-cluster.lock scripts/bench-peer.sh 1000 5000
# Env: KEEP_CLUSTER=1 leaves the cluster (and Kyverno) up;
# BENCH_PEER_SEQ (200 pods one at a time), BENCH_PEER_CONC (400 pods, 32 at
# a time) per round.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'bench-peer: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
usage() { sed -n '5,6s/^# \{0,1\}//p' "$0" >&2; exit 2; }

[ $# -ge 1 ] || usage
prev=0
for n in "$@"; do
  case "$n" in '' | *[!0-9]*) usage ;; esac
  [ "$n" -gt "$prev" ] || die "NODES must be ascending and above 0"
  prev=$n
done
[ "$(id -u)" = 0 ] || die "run as root (the local cluster needs network namespaces)"
SEQ=${BENCH_PEER_SEQ:-200}
CONC=${BENCH_PEER_CONC:-400}
CP_NET=/run/netns/nfguard-e2e-cp
CP_IP=10.77.0.1
KYVERNO_PORT=9443
INCIDENT=nfguard-e2e/incident:1.8.7-nft
IMAGE=nfguard-e2e/compatible:1.8.11-wrapper

started=$SECONDS
log "building the generator and Kyverno"
cargo build --release --locked --bin nfguard --example bench_cluster >&2
GEN=$PWD/target/release/examples/bench_cluster
KYVERNO=$(scripts/go-tool.sh kyverno)/kyverno
KYVERNO_SRC=$(scripts/go-module-dir.sh kyverno github.com/kyverno/kyverno)
[ -d "$KYVERNO_SRC/config/crds" ] || die "Kyverno's module has no config/crds at $KYVERNO_SRC"
WORK=$(mktemp -d)
kyverno_pid=""

. scripts/bench-lib.sh
stop_kyverno() { stop_bg kyverno_pid; }
finish() {
  local rc=$?
  # KEEP_CLUSTER=1 keeps Kyverno too (its pid is in the log line below).
  if [ "${KEEP_CLUSTER:-}" = 1 ]; then
    log "Kyverno runs as pid ${kyverno_pid:-none}"
  else
    stop_kyverno
  fi
  bench_finish "$rc" "$WORK/kyverno.log" Kyverno
}
trap finish EXIT

bench_cluster_up
log "cluster ready after $((SECONDS - started)) s"

# ---- Kyverno, out of cluster, beside the API server ------------------------------
kubectl apply --server-side -f "$KYVERNO_SRC/config/crds/kyverno" -f "$KYVERNO_SRC/config/crds/policies.kyverno.io" \
  -f "$KYVERNO_SRC/config/crds/reports" -f "$KYVERNO_SRC/config/crds/policyreport" >/dev/null
kubectl wait --for=condition=Established --timeout=120s crd --all >/dev/null
kubectl create namespace kyverno >&2
# Kyverno's configuration (its Helm chart's defaults are resource filters for
# its own and the system's objects; the bench's pods are in neither).
kubectl -n kyverno create configmap kyverno >&2
kubectl -n kyverno create configmap kyverno-metrics >&2
# The API server as the control plane's namespace reaches it.
sed "s#server: .*#server: https://$CP_IP:6443#" "$KUBECONFIG" >"$WORK/kyverno.kubeconfig"
# Defaults but: out of cluster (--serverIP: the webhooks name a URL and the
# serving certificate that address); admission reports off (they are written
# after the answer, but would add API writes under load); metrics on the
# control plane's own address. --allowInsecureRegistry: the test registry
# speaks plain HTTP.
KYVERNO_NAMESPACE=kyverno KYVERNO_SERVICEACCOUNT_NAME=kyverno KYVERNO_DEPLOYMENT=kyverno-admission-controller \
  KYVERNO_POD_NAME=kyverno-bench INIT_CONFIG=kyverno METRICS_CONFIG=kyverno-metrics \
  nsenter --net="$CP_NET" -- "$KYVERNO" --kubeconfig "$WORK/kyverno.kubeconfig" \
  --serverIP "$CP_IP:$KYVERNO_PORT" --webhookServerHost "$CP_IP" --webhookServerPort "$KYVERNO_PORT" \
  --caSecretName kyverno-svc.kyverno.svc.kyverno-tls-ca --tlsSecretName kyverno-svc.kyverno.svc.kyverno-tls-pair \
  --admissionReports=false --allowInsecureRegistry --metricsHost "$CP_IP" --v=1 \
  >"$WORK/kyverno.log" 2>&1 &
kyverno_pid=$!

# kyverno_pods: whether Kyverno's resource webhook intercepts pod creation.
kyverno_pods() {
  local rules
  rules=$(kubectl get validatingwebhookconfiguration kyverno-resource-validating-webhook-cfg -o json 2>/dev/null |
    jq -r '[.webhooks[]?.rules[]?.resources[]?] | index("pods") != null') || return 1
  [ "$rules" = true ]
}
# kyverno_policy on|off: the policy present (Ready, its webhook rules
# registered) or gone (no webhook of Kyverno's takes pods).
kyverno_policy() {
  local deadline=$((SECONDS + 180))
  if [ "$1" = on ]; then
    kubectl apply -f scripts/bench-peer/kyverno-policy.yaml >&2
    until kubectl wait --for=condition=Ready --timeout=5s clusterpolicy/nfguard-peer-old-reader >/dev/null 2>&1 && kyverno_pods; do
      kill -0 "$kyverno_pid" 2>/dev/null || die "Kyverno exited"
      [ "$SECONDS" -lt "$deadline" ] || die "Kyverno's policy was not Ready with its pod webhook in 180 s"
      sleep 1
    done
  else
    kubectl delete clusterpolicy nfguard-peer-old-reader --ignore-not-found >&2
    while kyverno_pods; do
      [ "$SECONDS" -lt "$deadline" ] || die "Kyverno's webhook still takes pods 180 s after its policy went"
      sleep 1
    done
  fi
  sleep 5 # the API server's webhook informer
}
# use nfguard|kyverno|neither: which webhook judges pods.
use() {
  case $1 in
    nfguard) kyverno_policy off; nfguard_webhook on ;;
    kyverno) nfguard_webhook off; kyverno_policy on ;;
    neither) nfguard_webhook off; kyverno_policy off ;;
  esac
}
deadline=$((SECONDS + 300))
until kubectl get validatingwebhookconfiguration kyverno-resource-validating-webhook-cfg >/dev/null 2>&1; do
  kill -0 "$kyverno_pid" 2>/dev/null || die "Kyverno exited"
  [ "$SECONDS" -lt "$deadline" ] || die "Kyverno registered no webhook in 300 s"
  sleep 2
done
log "Kyverno is up after $((SECONDS - started)) s"

# expect_verdict WHO denied|admitted: the incident pod through WHO alone.
expect_verdict() {
  local out rc=0
  out=$(kubectl -n nfguard-bench-admission run "verdict-$1" --image "$NFGUARD_E2E_REGISTRY_PULL/$INCIDENT" \
    --restart=Never --overrides='{"spec": {"hostNetwork": true, "schedulerName": "nfguard-bench-unscheduled",
      "containers": [{"name": "verdict-'"$1"'", "image": "'"$NFGUARD_E2E_REGISTRY_PULL/$INCIDENT"'",
      "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}}' 2>&1) || rc=$?
  kubectl -n nfguard-bench-admission delete pod "verdict-$1" --ignore-not-found --wait=false >/dev/null
  case $2 in
    denied) [ "$rc" != 0 ] || die "$1 alone admitted the incident image $INCIDENT" ;;
    admitted) [ "$rc" = 0 ] || die "with no webhook the incident pod was refused: $out" ;;
  esac
  log "$1: the incident pod was $2${out:+: $(tr '\n' ' ' <<<"$out" | cut -c1-300)}"
}

vmhwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }
# nfguard's webhook processes (its pods' containers run on this machine).
nfguard_webhook_pids() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue # gone meanwhile
    case $cmd in "/usr/local/bin/nfguard webhook "*) echo "${p#/proc/}" ;; esac
  done
  return 0
}

results=""
for NODES in "$@"; do
  t=$SECONDS
  "$GEN" load --nodes "$NODES" --pods-per-node 0 --registry "$NFGUARD_E2E_REGISTRY"
  profiles=$(kubectl get nodenetfilterprofiles -o name | wc -l)
  log "$NODES hollow nodes ($profiles profiles) after $((SECONDS - t)) s"
  "$GEN" admission --image "$NFGUARD_E2E_REGISTRY_PULL/$IMAGE" --prefix ns-check --pods 1 --concurrency 1 \
    --out "$WORK/ns-check.us" # makes the namespace
  use nfguard; expect_verdict nfguard denied
  use kyverno; expect_verdict kyverno denied
  use neither; expect_verdict neither admitted
  for who in nfguard kyverno; do
    use "$who"
    admit "$IMAGE" "warm-$who" 8 1 "warm.us" # caches warm, as in steady state
  done
  for round in 1 2; do
    for who in nfguard kyverno neither; do
      use "$who"
      admit "$IMAGE" "r$round-$who-$NODES-seq" "$SEQ" 1 "$NODES-$who-1.us"
      admit "$IMAGE" "r$round-$who-$NODES-32" "$CONC" 32 "$NODES-$who-32.us"
    done
  done
  nf_rss=0
  for p in $(nfguard_webhook_pids); do
    r=$(vmhwm_kib "$p")
    [ "$r" -gt "$nf_rss" ] && nf_rss=$r
  done
  [ "$nf_rss" -gt 0 ] || die "found no nfguard webhook process (/usr/local/bin/nfguard webhook) to read its RSS"
  ky_rss=$(vmhwm_kib "$kyverno_pid")
  row() { # conc
    local base b99 n50 n99 k50 k99
    base=$(pct "$WORK/$NODES-neither-$1.us" 0.5) b99=$(pct "$WORK/$NODES-neither-$1.us" 0.99)
    n50=$(minus "$(pct "$WORK/$NODES-nfguard-$1.us" 0.5)" "$base") n99=$(minus "$(pct "$WORK/$NODES-nfguard-$1.us" 0.99)" "$b99")
    k50=$(minus "$(pct "$WORK/$NODES-kyverno-$1.us" 0.5)" "$base") k99=$(minus "$(pct "$WORK/$NODES-kyverno-$1.us" 0.99)" "$b99")
    # The added p99 is a difference of two noisy tails (it can come out
    # below 0); the p99s with each webhook are compared whole as well.
    printf '    %-13s  neither p50 %s p99 %s | added by nfguard p50 %s p99 %s | added by Kyverno p50 %s p99 %s | p99 added, nfguard/Kyverno %s | p99 with nfguard / with Kyverno %s\n' \
      "$2" "$base" "$b99" "$n50" "$n99" "$k50" "$k99" "$(ratio "$n99" "$k99")" \
      "$(ratio "$(pct "$WORK/$NODES-nfguard-$1.us" 0.99)" "$(pct "$WORK/$NODES-kyverno-$1.us" 0.99)")"
  }
  results+="
  $NODES hollow nodes (+ the real ones), pod creation through the API server, ms ($((2 * SEQ)) sequential, $((2 * CONC)) at 32 concurrent per webhook):
$(row 1 sequential)
$(row 32 '32 concurrent')
    peak RSS (VmHWM): nfguard's webhook (largest replica) $((nf_rss / 1024)) MiB, Kyverno $((ky_rss / 1024)) MiB
"
done

cat <<EOF

==== nfguard and Kyverno ${KYVERNO_SRC##*@} side by side (load average $(cut -d' ' -f1-3 /proc/loadavg))
$results
EOF
log "done after $((SECONDS - started)) s"
