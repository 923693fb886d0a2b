# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 26: the nft skew incident for real: trixie's nft 1.1.3 denied at admission naming kube-proxy's nft 1.0.6; let through, its type set makes the node's nft and kube-proxy's sync segfault and a new Service unreachable; NftSetsCrashHostNft within seconds; recovery.
#
# (local provider) the nft skew incident for real on that node, whose
# kube-proxy (nftables mode, on the host) runs the node's unfixed nft
# 1.0.6: the profile says the host's nft crashes on new set userdata; a
# hostNetwork + NET_ADMIN pod bundling trixie's nft 1.1.3 is denied at
# admission as [NftNewWriterOldReader] naming kube-proxy's nft; the
# same pod where a policy lets nfguard.io/exempt count creates a `type`
# set in the node's netns: the node's nft list ruleset exits 139,
# kube-proxy's sync segfaults (its log), a Service created afterwards
# does not answer; NftSetsCrashHostNft (critical) and Healthy=False
# within seconds; the pod's nft deletes the set and everything recovers
# (e2e/scenarios/26-nft-skew-incident.sh)
#
# Runs on: local. Needs: nftables-node.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$S26_NS" (scenario_ns)
#   - kubectl delete netfilterpolicy "$S26_POLICY" --ignore-not-found
#   - namespace "$S26_EXEMPT_NS" (scenario_ns)
#   - kubectl -n "$S26_NS" delete pod "$S26_POD" --ignore-not-found --grace-period=0 --force --wait=false
#   - kubectl -n "$S26_EXEMPT_NS" delete pod "$S26_POD" --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
#   - s26_drop_set

SCENARIO_TITLE="the nft skew incident for real: trixie's nft 1.1.3 denied at admission naming kube-proxy's nft 1.0.6; let through, its type set makes the node's nft and kube-proxy's sync segfault and a new Service unreachable; NftSetsCrashHostNft within seconds; recovery"
SCENARIO_PROVIDERS="local"
SCENARIO_NEEDS="nftables-node"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s26_nft_skew

# the nft
# skew incident of 2026 for real, on the node whose kube-proxy runs in
# nftables mode as a host process through the node's own `nft`
# (NFGUARD_E2E_NFTABLES_NODE; local: e2e-nftables, Debian bookworm's
# nftables 1.0.6-2+deb12u2, unfixed). docs/nft-skew.md says what nfguard does.
#
# The writer: nfguard-e2e/nft-writer:1.1.3, Debian trixie's nftables 1.1.3
# (libnftables1 1.1.3-1 writes a "key typeof" record on every `type` set),
# hostNetwork + NET_ADMIN, pinned to the node; the same pod manifest, with
# the annotation nfguard.io/exempt, in two namespaces:
#   - nfguard-e2e-s26: only the installed default policy selects it (action
#     Deny, no exemptionNamespaceSelector), so the annotation is ignored:
#     with nfguard's gate, the pod is denied at admission as
#     [NftNewWriterOldReader], naming kube-proxy's nft on the node;
#   - nfguard-e2e-s26-exempt: the scenario's NetfilterPolicy nfguard-e2e-s26
#     (action Deny as well) lets nfguard.io/exempt count there
#     (exemptionNamespaceSelector, as scenarios 6 and 18 do): nfguard lets the
#     pod through with an [Exempt] warning, i.e. without the gate. Nothing of
#     the installed policy is changed.
# The exempted pod creates a `type ifname` set in the node's network
# namespace with its own nft; then the scenario shows the break (the node's
# `nft list ruleset` exits 139; kube-proxy's sync segfaults, its log says so;
# a ClusterIP Service created after the set is never programmed and does not
# answer from the node, while one programmed before still does), that the
# reporter raises NftSetsCrashHostNft within seconds and Healthy turns False,
# and the recovery (the pod's own nft deletes the table, the pod goes,
# kube-proxy syncs, the Service answers, the hazard goes). The set is
# removed by the clean-up also on failure (through the pod, or through the
# same Debian release run from the fixtures inside the node: the node's own
# 1.0.6 cannot delete it, it segfaults too). Local provider only: the
# kube-proxy of a kind node is a pod with its image's nft, and its log is
# the pod's.

