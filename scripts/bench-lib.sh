# shellcheck shell=bash
# Shared by scripts/bench-cluster.sh and scripts/bench-peer.sh (sourced, not
# run): the local cluster in bench mode with hollow nodes, nfguard's webhook
# registered or not, pod creation latencies and their quantiles.
# The caller sets WORK (a scratch directory), GEN (the bench_cluster
# generator) and defines log and die.

# stop_bg VAR: stop the background process whose pid the variable VAR
# holds (gone already is fine) and empty VAR.
stop_bg() {
  local pid=${!1}
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  printf -v "$1" '%s' ""
}

# bench_finish RC LOG WHAT: the exit trap's end: LOG's last lines when RC
# is a failure, then the cluster down and WORK removed unless KEEP_CLUSTER=1;
# exits RC.
bench_finish() {
  local rc=$1
  if [ "$rc" != 0 ] && [ -f "$2" ]; then
    log "$3's last lines:"
    tail -n 30 "$2" >&2
  fi
  if [ "${KEEP_CLUSTER:-}" = 1 ]; then
    log "KEEP_CLUSTER=1: the cluster stays up (e2e/local-cluster.sh down removes it); logs in $WORK"
  else
    e2e/local-cluster.sh down
    rm -rf "$WORK"
  fi
  exit "$rc"
}

# bench_cluster_up: the local cluster in bench mode, nfguard's in-cluster
# controller scaled to 0 (the caller runs its own, or none), the reporters
# on the real nodes only, and the e2e images in the test registry. Exports
# what e2e/local-cluster.sh up prints (KUBECONFIG, NFGUARD_E2E_REGISTRY, ...).
bench_cluster_up() {
  local cluster_env deadline
  cluster_env=$(NFGUARD_E2E_BENCH=1 e2e/local-cluster.sh up) || die "e2e/local-cluster.sh up failed"
  eval "$cluster_env"
  # The reporters run on the real nodes only (e2e/local-cluster.sh's three),
  # with a day's heartbeat so they stay quiet (the hollow nodes' profiles
  # come from the generator).
  kubectl -n nfguard-system scale deployment/nfguard-controller --replicas=0 >&2
  kubectl -n nfguard-system patch daemonset nfguard-reporter --type=strategic -p '
    {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
      {"nodeSelectorTerms": [{"matchExpressions": [{"key": "bench.nfguard.io/hollow", "operator": "DoesNotExist"}]}]}}}}}}}' >&2
  kubectl -n nfguard-system set env daemonset/nfguard-reporter NFGUARD_HEARTBEAT_SECONDS=86400 >&2
  kubectl -n nfguard-system rollout status daemonset/nfguard-reporter --timeout=180s >&2
  deadline=$((SECONDS + 120))
  while [ -n "$(kubectl -n nfguard-system get pods -l app.kubernetes.io/component=controller -o name)" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "the in-cluster controller did not go away in 120 s"
    sleep 1
  done
  e2e/push-images.sh
}

# nfguard_webhook on|off: register nfguard's webhook or not (the first call
# saves its configuration). The API server reads webhook configurations from
# an informer: give it time.
nfguard_webhook() {
  if [ ! -f "$WORK/webhook-configuration.json" ]; then
    kubectl get validatingwebhookconfiguration nfguard -o json |
      jq 'del(.metadata.resourceVersion, .metadata.uid, .metadata.creationTimestamp, .metadata.managedFields, .metadata.generation)' \
        >"$WORK/webhook-configuration.json"
  fi
  if [ "$1" = on ]; then
    kubectl get validatingwebhookconfiguration nfguard >/dev/null 2>&1 ||
      kubectl create -f "$WORK/webhook-configuration.json" >&2
  else
    kubectl delete validatingwebhookconfiguration nfguard --ignore-not-found >&2
  fi
  sleep 5
}

# webhook_replicas: the names of nfguard's running webhook pods.
webhook_replicas() {
  kubectl -n nfguard-system get pods -l app.kubernetes.io/component=webhook --field-selector=status.phase=Running \
    -o jsonpath='{.items[*].metadata.name}'
}

# replica_metrics POD: one webhook replica's /metrics, through the API
# server's pod proxy.
replica_metrics() {
  local port
  port=$(kubectl -n nfguard-system get pod "$1" -o jsonpath='{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}')
  kubectl get --raw "/api/v1/namespaces/nfguard-system/pods/http:$1:${port:-none}/proxy/metrics"
}

