# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 16: the reporter's blast radius: only the probed host paths, read-only; /metrics for allowed tokens only; control-plane nodes by opt-in.
#
# the reporter's blast radius: it sees only the host directories it
# probes, read-only; its /metrics answers only a token for its own audience
# allowed `get /metrics`, from anywhere, over a certificate nfguard's
# signer issued for its node only; its probes' port says "ok" and nothing else; control-plane
# nodes get a reporter only by opt-in
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - node_exec "$node" rm -f "/proc/$pid/root/host/usr/.nfguard-e2e-write"
#   - namespace e2e-s16 (scenario_ns)
#   - kubectl delete clusterrolebinding e2e-s16-scraper --ignore-not-found
#   - rm -f "$kc" (the scraper's token kubeconfig)
#   - rm -f "$ca" (the published CA)
#   - kubectl delete csr e2e-s16-other-node e2e-s16-not-reporter --ignore-not-found
#   - s16_untaint
#   - s16_opt_out

SCENARIO_TITLE="the reporter's blast radius: only the probed host paths, read-only; /metrics for allowed tokens only; control-plane nodes by opt-in"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
# kind: no live Prometheus, so the alert hook says skip (as in scenario 6).
SCENARIO_MAY_SKIP_ON="kind"
SCENARIO_RUN=s16_reporter_blast_radius

# The reporter sees only the host directories it probes, read-only; its
# /metrics answers only a token allowed `get /metrics`, from anywhere; its
# probes' port says "ok" and nothing else; control-plane nodes get a reporter
# only by opt-in.
S16_MOUNTS="/host/bin /host/etc/alternatives /host/sbin /host/usr"
S16_CP_TAINT="node-role.kubernetes.io/control-plane"
S16_TAINTED=""
# What the reporter requires of a scraper's token (--metrics-audience default).
S16_AUDIENCE=nfguard-reporter-metrics

s16_pod_on() { # NODE: the reporter pod there (empty: none)
  kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter \
    --field-selector "spec.nodeName=$1" -o jsonpath='{.items[*].metadata.name}' 2>/dev/null || true
}