S26_IMAGE=$REGISTRY/nfguard-e2e/nft-writer:1.1.3
S26_NS=nfguard-e2e-s26
S26_EXEMPT_NS=nfguard-e2e-s26-exempt
S26_POLICY=nfguard-e2e-s26
S26_REASON="e2e: reproduce the nft skew incident"
S26_POD=nft-writer
S26_KP_LOG=""
S26_KP_FROM=0
S26_BODY="nfguard-e2e-s26: served on the node whose kube-proxy runs nftables"
# The host reader, as the judgement calls it (src/compat/evaluate/nft.rs).
S26_READER="kube-proxy (nftables mode, on the host) through the host's nft 1.0.6"

# The writer pod (sleeping; the scenario execs its nft).
s26_pod() { # NAME
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: {nfguard.io/exempt: "$S26_REASON"}
spec:
  nodeName: $NFT_NODE
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
  containers:
    - name: nft-writer
      image: $S26_IMAGE
      command: ["sleep", "infinity"]
      securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}

# The same release from the fixtures (scripts/fetch-nftables.sh), run in the
# node's namespaces with its own loader: the clean-up's way to the set when
# the pod is gone.
s26_fixture_nft() {
  node_exec "$NFT_NODE" "${NFGUARD_FIXTURES:-$REPO/target/fixtures}/nftables/1.1.3/run" "$@"
}

# The node's own nft; its exit status in S26_RC, its output in S26_OUT.
S26_RC=0
S26_OUT=""
s26_node_nft() {
  S26_RC=0
  S26_OUT=$(node_exec "$NFT_NODE" nft "$@" 2>&1) || S26_RC=$?
}

# Clean-up: table ip t gone from the node (idempotent).
s26_drop_set() {
  local tables
  tables=$(s26_fixture_nft list tables 2>&1) || { say "cannot list $NFT_NODE's tables with nft 1.1.3: $tables"; return 1; }
  grep -qxF 'table ip t' <<<"$tables" || return 0
  if kubectl -n "$S26_EXEMPT_NS" exec "$S26_POD" -- nft delete table ip t >/dev/null 2>&1 ||
    s26_fixture_nft delete table ip t; then
    say "clean-up: table ip t deleted from $NFT_NODE"
    return 0
  fi
  return 1
}