# webhook_reviews: "pod reviews" for each of nfguard's webhook replicas
# (its own count).
webhook_reviews() {
  local pods p metrics
  pods=$(webhook_replicas)
  for p in $pods; do
    metrics=$(replica_metrics "$p")
    awk -v p="$p" '/^nfguard_webhook_admission_duration_seconds_count\{/ && /kind="Pod"/ { s += $NF } END { print p, s + 0 }' <<<"$metrics"
  done
}

# warm_every_replica IMAGE: creations of IMAGE until every webhook replica
# has answered one (its image look-up and its first facts index are then
# behind it). The API server calls webhooks over pooled HTTP/1.1
# connections, each pinned to the replica it was dialled to: creations one
# at a time all reach one replica, so these come 32 at once, which opens
# new connections to random replicas.
warm_every_replica() {
  local before after try cold
  before=$(webhook_reviews)
  for try in 1 2 3 4 5; do
    admit "$1" "warm-$try" 64 32 warm.us
    after=$(webhook_reviews)
    cold=$(awk 'FNR == NR { b[$1] = $2; next } $2 <= b[$1] { print $1 }' <(echo "$before") <(echo "$after"))
    [ -n "$cold" ] || return 0
  done
  die "webhook replicas never reached by 5 bursts of 32 creations: $cold"
}

# floor_webhook_start: start the floor of any webhook (the generator's
# allow-all: nfguard's HTTPS stack, judging nothing) beside nfguard's first
# webhook pod, in its network namespace and CPU cgroup, so the API server
# reaches it over the same path and it competes for the CPU as nfguard's
# webhook does. Sets floor_pid and writes $WORK/floor-configuration.json:
# nfguard's configuration (its rules and matchConditions) pointed at it,
# failing closed, so a floor that does not answer fails the creations.
# Call nfguard_webhook first (it saves that configuration).
FLOOR_WEBHOOK=floor.bench.nfguard.io
floor_webhook_start() {
  local pods pod ip p addrs wpid="" cgroups ctrls path ca
  pods=$(webhook_replicas)
  pod=${pods%% *}
  [ -n "$pod" ] || die "no webhook pod is running"
  ip=$(kubectl -n nfguard-system get pod "$pod" -o jsonpath='{.status.podIP}')
  for p in $(pgrep -f "nfguard webhook --listen" || true); do
    addrs=$(nsenter -t "$p" -n ip -o -4 addr show 2>/dev/null || true)
    case "$addrs" in *" $ip/"*) wpid=$p ;; esac
  done
  [ -n "$wpid" ] || die "no webhook process has pod $pod's address $ip"
  nsenter -t "$wpid" -n "$GEN" allow-all --listen "$ip:9443" --ca-out "$WORK/floor-ca.pem" &
  floor_pid=$!
  # cgroup v1: the pod's cpu, cpuacct and cpuset groups; v2: its one group.
  cgroups=$(cat "/proc/$wpid/cgroup")
  while IFS=: read -r _ ctrls path; do
    case "$ctrls" in
      "") if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "$floor_pid" >"/sys/fs/cgroup$path/cgroup.procs"; fi ;;
      *cpu*) echo "$floor_pid" >"/sys/fs/cgroup/$ctrls$path/cgroup.procs" ;;
    esac
  done <<<"$cgroups"
  for _ in $(seq 50); do [ -s "$WORK/floor-ca.pem" ] && break; sleep 0.1; done
  [ -s "$WORK/floor-ca.pem" ] || die "the allow-all webhook did not start"
  ca=$(base64 -w0 <"$WORK/floor-ca.pem")
  jq --arg name "$FLOOR_WEBHOOK" --arg url "https://$ip:9443/validate" --arg ca "$ca" '
    .metadata = {name: "nfguard-bench-floor"} |
    .webhooks |= [.[0] | .name = $name | .clientConfig = {url: $url, caBundle: $ca} | .failurePolicy = "Fail"]' \
    "$WORK/webhook-configuration.json" >"$WORK/floor-configuration.json"
  log "the floor webhook (allow-all, pid $floor_pid) serves https://$ip:9443 beside $pod"
}

# floor_webhook on|off: register the floor webhook or not (as nfguard_webhook).
floor_webhook() {
  if [ "$1" = on ]; then
    kubectl create -f "$WORK/floor-configuration.json" >&2
  else
    kubectl delete validatingwebhookconfiguration nfguard-bench-floor --ignore-not-found >&2
  fi
  sleep 5
}