s16_mounts() {
  local node=${NODES[0]} pod pid info mp opts line seen="" bad="" listing rro top out stored minor
  pod=$(s16_pod_on "$node")
  [ -n "$pod" ] || fail "no reporter pod on $node"
  pid=$(reporter_pid "$node") || fail "no reporter process for $node on the node"
  info=$(node_exec "$node" cat "/proc/$pid/mountinfo") || fail "cannot read /proc/$pid/mountinfo on $node"
  while read -r line; do
    # mountinfo: id parent dev root MOUNTPOINT OPTIONS ...
    read -r _ _ _ _ mp opts _ <<<"$line"
    case "$mp" in /host | /host/*) ;; *) continue ;; esac
    seen+="$mp $opts"$'\n'
    [[ ",$opts," == *,ro,* ]] || bad+="$mp ($opts) "
  done <<<"$info"
  say "mounts under /host of reporter $pod (pid $pid on $node):"
  show <<<"${seen%$'\n'}"
  [ -z "$bad" ] || fail "writable mounts under /host: $bad"
  top=$(awk 'NF {print $1}' <<<"$seen" | { grep -vE '^/host/(usr|bin|sbin|etc/alternatives)/' || true; } |
    LC_ALL=C sort | tr '\n' ' ')
  [ "$top" = "$S16_MOUNTS " ] || fail "the host mounts are '$top', not '$S16_MOUNTS' (and what lies below them)"
  ok "only $S16_MOUNTS are mounted from the host, every mount under /host read-only"
  listing=$(node_exec "$node" ls -A "/proc/$pid/root/host" | tr '\n' ' ')
  [ "$listing" = "bin etc sbin usr " ] || fail "the reporter's /host holds '$listing'"
  listing=$(node_exec "$node" ls -A "/proc/$pid/root/host/etc" | tr '\n' ' ')
  [ "$listing" = "alternatives " ] || fail "the reporter's /host/etc holds '$listing' (admin.conf, kubelet credentials?)"
  ok "the reporter's /host holds bin etc sbin usr; /host/etc only alternatives"
  # Even root on the node, through the reporter's own view, cannot write there.
  defer node_exec "$node" rm -f "/proc/$pid/root/host/usr/.nfguard-e2e-write"
  if out=$(node_exec "$node" touch "/proc/$pid/root/host/usr/.nfguard-e2e-write" 2>&1); then
    fail "a file could be created in the reporter's /host/usr"
  fi
  [[ "$out" == *"Read-only file system"* ]] || fail "writing to /host/usr failed otherwise than read-only: $out"
  ok "writing through the reporter's /host/usr: $out"
  # recursiveReadOnly is beta (served by default) from 1.31; a 1.30 API
  # server without the RecursiveReadOnlyMounts gate drops the field, and the
  # mountinfo check above is then the whole proof.
  stored=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.spec.containers[0].volumeMounts[*].recursiveReadOnly}')
  if [ -z "$stored" ]; then
    minor=$(kubectl get --raw /version | jq -r .minor)
    [ "${minor%%[!0-9]*}" -lt 31 ] ||
      fail "the API server (minor $minor) dropped recursiveReadOnly from reporter $pod's mounts"
    ok "the API server (1.$minor) does not serve recursiveReadOnly: every mount under /host is read-only (mountinfo above), none recursively by request"
  else
    rro=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{range .status.containerStatuses[0].volumeMounts[*]}{.mountPath}={.recursiveReadOnly}{" "}{end}')
    say "recursiveReadOnly as the kubelet reports it: $rro"
    for mp in $S16_MOUNTS; do
      [[ " $rro" == *" $mp=Enabled "* || " $rro" == *" $mp=Disabled "* ]] ||
        fail "the kubelet reports no recursiveReadOnly for $mp: $rro"
    done
    ok "recursiveReadOnly IfPossible resolved for every host mount (Enabled where the runtime supports it)"
  fi
  [ -n "$(nnp "$node" '{.status.iptables.version}')" ] || fail "$node's profile lost its iptables version"
  [ -n "$(nnp "$node" '{.status.activeBackend}')" ] || fail "$node's profile has no activeBackend"
  ok "$node's profile still has the host's iptables $(nnp "$node" '{.status.iptables.version}') and backend $(nnp "$node" '{.status.activeBackend}')"
}

s16_curl() { # FROM_NODE URL [CURL ARGS...]: "CODE BODY..." (CODE 000: no HTTP answer)
  local from=$1 url=$2 out
  shift 2
  out=$(node_exec "$from" curl -sk --max-time 10 -o - -w '\n%{http_code}' "$@" "$url" 2>/dev/null) || true
  printf '%s %s' "${out##*$'\n'}" "${out%$'\n'*}"
}

s16_metrics() {
  local a=${NODES[0]} b=${NODES[1]} ip pod port hport url r reader nobody api_reader kc out
  pod=$(s16_pod_on "$a")
  ip=$(get node "$a" '{.status.addresses[?(@.type=="InternalIP")].address}')
  port=$(get pod "$pod" '{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}' -n "$NS")
  hport=$(get pod "$pod" '{.spec.containers[0].ports[?(@.name=="health")].containerPort}' -n "$NS")
  if [ -z "$ip" ] || [ -z "$port" ] || [ -z "$hport" ]; then
    fail "reporter $pod on $a: address '$ip', ports '$port' '$hport'"
  fi
  url="https://$ip:$port/metrics"
  r=$(s16_curl "$b" "$url")
  [[ "$r" == "401 unauthorized"* ]] || fail "$url from node $b without a token: '$r', not 401"
  ok "from node $b, $url without a token: ${r%%$'\n'*}"
  r=$(s16_curl "$b" "http://$ip:$port/metrics")
  [[ "$r" != 200* ]] || fail "plain HTTP on $ip:$port answered 200"
  ok "plain HTTP on $ip:$port: no metrics (code ${r%% *})"
  r=$(s16_curl "$b" "$url" -H "Authorization: Bearer not-a-token")
  [[ "$r" == "401 "* ]] || fail "a made-up token: '$r', not 401"
  ok "a made-up token: 401"

  scenario_ns e2e-s16
  kubectl -n e2e-s16 create serviceaccount nobody >/dev/null
  kubectl -n e2e-s16 create serviceaccount scraper >/dev/null
  defer kubectl delete clusterrolebinding e2e-s16-scraper --ignore-not-found
  kubectl create clusterrolebinding e2e-s16-scraper --clusterrole nfguard-metrics-reader \
    --serviceaccount e2e-s16:scraper >/dev/null
  nobody=$(kubectl -n e2e-s16 create token nobody --audience "$S16_AUDIENCE" --duration=10m)
  reader=$(kubectl -n e2e-s16 create token scraper --audience "$S16_AUDIENCE" --duration=10m)
  api_reader=$(kubectl -n e2e-s16 create token scraper --duration=10m)
  r=$(s16_curl "$b" "$url" -H "Authorization: Bearer $nobody")
  [[ "$r" == "403 forbidden"* ]] || fail "a ServiceAccount without nfguard-metrics-reader: '$r', not 403"
  ok "a ServiceAccount without nfguard-metrics-reader: 403"
  r=$(s16_curl "$b" "$url" -H "Authorization: Bearer $reader")
  [[ "$r" == 200* && "$r" == *"nfguard_reporter_status_writes_total"* ]] ||
    fail "the scraper bound to nfguard-metrics-reader: '${r:0:300}'"
  ok "a ServiceAccount bound to nfguard-metrics-reader scrapes from node $b with a token for audience $S16_AUDIENCE: $(grep '^nfguard_reporter_status_writes_total' <<<"$r" || true)"
  # The same ServiceAccount's token for the API server: valid, allowed, and
  # still refused (a node that receives it could replay it there).
  kc=$(mktemp)
  defer rm -f "$kc"
  token_kubeconfig "$kc" "$api_reader"
  out=$(kubectl --kubeconfig "$kc" get --raw /metrics 2>&1 >/dev/null) ||
    fail "the scraper's API-server token cannot get /metrics from the API server itself: ${out:0:300}"
  r=$(s16_curl "$b" "$url" -H "Authorization: Bearer $api_reader")
  [[ "$r" == "401 unauthorized"* ]] || fail "the scraper's token for the API server's audience: '${r:0:200}', not 401"
  ok "the same ServiceAccount's token for the API server (which accepts it for its own /metrics): 401 here"
  # And the reporter's audience token is worth nothing at the API server.
  token_kubeconfig "$kc" "$reader"
  if out=$(kubectl --kubeconfig "$kc" get --raw /metrics 2>&1); then
    fail "the API server accepted a token for audience $S16_AUDIENCE"
  fi
  [[ "$out" == *Unauthorized* ]] || fail "the API server refused the $S16_AUDIENCE token otherwise than Unauthorized: ${out:0:200}"
  ok "the API server refuses the token for audience $S16_AUDIENCE: $out"

  r=$(s16_curl "$b" "http://$ip:$hport/healthz")
  [ "$r" = "200 ok" ] || fail "the health port's /healthz: '$r'"
  r=$(s16_curl "$b" "http://$ip:$hport/readyz")
  [ "$r" = "200 ok" ] || fail "the health port's /readyz: '$r'"
  r=$(s16_curl "$b" "http://$ip:$hport/metrics")
  [[ "$r" == 404* ]] || fail "the health port serves /metrics: '${r:0:200}'"
  ok "the health port $hport answers /healthz and /readyz with 'ok' only, no /metrics"
}

# s16_csr NAME KUBECONFIG IP: a request for nfguard's signer, for IP, made
# with KUBECONFIG's identity (a P-256 key made here and thrown away).
s16_csr() {
  local name=$1 kc=$2 ip=$3 pem key
  key=$(mktemp)
  pem=$(openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$key" \
    -subj "/CN=e2e-s16" -addext "subjectAltName=IP:$ip" 2>/dev/null) || fail "openssl could not make a request"
  rm -f "$key"
  kubectl --kubeconfig "$kc" create -f - >/dev/null <<YAML
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: $name, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  signerName: nfguard.io/reporter-metrics
  request: $(base64 -w0 <<<"$pem")
  usages: [digital signature, server auth]
YAML
}
s16_csr_answer() { # NAME: "TYPE REASON: MESSAGE" of its first condition
  local out
  out=$(get csr "$1" '{.status.conditions[0].type} {.status.conditions[0].reason}: {.status.conditions[0].message}')
  WHY="CSR $1: '$out'"
  [[ "$out" == Approved* || "$out" == Denied* || "$out" == Failed* ]]
}

# Each reporter serves a certificate nfguard's signer issued for its node's
# addresses; scrapers verify it with the published CA. The signer refuses
# a reporter's request for another node's address and anyone else's.
s16_certificate() {
  local a=${NODES[0]} b=${NODES[1]} ip ip_b pod port url ca r reader kc name answer rc
  pod=$(s16_pod_on "$a")
  ip=$(get node "$a" '{.status.addresses[?(@.type=="InternalIP")].address}')
  ip_b=$(get node "$b" '{.status.addresses[?(@.type=="InternalIP")].address}')
  port=$(get pod "$pod" '{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}' -n "$NS")
  url="https://$ip:$port/metrics"
  ca=$(mktemp)
  defer rm -f "$ca"
  reporter_ca "$ca"
  reader=$(kubectl -n e2e-s16 create token scraper --audience "$S16_AUDIENCE" --duration=10m)
  r=$(node_exec "$b" curl -s --max-time 10 --cacert "$ca" -o /dev/null -w '%{http_code}' \
    -H "Authorization: Bearer $reader" "$url" 2>&1) || true
  [ "$r" = 200 ] || fail "verifying reporter $pod's certificate ($url) with the CA of ConfigMap nfguard-reporter-metrics-ca: '$r'"
  ok "from node $b, $url verified against the CA the controller publishes (no -k): 200"
  # The same certificate does not pass for another node's address.
  r=$(node_exec "$b" curl -s --max-time 10 --cacert "$ca" -o /dev/null -w '%{http_code}' \
    --connect-to "$ip_b:$port:$ip:$port" "https://$ip_b:$port/metrics" 2>&1) && rc=0 || rc=$?
  [ "$rc" = 60 ] || fail "reporter $pod's certificate presented as $ip_b's: curl exit $rc ('$r'), not 60 (certificate refused)"
  ok "its certificate presented for $b's address $ip_b is refused by a verifying client (curl exit 60)"
  r=$(kubectl get csr -l app.kubernetes.io/component=reporter \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[0].type} {.spec.username}{"\n"}{end}')
  show <<<"$r"
  grep -q " Approved system:serviceaccount:$NS:nfguard-reporter\$" <<<"$r" || fail "no reporter certificate request approved"

  # A reporter's own token asking for another node's address: denied.
  reporter_kubeconfig "$a"
  kc=${REPORTER%% *}
  name=e2e-s16-other-node
  defer kubectl delete csr "$name" --ignore-not-found
  s16_csr "$name" "$kc" "$ip_b"
  wait_for 30 "nfguard's signer to answer $name" s16_csr_answer "$name"
  answer=$(get csr "$name" '{.status.conditions[0].type} {.status.conditions[0].reason}: {.status.conditions[0].message}')
  [[ "$answer" == "Denied NotTheNodes: $ip_b is not an address of node $a" ]] ||
    fail "the reporter on $a asking for $b's address $ip_b: '$answer'"
  [ -z "$(get csr "$name" '{.status.certificate}')" ] || fail "CSR $name was signed"
  ok "the reporter on $a (its own pod-bound token) asking for $b's address: $answer; nothing signed"
  # Someone else (the e2e's admin) asking for a reporter's address: denied.
  name=e2e-s16-not-reporter
  defer kubectl delete csr "$name" --ignore-not-found
  kc=$(mktemp)
  defer rm -f "$kc"
  kubectl config view --raw --minify >"$kc"
  s16_csr "$name" "$kc" "$ip"
  wait_for 30 "nfguard's signer to answer $name" s16_csr_answer "$name"
  answer=$(get csr "$name" '{.status.conditions[0].type} {.status.conditions[0].reason}')
  [ "$answer" = "Denied NotTheReporter" ] || fail "the admin asking for $a's address: '$answer'"
  ok "another identity asking for $a's address: $answer"
  expect_alert firing NfguardCertificateRequestsDenied outcome=denied
}

s16_no_pod_on() { # NODE
  [ -z "$(s16_pod_on "$1")" ] || { WHY="reporter $(s16_pod_on "$1") on $1"; return 1; }
}
s16_ready_on() { # NODE
  local pod
  pod=$(s16_pod_on "$1")
  if [ -z "$pod" ] || [ "$(get pod "$pod" '{.status.containerStatuses[0].ready}' -n "$NS")" != true ]; then
    WHY="reporter on $1: '${pod}' not ready"
    return 1
  fi
}
s16_desired() { get daemonset nfguard-reporter '{.status.desiredNumberScheduled}' -n "$NS"; }
s16_desired_is() { # N
  [ "$(s16_desired)" = "$1" ] || { WHY="desired $(s16_desired)"; return 1; }
}

s16_untaint() {
  [ -n "$S16_TAINTED" ] || return 0
  kubectl taint nodes "$S16_TAINTED" "$S16_CP_TAINT:NoSchedule-" >/dev/null 2>&1 || true
  S16_TAINTED=""
}

s16_control_plane() {
  local b=${NODES[1]} want=${#NODES[@]} pod i n
  for n in "${CP_NODES[@]}"; do
    s16_no_pod_on "$n" || fail "control-plane node $n runs a reporter without the opt-in: $WHY"
    ok "control-plane node $n (tainted by the cluster): no reporter"
  done
  [ -z "$(get node "$b" "{.spec.taints[?(@.key==\"$S16_CP_TAINT\")].effect}")" ] ||
    fail "$b already carries $S16_CP_TAINT"
  kubectl taint nodes "$b" "$S16_CP_TAINT=:NoSchedule" >/dev/null
  S16_TAINTED=$b
  defer s16_untaint
  # The opt-in, as the chart's reporter.controlPlaneNodes renders it.
  defer s16_opt_out
  pod=$(s16_pod_on "$b")
  # NoSchedule does not evict a running pod: the DaemonSet no longer places one.
  deleted_pod "$pod"
  kubectl -n "$NS" delete pod "$pod" --wait=true >/dev/null
  wait_for 60 "the reporter DaemonSet to want $((want - 1)) pods" s16_desired_is "$((want - 1))"
  for i in 1 2 3 4 5; do
    s16_no_pod_on "$b" || fail "a reporter came back on control-plane-tainted $b: $WHY"
    sleep 2
  done
  ok "$b tainted $S16_CP_TAINT:NoSchedule: its reporter went and none came back (desired $(s16_desired) of $want nodes)"
  kubectl -n "$NS" patch daemonset nfguard-reporter --type=json -p "[{\"op\":\"add\",\"path\":\"/spec/template/spec/tolerations/-\",\"value\":{\"key\":\"$S16_CP_TAINT\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}}]" >/dev/null
  wait_for 120 "a ready reporter on $b after the opt-in" s16_ready_on "$b"
  ok "opted in (a toleration for $S16_CP_TAINT): $b has reporter $(s16_pod_on "$b") again"
  s16_untaint
  s16_opt_out
  kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=240s >/dev/null
  ok "taint and opt-in undone; the reporter DaemonSet rolled back"
}

s16_opt_out() { # removes the control-plane toleration again (if there)
  local list i=0 t
  list=$(get daemonset nfguard-reporter '{range .spec.template.spec.tolerations[*]}{.key}{"\n"}{end}' -n "$NS")
  while IFS= read -r t; do
    if [ "$t" = "$S16_CP_TAINT" ]; then
      kubectl -n "$NS" patch daemonset nfguard-reporter --type=json \
        -p "[{\"op\":\"remove\",\"path\":\"/spec/template/spec/tolerations/$i\"}]" >/dev/null
      return 0
    fi
    i=$((i + 1))
  done <<<"$list"
}

s16_reporter_blast_radius() {
  s16_mounts
  s16_metrics
  s16_certificate
  s16_control_plane
}