# An ordinary pod serving S26_BODY on 8080, on the node.
s26_web() {
  nft_node_pod web "[\"sh\", \"-c\", \"mkdir -p /tmp/www && echo '$S26_BODY' >/tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www\"]"
}
s26_service() { # NAME
  cat <<YAML
apiVersion: v1
kind: Service
metadata: {name: $1, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
YAML
}
# s26_programmed SERVICE IP PODIP: kube-proxy's map service-ips holds the
# ClusterIP and an endpoint chain does dnat to the pod (the table-scoped
# listing of the node's 1.0.6 builds no cache of other tables: it survives).
s26_programmed() {
  local table
  table=$(node_exec "$NFT_NODE" nft list table ip kube-proxy 2>&1) ||
    { WHY="nft list table ip kube-proxy failed: $table"; return 1; }
  WHY="no element '$2 . tcp . 80 : goto service-...-$S26_NS/$1/tcp/http' in map service-ips"
  grep -qE "${2//./\\.} \. tcp \. 80 : goto service-[A-Z0-9]+-$S26_NS/$1/tcp/http" <<<"$table" || return 1
  WHY="no endpoint chain dnat to $3:8080"
  grep -qF "dnat to $3:8080" <<<"$table"
}
# s26_answers IP [MAX_SECONDS]: the ClusterIP answers S26_BODY from the
# node's network namespace.
s26_answers() {
  local out
  out=$(node_exec "$NFT_NODE" curl -sS --max-time "${2:-5}" "http://$1/" 2>&1) || { WHY="curl http://$1/: $out"; return 1; }
  WHY="http://$1/ answered '$out'"
  [ "$out" = "$S26_BODY" ]
}

# kube-proxy's log on the node since S26_KP_FROM (bytes), whole.
s26_kp_log_since() { tail -c "+$((S26_KP_FROM + 1))" "$S26_KP_LOG"; }
# Lines of kube-proxy's log since S26_KP_FROM that say its nft segfaulted.
s26_kp_crashes() {
  local log
  log=$(s26_kp_log_since)
  grep -iE 'segmentation fault|exit status 139' <<<"$log" || true
}
s26_kp_crashed() {
  local lines
  lines=$(s26_kp_crashes)
  WHY="no 'segmentation fault' in kube-proxy's log since the set was created"
  [ -n "$lines" ]
}

# The profile's hazard, and Healthy=False with its code.
s26_hazard() {
  local j h s r
  j=$(kubectl get nodenetfilterprofile "$NFT_NODE" -o json 2>/dev/null) || { WHY="no profile"; return 1; }
  h=$(jq -c '[.status.hazards[]? | select(.code == "NftSetsCrashHostNft")] | first // empty' <<<"$j")
  s=$(jq -r '.status.conditions[]? | select(.type == "Healthy") | .status' <<<"$j")
  r=$(jq -r '.status.conditions[]? | select(.type == "Healthy") | .reason' <<<"$j")
  WHY="hazards [$(jq -r '[.status.hazards[]?.code] | join(", ")' <<<"$j")], Healthy=$s ($r), crashingExamples $(jq -c '.status.nftables.crashingExamples' <<<"$j")"
  [ -n "$h" ] && [ "$s" = False ] && [ "$r" = NftSetsCrashHostNft ]
}
s26_no_hazard() {
  local j s
  j=$(kubectl get nodenetfilterprofile "$NFT_NODE" -o json 2>/dev/null) || { WHY="no profile"; return 1; }
  s=$(jq -r '.status.conditions[]? | select(.type == "Healthy") | .status' <<<"$j")
  WHY="hazards [$(jq -r '[.status.hazards[]?.code] | join(", ")' <<<"$j")], Healthy=$s, nftables.crashingSets $(jq -r '.status.nftables.crashingSets // 0' <<<"$j")"
  [ "$(jq -r '[.status.hazards[]? | select(.code == "NftSetsCrashHostNft")] | length' <<<"$j")" = 0 ] &&
    [ "$s" = True ] && [ "$(jq -r '.status.nftables.crashingSets // 0' <<<"$j")" = 0 ]
}
# s26_poll SECONDS WHAT PREDICATE: wait_for with a 0.25 s step; S26_MS is
# how long it took (ms).
S26_MS=0
s26_poll() {
  local secs=$1 what=$2 t0
  shift 2
  t0=$(date +%s%N)
  WHY=""
  until "$@"; do
    [ $((($(date +%s%N) - t0) / 1000000000)) -lt "$secs" ] ||
      fail "timed out after $secs s waiting for $what${WHY:+ ($WHY)}"
    sleep 0.25
  done
  S26_MS=$((($(date +%s%N) - t0) / 1000000))
}
s26_secs() { printf '%d.%d' "$(($1 / 1000))" "$((($1 % 1000) / 100))"; } # MS -> S.d

s26_nft_skew() {
  local out part j v ip_before ip_after podip t0 t_set i lines crash_ms hazard_ms trans why_after bin got
  nftables_node
  S26_KP_LOG=${NFGUARD_E2E_LOG_DIR:?the local cluster exports NFGUARD_E2E_LOG_DIR}/kube-proxy-$NFT_NODE.log
  [ -f "$S26_KP_LOG" ] || fail "no kube-proxy log for $NFT_NODE at $S26_KP_LOG"
  on_dump tail -n 30 "$S26_KP_LOG"
  on_dump kubectl get nodenetfilterprofile "$NFT_NODE" -o yaml

  # ---- (a) the premise: the node's nft is unfixed, and kube-proxy's.
  got=$(node_exec "$NFT_NODE" nft --version) || fail "nft --version failed on $NFT_NODE"
  [[ "$got" == "nftables v1.0.6 "* ]] || fail "$NFT_NODE's nft is not bookworm's 1.0.6: $got"
  # shellcheck disable=SC2016 # dpkg-query's format, not a shell variable
  v=$(node_exec "$NFT_NODE" dpkg-query -W -f '${Version}' libnftables1) || v="(no dpkg record)"
  ok "$NFT_NODE's nft, which its kube-proxy runs: $got (libnftables1 $v)"
  s26_node_nft list ruleset
  [ "$S26_RC" = 0 ] || fail "before the scenario, $NFT_NODE's nft list ruleset exits $S26_RC: $S26_OUT"
  if grep -qxF 'table ip t {' <<<"$S26_OUT"; then fail "$NFT_NODE already has a table ip t"; fi
  j=$(kubectl get nodenetfilterprofile "$NFT_NODE" -o json) || fail "no profile for $NFT_NODE"
  v=$(jq -r '.status.nftables.host.userdataReader // "absent"' <<<"$j")
  [ "$v" = crashes ] ||
    fail "$NFT_NODE's profile says status.nftables.host.userdataReader '$v', want crashes (an unfixed host nft): $(jq -c '.status.nftables' <<<"$j")"
  v=$(jq -r '.status.kubeProxyMode // "absent"' <<<"$j")
  [ "$v" = nftables ] || fail "$NFT_NODE's profile says kubeProxyMode '$v', want nftables"
  [ "$(jq -r '.status.nftables.crashingSets // 0' <<<"$j")" = 0 ] ||
    fail "$NFT_NODE already has crashing sets: $(jq -c '.status.nftables' <<<"$j")"
  ok "profile $NFT_NODE: kubeProxyMode nftables, status.nftables.host $(jq -c '.status.nftables.host | {version, packageVersion, userdataReader}' <<<"$j"), no crashing set"

  # The image, as nfguard reads it (the registry as the control plane reaches it).
  bin=${NFGUARD_BIN:-$REPO/target/release/nfguard}
  [ -x "$bin" ] || fail "NFGUARD_BIN=$bin is not an executable nfguard"
  out=$("$REPO/e2e/local-cluster.sh" cp "$bin" inspect image "$S26_IMAGE" --insecure-registry "$REGISTRY" \
    --registry-allow-cidr "${REGISTRY%:*}/32" -o json </dev/null 2>&1) || fail "nfguard inspect image $S26_IMAGE failed: $out"
  v=$(jq -c '.. | objects | select(has("nftables")) | .nftables | select(. != null) | {version, packageVersion, writesTypeUserdata, userdataReader}' <<<"$out" 2>/dev/null | sed -n 1p)
  if [ "$(jq -r '.version' <<<"${v:-null}")" != 1.1.3 ] || [ "$(jq -r '.writesTypeUserdata' <<<"${v:-null}")" != true ]; then
    fail "nfguard inspect image does not say nftables 1.1.3, writesTypeUserdata true: ${v:-$out}"
  fi
  ok "nfguard inspect image $S26_IMAGE: nftables $v"

  # ---- before the set: a ClusterIP Service on the node answers.
  scenario_ns "$S26_NS"
  on_dump node_exec "$NFT_NODE" nft list table ip kube-proxy
  s26_web | kubectl -n "$S26_NS" apply -f - >/dev/null
  s26_service before | kubectl -n "$S26_NS" apply -f - >/dev/null
  kubectl -n "$S26_NS" wait --for=condition=Ready pod/web --timeout=120s >/dev/null ||
    fail "pod web is not Ready on $NFT_NODE"
  ip_before=$(get service before '{.spec.clusterIP}' -n "$S26_NS")
  podip=$(get pod web '{.status.podIP}' -n "$S26_NS")
  wait_for 60 "kube-proxy on $NFT_NODE to program Service before ($ip_before)" s26_programmed before "$ip_before" "$podip"
  wait_for 30 "http://$ip_before/ to answer from $NFT_NODE" s26_answers "$ip_before"
  ok "before the set: Service before ($ip_before:80 -> $podip:8080) programmed in table ip kube-proxy and answering from $NFT_NODE"

  # ---- (b) with nfguard's gate: denied at admission.
  e2e_policy "$S26_POLICY" Deny "{kubernetes.io/metadata.name: $S26_EXEMPT_NS}" "{kubernetes.io/metadata.name: $S26_EXEMPT_NS}"
  scenario_ns "$S26_EXEMPT_NS"
  defer kubectl -n "$S26_NS" delete pod "$S26_POD" --ignore-not-found --grace-period=0 --force --wait=false
  if out=$(s26_pod "$S26_POD" | kubectl -n "$S26_NS" create -f - 2>&1); then
    fail "with nfguard's gate the nft 1.1.3 writer was admitted on $NFT_NODE: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the nft 1.1.3 writer failed, but not by nfguard's webhook: $out"
  part=$(reason_part "$out" NftNewWriterOldReader)
  [ -n "$part" ] || fail "the denial has no [NftNewWriterOldReader] reason: $out"
  names_node "$part" "$NFT_NODE" || fail "the [NftNewWriterOldReader] reason does not name $NFT_NODE: $part"
  grep -qF "$S26_READER" <<<"$part" || fail "the [NftNewWriterOldReader] reason does not name '$S26_READER': $part"
  grep -qF 'libnftables 1.1.3 in the image' <<<"$part" || fail "the reason does not name the image's libnftables 1.1.3: $part"
  grep -qF "nfguard.io/exempt ignored: no NetfilterPolicy allows exemptions in namespace $S26_NS" <<<"$out" ||
    fail "the denial does not say the annotation was ignored in $S26_NS: $out"
  if kubectl -n "$S26_NS" get pod "$S26_POD" >/dev/null 2>&1; then fail "pod $S26_POD exists in $S26_NS after the denial"; fi
  ok "with nfguard's gate (the installed default policy) the writer is denied at admission:"
  show <<<"$out"

  # ---- (c) without the gate: the same pod where a policy lets the exemption count.
  wait_for 60 "the webhook to honour nfguard.io/exempt in $S26_EXEMPT_NS" exempt_honoured "$S26_EXEMPT_NS" s26_pod
  defer kubectl -n "$S26_EXEMPT_NS" delete pod "$S26_POD" --ignore-not-found --grace-period=0 --force --wait=true --timeout=60s
  on_dump kubectl -n "$S26_EXEMPT_NS" describe pod "$S26_POD"
  out=$(s26_pod "$S26_POD" | kubectl -n "$S26_EXEMPT_NS" create -f - 2>&1) ||
    fail "the exempted writer was not admitted in $S26_EXEMPT_NS: $out"
  grep -qF "Warning: nfguard: [Exempt] exempt by annotation nfguard.io/exempt: $S26_REASON" <<<"$out" ||
    fail "admitted in $S26_EXEMPT_NS without nfguard's exemption warning: $out"
  ok "without the gate ($S26_EXEMPT_NS, exemptions allowed by $S26_POLICY) the same pod is admitted:"
  show <<<"$out"
  kubectl -n "$S26_EXEMPT_NS" wait --for=condition=Ready "pod/$S26_POD" --timeout=120s >/dev/null ||
    fail "pod $S26_POD is not Ready on $NFT_NODE"
  got=$(kubectl -n "$S26_EXEMPT_NS" exec "$S26_POD" -- nft --version 2>&1) || fail "nft --version in the pod: $got"
  [[ "$got" == "nftables v1.1.3 "* ]] || fail "the pod's nft says '$got', not v1.1.3"
  ok "pod $S26_POD runs on $NFT_NODE (hostNetwork): $got"

  # The set, by the pod's own nft in the node's network namespace.
  defer s26_drop_set
  S26_KP_FROM=$(stat -c %s "$S26_KP_LOG")
  out=$(kubectl -n "$S26_EXEMPT_NS" exec "$S26_POD" -- nft add table ip t 2>&1) ||
    fail "the pod's nft add table ip t: $out"
  out=$(kubectl -n "$S26_EXEMPT_NS" exec "$S26_POD" -- nft add set ip t s '{ type ifname ; elements = { "eth0" } ; }' 2>&1) ||
    fail "the pod's nft add set ip t s: $out"
  t0=$(date +%s%N)
  t_set=$(date -u +%s)

  # ---- (e) nfguard reports it (polled at once, to time it).
  s26_poll 60 "the reporter to raise NftSetsCrashHostNft on $NFT_NODE and Healthy=False" s26_hazard
  hazard_ms=$((($(date +%s%N) - t0) / 1000000))
  out=$(kubectl -n "$S26_EXEMPT_NS" exec "$S26_POD" -- nft list table ip t 2>&1) || fail "the pod's nft list table ip t: $out"
  ok "the pod's nft 1.1.3 created a type set in $NFT_NODE's network namespace (nft add table ip t; nft add set ip t s '{ type ifname ; elements = { \"eth0\" } ; }'):"
  show <<<"$out"
  j=$(kubectl get nodenetfilterprofile "$NFT_NODE" -o json)
  v=$(jq -c '[.status.hazards[] | select(.code == "NftSetsCrashHostNft")] | first' <<<"$j")
  [ "$(jq -r .severity <<<"$v")" = critical ] || fail "NftSetsCrashHostNft is not critical: $v"
  [[ "$(jq -r .message <<<"$v")" == *ip/t/s* ]] || fail "NftSetsCrashHostNft does not name ip/t/s: $v"
  [ "$(jq -r '.status.nftables.crashingExamples // [] | index("ip/t/s") != null' <<<"$j")" = true ] ||
    fail "status.nftables.crashingExamples does not name ip/t/s: $(jq -c .status.nftables <<<"$j")"
  trans=$(jq -r '.status.conditions[] | select(.type == "Healthy") | .lastTransitionTime' <<<"$j")
  ok "NftSetsCrashHostNft (critical) and Healthy=False showed $(s26_secs "$hazard_ms") s after the pod's nft add set returned (a 0.25 s poll of the profile from then; Healthy's lastTransitionTime $trans is $(($(epoch "$trans") - t_set)) s after it, second precision):"
  jq -r '"- \(.code) (\(.severity)) table \(.table): \(.message)"' <<<"$v" | show
  jq -r '.status.conditions[] | select(.type == "Healthy") | "- Healthy=\(.status) \(.reason): \(.message)"' <<<"$j" | show
  jq -c '.status.nftables | {host: (.host | {version, packageVersion, userdataReader}), minReader, crashingSets, crashingExamples, crashingTables}' <<<"$j" | show
  caused_alert NfguardNodeNetfilterDegraded "node=$NFT_NODE"
  caused_alert NfguardNodeHazard code=NftSetsCrashHostNft

  # ---- (d) the break, shown.
  s26_node_nft list ruleset
  [ "$S26_RC" = 139 ] || fail "$NFT_NODE's own nft list ruleset exits $S26_RC, want 139 (segfault): $S26_OUT"
  ok "$NFT_NODE's own nft 1.0.6: nft list ruleset exits 139 (segmentation fault)"
  s26_node_nft list table ip kube-proxy
  [ "$S26_RC" = 0 ] || fail "the table-scoped nft list table ip kube-proxy exits $S26_RC: $S26_OUT"
  s26_service after | kubectl -n "$S26_NS" apply -f - >/dev/null
  ip_after=$(get service after '{.spec.clusterIP}' -n "$S26_NS")
  [ -n "$ip_after" ] || fail "Service after has no ClusterIP"
  wait_for 60 "kube-proxy's sync on $NFT_NODE to fail (its log)" s26_kp_crashed
  crash_ms=$((($(date +%s%N) - t0) / 1000000))
  lines=$(s26_kp_crashes)
  ok "kube-proxy's sync through the node's nft segfaults ($(s26_secs "$crash_ms") s after the set; Service after ($ip_after) created just before); its log:"
  sed -n '1,4p' <<<"$lines" | show
  # For ~20 s: the new Service is not programmed and does not answer, the
  # one programmed before the set still does (the kernel keeps its rules).
  for i in 1 2 3 4; do
    if s26_programmed after "$ip_after" "$podip"; then
      fail "kube-proxy programmed Service after ($ip_after) although its nft cannot read the sets: $(s26_kp_log_since | tail -n 5)"
    fi
    if s26_answers "$ip_after" 3; then fail "http://$ip_after/ answers from $NFT_NODE: $WHY"; fi
    why_after=$WHY
    s26_answers "$ip_before" || fail "Service before stopped answering: $WHY"
    [ "$i" = 4 ] || sleep 3
  done
  ok "$((($(date +%s%N) - t0) / 1000000000)) s after the set: Service after ($ip_after) is not in table ip kube-proxy and does not answer from $NFT_NODE ($why_after); Service before ($ip_before), programmed earlier, still answers"
  ok "kube-proxy's log since the set ($(s26_kp_crashes | grep -c . || true) line(s) saying segmentation fault; its healthz still answers $(node_exec "$NFT_NODE" curl -s -o /dev/null -w '%{http_code}' --max-time 5 http://127.0.0.1:10256/healthz || true)):"
  lines=$(s26_kp_log_since)
  tail -n 12 <<<"$lines" | show

  # ---- (f) recovery: the pod's own nft deletes the table, the pod goes.
  t0=$(date +%s%N)
  out=$(kubectl -n "$S26_EXEMPT_NS" exec "$S26_POD" -- nft delete table ip t 2>&1) || fail "the pod's nft delete table ip t: $out"
  s26_poll 60 "NftSetsCrashHostNft to go from $NFT_NODE and Healthy=True" s26_no_hazard
  # From here on kube-proxy's nft must not segfault (a sync that began
  # before the deletion has logged by now).
  S26_KP_FROM=$(stat -c %s "$S26_KP_LOG")
  ok "the pod's nft deleted table ip t: the hazard is gone $(s26_secs $((($(date +%s%N) - t0) / 1000000))) s later ($WHY)"
  s26_node_nft list ruleset
  [ "$S26_RC" = 0 ] || fail "after the set was deleted, $NFT_NODE's nft list ruleset still exits $S26_RC: $S26_OUT"
  kubectl -n "$S26_EXEMPT_NS" delete pod "$S26_POD" --grace-period=1 --wait=true --timeout=60s >/dev/null
  ok "$NFT_NODE's nft list ruleset exits 0 again; pod $S26_POD deleted"
  s26_poll 120 "kube-proxy on $NFT_NODE to program Service after ($ip_after) again" s26_programmed after "$ip_after" "$podip"
  i=$((($(date +%s%N) - t0) / 1000000))
  wait_for 30 "http://$ip_after/ to answer from $NFT_NODE" s26_answers "$ip_after"
  s26_answers "$ip_before" || fail "Service before does not answer after the recovery: $WHY"
  lines=$(s26_kp_crashes)
  [ -z "$lines" ] || fail "kube-proxy's nft still segfaults after the recovery: $lines"
  ok "kube-proxy synced again: Service after ($ip_after) programmed $(s26_secs "$i") s after the set was deleted (its retry after a failed sync) and answering from $NFT_NODE, Service before too; no segmentation fault in its log since"
}