# webhook_calls NAME: how many reviews the API server has sent webhook NAME.
webhook_calls() {
  local metrics
  metrics=$(kubectl get --raw /metrics)
  awk -v n="name=\"$1\"" '/^apiserver_admission_webhook_admission_duration_seconds_count\{/ && index($0, n) { s += $NF }
    END { print s + 0 }' <<<"$metrics"
}

# admit IMAGE PREFIX PODS CONCURRENCY OUT: create PODS hostNetwork + NET_ADMIN
# pods of IMAGE (as nodes pull it), CONCURRENCY at once; their creation
# latencies (microseconds) are appended to $WORK/OUT.
admit() {
  "$GEN" admission --image "$NFGUARD_E2E_REGISTRY_PULL/$1" --prefix "$2" --pods "$3" \
    --concurrency "$4" --out "$WORK/$5"
}

# webhook_hists OUT: the cumulative bucket counts ("source le count") of
# the API server's calls to nfguard's webhook (source api: transport and
# answer, as the API server times them) and of the webhook's own answers to
# pod reviews (source webhook, every replica summed, read through the API
# server's pod proxy).
webhook_hists() {
  local metrics pods p all=""
  metrics=$(kubectl get --raw /metrics)
  all+=$(awk '/^apiserver_admission_webhook_admission_duration_seconds_bucket\{/ && /validate\.nfguard\.io/ && /operation="CREATE"/ {
    match($0, /le="[^"]+"/); print "api", substr($0, RSTART + 4, RLENGTH - 5), $NF }' <<<"$metrics")$'\n'
  pods=$(webhook_replicas)
  for p in $pods; do
    metrics=$(replica_metrics "$p")
    all+=$(awk '/^nfguard_webhook_admission_duration_seconds_bucket\{/ && /kind="Pod"/ {
      match($0, /le="[^"]+"/); print "webhook", substr($0, RSTART + 4, RLENGTH - 5), $NF }' <<<"$metrics")$'\n'
  done
  awk 'NF == 3 { s[$1 " " $2] += $3 } END { for (k in s) print k, s[k] }' <<<"$all" >"$1"
}

# hists_add SUM BEFORE AFTER: add AFTER - BEFORE (webhook_hists files) to SUM.
hists_add() {
  touch "$1"
  awk 'FILENAME == ARGV[1] { s[$1 " " $2] += $3; next }
       FILENAME == ARGV[2] { s[$1 " " $2] -= $3; next }
       { s[$1 " " $2] += $3 }
       END { for (k in s) print k, s[k] }' "$1" "$2" "$3" >"$1.new"
  mv "$1.new" "$1"
}

# hist_q SUM SOURCE Q: the upper bound (ms) of the bucket holding SOURCE's
# Q-quantile in SUM, and how many answers SUM counts ("<= 2.5 ms of 400").
hist_q() {
  awk -v src="$2" -v q="$3" '$1 == src { le = ($2 == "+Inf") ? 1e30 : $2 + 0; c[le] = $3; if ($3 > n) n = $3 }
    END { m = 0; for (le in c) les[++m] = le + 0
          for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (les[j] < les[i]) { t = les[i]; les[i] = les[j]; les[j] = t }
          for (i = 1; i <= m; i++) if (c[les[i]] >= q * n) { if (les[i] >= 1e30) printf "> last bucket"; else printf "<= %g ms", les[i] * 1000; break }
          printf " of %d", n }' "$1"
}

# pct FILE Q: the Q-quantile of a file of microseconds, in ms.
pct() { sort -n "$1" | awk -v q="$2" '{a[NR] = $1} END { printf "%.1f", a[int((NR - 1) * q + 0.5) + 1] / 1000 }'; }
# ratio A B: A / B to two places.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# hist_le SUM SOURCE Q: the bucket bound (s) hist_q names, as a number.
hist_le() {
  awk -v src="$2" -v q="$3" '$1 == src { le = ($2 == "+Inf") ? 1e30 : $2 + 0; c[le] = $3; if ($3 > n) n = $3 }
    END { m = 0; for (le in c) les[++m] = le + 0
          for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (les[j] < les[i]) { t = les[i]; les[i] = les[j]; les[j] = t }
          for (i = 1; i <= m; i++) if (c[les[i]] >= q * n) { print les[i]; break } }' "$1"
}
# goal VALUE LIMIT: "met" when VALUE <= LIMIT, "missed" otherwise (n/a: missed).
goal() { awk -v v="$1" -v l="$2" 'BEGIN { print (v != "n/a" && v + 0 <= l + 0) ? "met" : "missed" }'; }
# minus A B: A - B (ms) to one place.
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
