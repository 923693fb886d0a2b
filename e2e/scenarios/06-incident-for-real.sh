# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 6: the incident for real: an old reader's save/restore on an nft node.
#
# the incident for real on an nft node: kubelet's old KUBE-FIREWALL rule,
# a 1.8.7 save/restore, the node cut off, what Kubernetes reports; with
# the node's kube-proxy frozen (it would rewrite the chain), nfguard must
# report the corrupted chain once the node is reachable: the hazard in
# the profile, Healthy=False and the degraded taint; then the repair
# lifts the taint
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - s6_restore_heartbeat "$hb_before"
#   - kubectl delete netfilterpolicy nfguard-e2e-taint-degraded --ignore-not-found
#   - namespace "$ns" (scenario_ns)
#   - node_kube_proxy "$S6_NODE" cont
#   - s6_restore_firewall
#   - kubectl -n "$ns" delete pod incident --ignore-not-found --grace-period=0 --force --wait=false

SCENARIO_TITLE="the incident for real: an old reader's save/restore on an nft node"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON="kind"
SCENARIO_RUN=s6_incident

# Until Kubernetes 1.27 kubelet itself wrote, with the node's iptables,
#   -A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets"
#                    -m mark --mark 0x8000/0x8000 -j DROP
# jumped to from INPUT and OUTPUT. iptables-nft >= 1.8.8 writes that mark
# match as a native nftables expression, which iptables-nft 1.8.7 cannot read:
# the kube-router / Kubernetes 1.25 incident was a 1.8.7 container doing
# save | restore on such a node, which turned the rule into an unconditional
# DROP and cut the node off. The 1.34 kubelet no longer writes that rule
# (KEP-3178 removed KUBE-MARK-DROP and its DROP): its KUBE-FIREWALL holds only
# "block incoming localnet connections", which kube-proxy also writes (and
# rewrites, whole, at each of its syncs). So this scenario seeds what older
# kubelets wrote, with the node's own iptables (1.8.9, nft) -- the
# precondition of the incident -- lets a 1.8.7 container do what kube-router
# did, records what Kubernetes and nfguard report, and repairs the node by
# hand, back to the chain and jumps it had before. The node's kube-proxy is
# frozen (SIGSTOP) from the seeding until the repair: a sync of its own would
# rewrite KUBE-FIREWALL and erase the evidence before the reporter, backing
# off after the outage, could send it; nfguard must then report it.
S6_NODE=""
S6_HAD_CHAIN=0
S6_CHAIN_RULES=""
S6_JUMPS=""
S6_API=()
S6_MARK_RULE='-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -m mark --mark 0x8000/0x8000 -j DROP'
S6_BROKEN_RULE='-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -j DROP'

s6_ipt() { node_exec "$S6_NODE" iptables -w "$@"; }
s6_filter() { node_exec "$S6_NODE" iptables-save -t filter; }

# "CHAIN POSITION" of every rule jumping to KUBE-FIREWALL from INPUT/OUTPUT.
s6_jumps() {
  local c
  for c in INPUT OUTPUT; do
    s6_ipt -S "$c" | grep '^-A ' | awk -v c="$c" '$0 ~ / -j KUBE-FIREWALL( |$)/ { print c, NR }'
  done
}

# traffic_ok: the node reaches the apiserver (through the kubernetes Service
# and directly) and its own loopback (kubelet's healthz on 127.0.0.1:10248).
s6_traffic() { # -> "apiserver-service apiserver-direct loopback" as ok/dead
  local a b c
  node_exec "$S6_NODE" curl -sk --max-time 5 -o /dev/null "https://${S6_API[0]}/healthz" && a=ok || a=dead
  node_exec "$S6_NODE" curl -sk --max-time 5 -o /dev/null "https://${S6_API[1]}/healthz" && b=ok || b=dead
  node_exec "$S6_NODE" curl -s --max-time 5 -o /dev/null "http://127.0.0.1:10248/healthz" && c=ok || c=dead
  echo "$a $b $c"
}

# Put KUBE-FIREWALL and its jumps back exactly as they were before the
# scenario (idempotent; also the trap's repair on failure).
s6_restore_firewall() {
  local input c pos
  [ -n "$S6_NODE" ] || return 0
  input="*filter"$'\n'
  while read -r c pos; do
    [ -n "$c" ] && input+="-D $c -j KUBE-FIREWALL"$'\n'
  done < <(s6_jumps)
  if s6_ipt -S KUBE-FIREWALL >/dev/null 2>&1; then
    input+="-F KUBE-FIREWALL"$'\n'
    [ "$S6_HAD_CHAIN" = 1 ] || input+="-X KUBE-FIREWALL"$'\n'
  elif [ "$S6_HAD_CHAIN" = 1 ]; then
    input+="-N KUBE-FIREWALL"$'\n'
  fi
  if [ "$S6_HAD_CHAIN" = 1 ]; then
    input+="$(grep '^-A KUBE-FIREWALL' <<<"$S6_CHAIN_RULES" || true)"$'\n'
    while read -r c pos; do
      [ -n "$c" ] && input+="-I $c $pos -j KUBE-FIREWALL"$'\n'
    done <<<"$S6_JUMPS"
  fi
  input+="COMMIT"$'\n'
  node_exec_in "$S6_NODE" iptables-restore -w --noflush <<<"$input"
}

s6_rule_present() { # RULE
  local rules
  rules=$(s6_filter) || true
  grep -qxF -- "$1" <<<"$rules"
}
s6_corrupted() {
  local f
  f=$(s6_filter) || { WHY="iptables-save failed on $S6_NODE"; return 1; }
  WHY="KUBE-FIREWALL is: $(grep '^-A KUBE-FIREWALL' <<<"$f" | tr '\n' ';')"
  grep -qxF -- "$S6_BROKEN_RULE" <<<"$f" && ! grep -q -- '^-A KUBE-FIREWALL .*--mark 0x8000/0x8000' <<<"$f"
}
s6_not_ready() {
  local r
  r=$(node_ready "$S6_NODE")
  WHY="Ready=$r"
  [ "$r" != True ]
}
s6_stale() {
  local s r
  s=$(condition "$S6_NODE" Fresh status)
  r=$(condition "$S6_NODE" Fresh reason)
  WHY="Fresh=$s ($r)"
  [ "$s" = Unknown ] && [ "$r" = HeartbeatStale ]
}
# nfguard reports the corrupted chain: the hazard in the profile (on
# KUBE-FIREWALL), Healthy=False FirewallUnconditionalDrop and the taint.
s6_degraded() {
  local t h s z
  t=$(nfguard_taints "$S6_NODE")
  s=$(condition "$S6_NODE" Healthy status)
  h=$(condition "$S6_NODE" Healthy reason)
  z=$(nnp "$S6_NODE" '{range .status.hazards[?(@.code=="FirewallUnconditionalDrop")]}{.chain}{"\n"}{end}')
  WHY="hazards on chains: $(tr '\n' ' ' <<<"${z:-none}"); Healthy=$s $h; nfguard taints: ${t:-none}"
  grep -qx KUBE-FIREWALL <<<"$z" && [ "$s" = False ] && [ "$h" = FirewallUnconditionalDrop ] &&
    grep -qx 'nfguard.io/netfilter-degraded=FirewallUnconditionalDrop:NoSchedule' <<<"$t"
}
# The same, and the evidence still there: with kube-proxy frozen nothing may
# rewrite the corrupted chain while nfguard is expected to report it.
s6_reported() {
  if ! s6_corrupted; then
    fail "KUBE-FIREWALL on $S6_NODE was rewritten while its kube-proxy is frozen: $WHY"
  fi
  s6_degraded
}
s6_recovered() { # SINCE (epoch): Ready, a profile probed after SINCE, Fresh and Healthy, no nfguard taint
  local t
  [ "$(node_ready "$S6_NODE")" = True ] || { WHY="Ready=$(node_ready "$S6_NODE")"; return 1; }
  t=$(nnp "$S6_NODE" '{.status.lastProbeTime}')
  [ "$(epoch "$t")" -ge "$1" ] || { WHY="lastProbeTime $t predates the repair"; return 1; }
  [ "$(condition "$S6_NODE" Fresh status)" = True ] || { WHY="Fresh not True"; return 1; }
  [ "$(condition "$S6_NODE" Healthy status)" = True ] || { WHY="Healthy $(condition "$S6_NODE" Healthy reason)"; return 1; }
  [ -z "$(nfguard_taints "$S6_NODE")" ] || { WHY="taints: $(nfguard_taints "$S6_NODE" | tr '\n' ' ')"; return 1; }
  local keys
  keys=$(get node "$S6_NODE" '{.spec.taints[*].key}')
  [[ " $keys " != *" node.kubernetes.io/unreachable "* ]] ||
    { WHY="still tainted node.kubernetes.io/unreachable"; return 1; }
}
S6_TAINT=nfguard.io/netfilter-degraded
# The controllers' count of withheld nfguard.io/netfilter-degraded taints.
s6_withheld_total() {
  local pod v total=0
  for pod in $(kubectl -n "$NS" get pods -l app.kubernetes.io/component=controller -o jsonpath='{.items[*].metadata.name}'); do
    v=$(pod_metric "$pod" "nfguard_controller_taints_withheld_total{taint=\"$S6_TAINT\"}")
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
# Healthy=False FirewallUnconditionalDrop, no nfguard taint (the brake), and
# the withheld taint counted (above BEFORE).
s6_withheld() { # BEFORE
  local r t n
  r=$(condition "$S6_NODE" Healthy reason)
  t=$(nfguard_taints "$S6_NODE")
  [ -z "$t" ] || fail "$S6_NODE was tainted although the safety brake allows no taint: $t"
  n=$(s6_withheld_total)
  WHY="Healthy reason ${r:-none}; taints_withheld_total{taint=\"$S6_TAINT\"} $1 -> $n; nfguard taints: none"
  [ "$r" = FirewallUnconditionalDrop ] && [ "$n" -gt "$1" ]
}
s6_probe_interval() {
  local i
  i=$(nnp "$S6_NODE" '{.status.probeIntervalSeconds}')
  WHY="probeIntervalSeconds $i"
  [ "$i" = "$1" ]
}

s6_record() { # TITLE: what an operator sees
  say "what an operator sees ($1):"
  {
    echo "\$ kubectl get node $S6_NODE"
    kubectl get node "$S6_NODE"
    echo "\$ kubectl get node $S6_NODE -o jsonpath='{.spec.taints}'"
    get node "$S6_NODE" '{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}'
    echo "\$ kubectl get nnp $S6_NODE -o yaml   (status excerpt)"
    nnp "$S6_NODE" '{"lastProbeTime: "}{.status.lastProbeTime}{"\nprobeIntervalSeconds: "}{.status.probeIntervalSeconds}{"\nactiveBackend: "}{.status.activeBackend}{"\nminReaderVersion: "}{.status.minReaderVersion}{"\nhazards:\n"}{range .status.hazards[*]}{"- "}{.code}{" ("}{.severity}{"): "}{.message}{"\n"}{end}{"conditions:\n"}{range .status.conditions[*]}{"- "}{.type}{"="}{.status}{" "}{.reason}{": "}{.message}{" (since "}{.lastTransitionTime}{")\n"}{end}'
    echo "\$ kubectl get events --field-selector involvedObject.name=$S6_NODE,involvedObject.kind=Node   (Kubernetes, last 4)"
    kubectl get events -A --field-selector "involvedObject.name=$S6_NODE,involvedObject.kind=Node" \
      -o jsonpath='{range .items[?(@.source.component)]}{.lastTimestamp}{"  "}{.source.component}{" "}{.reason}{": "}{.message}{"\n"}{end}' 2>&1 |
      grep -v MissingClusterDNS | sort | tail -n 4
    echo "\$ kubectl get events.events.k8s.io --field-selector regarding.name=$S6_NODE   (nfguard-controller, last 6)"
    kubectl get events.v1.events.k8s.io -A --field-selector "regarding.name=$S6_NODE" \
      -o jsonpath='{range .items[?(@.reportingController=="nfguard-controller")]}{.eventTime}{"  "}{.regarding.kind}{" "}{.reason}{": "}{.note}{"\n"}{end}' 2>&1 | sort | tail -n 6
  } | show
}

# The incident: iptables-nft 1.8.7 saving and restoring $S6_NODE's rules,
# exempt by annotation.
s6_incident_pod() { # NAME
  incident_pod "$1" "$S6_NODE" '{nfguard.io/exempt: "e2e: reproduce the incident"}' \
    '["sh", "-c", "iptables-nft-save | iptables-nft-restore; sleep infinity"]'
}

s6_incident() {
  local ns=nfguard-e2e-s6 n hb_before out traffic t0 repaired input reconnected labels withheld
  for n in "${NODES[@]}"; do
    [ "$(nnp "$n" '{.status.activeBackend}')" = nft ] || continue
    # The seed and the repair use the node's own iptables: not a node without one.
    [ -n "$(nnp "$n" '{.status.iptables.version}')" ] || continue
    if [ "${EXPECT[$n]:-}" = nft ]; then S6_NODE=$n; break; fi
    labels=$(get node "$n" '{.metadata.labels}')
    if [ -z "$S6_NODE" ] && [[ $labels != *'"node-role.kubernetes.io/control-plane"'* ]]; then
      S6_NODE=$n
    fi
  done
  [ -n "$S6_NODE" ] || fail "no worker node with an iptables command whose rules live in nft"
  say "the nft node: $S6_NODE"
  on_dump s6_filter
  S6_API=("$(get service kubernetes '{.spec.clusterIP}' -n default)"
    "$(kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes \
      -o jsonpath='{.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}')")
  if [ -z "${S6_API[0]}" ] || [ "${S6_API[1]}" = : ]; then
    fail "cannot find the apiserver's addresses: ${S6_API[*]}"
  fi

  # (b) a short heartbeat, and a policy that taints degraded nodes.
  hb_before=$(get daemonset nfguard-reporter '{.spec.template.spec.containers[0].env[?(@.name=="NFGUARD_HEARTBEAT_SECONDS")].value}' -n "$NS")
  defer s6_restore_heartbeat "$hb_before"
  kubectl -n "$NS" set env daemonset/nfguard-reporter NFGUARD_HEARTBEAT_SECONDS=10 >/dev/null
  kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=240s >/dev/null
  wait_for 60 "the reporter on $S6_NODE to announce a 10 s heartbeat" s6_probe_interval 10
  ok "reporter heartbeat 10 s (Fresh turns Unknown after 3 missed heartbeats: 30 s)"
  defer kubectl delete netfilterpolicy nfguard-e2e-taint-degraded --ignore-not-found
  kubectl apply -f - >/dev/null <<YAML
apiVersion: nfguard.io/v1alpha1
kind: NetfilterPolicy
metadata: {name: nfguard-e2e-taint-degraded, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  action: Deny
  unresolvedImages: Warn
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $ns}}
  exemptionNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $ns}}
  taintDegradedNodes: true
  maxTaintedNodesPercent: 10
YAML
  ok "NetfilterPolicy nfguard-e2e-taint-degraded: taintDegradedNodes true, maxTaintedNodesPercent 10 (the safety brake: no taint below 10 nodes; lifted once it withholds one)"

  scenario_ns "$ns"

  # kube-proxy off the chain until the repair (resumed also on failure, after
  # the firewall is restored).
  defer node_kube_proxy "$S6_NODE" cont
  node_kube_proxy "$S6_NODE" stop || fail "cannot freeze kube-proxy on $S6_NODE"
  ok "kube-proxy on $S6_NODE frozen (SIGSTOP): nothing but the incident rewrites KUBE-FIREWALL"

  # (a) seed the old kubelet's firewall with the node's own iptables.
  if s6_ipt -S KUBE-FIREWALL >/dev/null 2>&1; then
    S6_HAD_CHAIN=1
    S6_CHAIN_RULES=$(s6_ipt -S KUBE-FIREWALL)
  fi
  S6_JUMPS=$(s6_jumps)
  defer s6_restore_firewall
  say "before: KUBE-FIREWALL on $S6_NODE ($(s6_ipt --version)):"
  { s6_filter | grep -E -- '(^:KUBE-FIREWALL|-j KUBE-FIREWALL|^-A KUBE-FIREWALL)' || echo "(no KUBE-FIREWALL)"; } | show
  [ "$S6_HAD_CHAIN" = 1 ] || s6_ipt -N KUBE-FIREWALL
  s6_ipt -I KUBE-FIREWALL 1 -m comment --comment "kubernetes firewall for dropping marked packets" \
    -m mark --mark 0x8000/0x8000 -j DROP
  for n in INPUT OUTPUT; do
    s6_ipt -C "$n" -j KUBE-FIREWALL 2>/dev/null || s6_ipt -I "$n" 1 -j KUBE-FIREWALL
  done
  s6_rule_present "$S6_MARK_RULE" || fail "the seeded rule is not in iptables-save: $(s6_filter | grep KUBE-FIREWALL)"
  [ "$(s6_jumps | awk '{print $1}' | sort -u | tr '\n' ' ')" = "INPUT OUTPUT " ] ||
    fail "KUBE-FIREWALL is not jumped to from both INPUT and OUTPUT: $(s6_jumps | tr '\n' ' ')"
  ok "seeded with the node's iptables: $S6_MARK_RULE (jumped to from INPUT and OUTPUT)"
  traffic=$(s6_traffic)
  [ "$traffic" = "ok ok ok" ] ||
    fail "before the incident the node's traffic must work: apiserver via ${S6_API[0]}, direct ${S6_API[1]}, loopback: $traffic"
  ok "traffic works: the node reaches the apiserver (https://${S6_API[0]}/healthz, https://${S6_API[1]}/healthz) and its loopback (kubelet healthz on 127.0.0.1:10248)"
  say "minReaderVersion of $S6_NODE: $(nnp "$S6_NODE" '{.status.minReaderVersion}'); native features: $(nnp "$S6_NODE" '{range .status.nativeFeatures[*]}{.feature}>={.minReader} {end}')"

  # (c) the incident: an exempted 1.8.7 container does save | restore (the
  # policy above lets nfguard.io/exempt count in this namespace).
  wait_for 60 "the webhook to honour nfguard.io/exempt in $ns" exempt_honoured "$ns" s6_incident_pod
  defer kubectl -n "$ns" delete pod incident --ignore-not-found --grace-period=0 --force --wait=false
  on_dump kubectl -n "$ns" logs incident --tail=20
  out=$(s6_incident_pod incident | kubectl -n "$ns" create -f - 2>&1) ||
    fail "the exempted incident pod was not admitted: $out"
  grep -qF 'Warning: nfguard: [Exempt] exempt by annotation nfguard.io/exempt: e2e: reproduce the incident' <<<"$out" ||
    fail "the webhook admitted the exempted pod without nfguard's exemption warning: $out"
  ok "the webhook admits the exempted pod with a warning:"
  show <<<"$out"
  t0=$SECONDS

  # (d) what happens on the node.
  withheld=$(s6_withheld_total)
  wait_for 240 "the 1.8.7 save/restore to rewrite KUBE-FIREWALL on $S6_NODE" s6_corrupted
  say "after: KUBE-FIREWALL on $S6_NODE, as the host's iptables-save shows it:"
  s6_filter | grep -E -- '(-j KUBE-FIREWALL|^-A KUBE-FIREWALL)' | show
  ok "the mark match is gone: $S6_BROKEN_RULE"
  traffic=$(s6_traffic)
  [ "$traffic" = "dead dead dead" ] ||
    fail "after the incident the node's traffic should be dead (apiserver via Service, direct, loopback): $traffic"
  ok "the node's traffic is dead: apiserver (Service and direct) and loopback time out"

  # (e) what nfguard and Kubernetes report.
  wait_for 180 "Node $S6_NODE to go NotReady" s6_not_ready
  ok "Node $S6_NODE is NotReady ($(get node "$S6_NODE" '{.status.conditions[?(@.type=="Ready")].reason}')) $((SECONDS - t0)) s after the pod was created"
  wait_for 180 "the profile of $S6_NODE to turn stale" s6_stale
  ok "profile $S6_NODE: Fresh=Unknown HeartbeatStale ($((SECONDS - t0)) s): $(condition "$S6_NODE" Fresh message)"
  s6_record "the node cut off"
  # The stale reporter: its node is dark, its heartbeat stale.
  expect_alert firing NfguardTargetDown job=nfguard-reporter "node=$S6_NODE"
  expect_alert firing NfguardProfileStale "node=$S6_NODE"
  if [ -n "$(nfguard_taints "$S6_NODE")" ]; then
    ok "nfguard taint while cut off: $(nfguard_taints "$S6_NODE")"
  else
    say "note: no nfguard taint while the node is cut off: its reporter cannot write the hazard, and a stale heartbeat does not taint (Kubernetes' node.kubernetes.io/unreachable taints keep new pods away)"
  fi

  # (f) repair, in two steps: first the jumps (the node is reachable again,
  # the corrupted chain still there for nfguard to report; kube-proxy, which
  # would rewrite it at its first sync, is frozen), then the chain.
  input="*filter"$'\n'
  while read -r n p; do
    [ -n "$n" ] && input+="-D $n -j KUBE-FIREWALL"$'\n'
  done < <(s6_jumps)
  node_exec_in "$S6_NODE" iptables-restore -w --noflush <<<"${input}COMMIT"$'\n'
  reconnected=$(date -u +%s)
  traffic=$(s6_traffic)
  [ "$traffic" = "ok ok ok" ] || fail "without the jumps to KUBE-FIREWALL the node's traffic should work again: $traffic"
  ok "repair 1: the jumps from INPUT and OUTPUT deleted: traffic works again"
  # The brake, still on, withholds the taint; lifted, the taint follows.
  wait_for 180 "nfguard to report $S6_NODE degraded and the safety brake to withhold its taint" s6_withheld "$withheld"
  ok "the safety brake withholds $S6_TAINT: $WHY"
  caused_alert NfguardTaintBrakeEngaged "taint=$S6_TAINT"
  kubectl patch netfilterpolicy nfguard-e2e-taint-degraded --type=merge -p '{"spec":{"maxTaintedNodesPercent":100}}' >/dev/null
  lift_brake nfguard-e2e-taint-degraded
  ok "NetfilterPolicy nfguard-e2e-taint-degraded: maxTaintedNodesPercent 10 -> 100, the brake lifted"
  wait_for 180 "nfguard to report the corrupted KUBE-FIREWALL of $S6_NODE (hazard, Healthy=False, taint)" s6_reported
  ok "nfguard reports it $(($(date -u +%s) - reconnected)) s after the node came back: hazard FirewallUnconditionalDrop on KUBE-FIREWALL, Healthy=False FirewallUnconditionalDrop, Node tainted $(nfguard_taints "$S6_NODE")"
  s6_record "reachable again, the corrupted KUBE-FIREWALL still present"
  expect_alert firing NfguardNodeNetfilterDegraded "node=$S6_NODE"
  expect_alert firing NfguardNodeHazard code=FirewallUnconditionalDrop
  expect_alert firing NfguardNodesTainted
  # Its writes while cut off time out ("no answer within 10 s"): with the
  # test's shortened `for:` they fire NfguardReporterWriteFailures when
  # Prometheus scrapes them after the repair, but kubelet restarts the
  # reporter once its liveness probe has failed for 60 s (the node's own
  # traffic is dead too), and the new process counts from 0: so only
  # "may fire" here; scenario 27 causes a write failure for certain.
  caused_alert NfguardReporterWriteFailures "node=$S6_NODE"
  expect_alert gone NfguardTargetDown job=nfguard-reporter "node=$S6_NODE"
  expect_alert gone NfguardProfileStale "node=$S6_NODE"
  s6_restore_firewall
  if s6_rule_present "$S6_MARK_RULE"; then fail "the seeded rule is still there after the repair"; fi
  ok "repair 2: the seeded chain removed, KUBE-FIREWALL and its jumps as before the scenario:"
  { s6_filter | grep -E -- '(-j KUBE-FIREWALL|^-A KUBE-FIREWALL)' || echo "(no KUBE-FIREWALL)"; } | show
  node_kube_proxy "$S6_NODE" cont || fail "cannot resume kube-proxy on $S6_NODE"
  ok "kube-proxy on $S6_NODE resumed"
  kubectl -n "$ns" delete pod incident --grace-period=1 --wait=true --timeout=120s >/dev/null
  repaired=$(date -u +%s)
  wait_for 240 "$S6_NODE Ready, freshly profiled, Healthy, untainted" s6_recovered "$repaired"
  say "the reporter's log on $S6_NODE (warnings only, its default level) from the outage:"
  kubectl -n "$NS" logs "$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter \
    --field-selector "spec.nodeName=$S6_NODE" -o jsonpath='{.items[0].metadata.name}')" 2>&1 |
    sed 's/\x1b\[[0-9;]*m//g' | tail -n 12 | show
  expect_alert gone NfguardNodeNetfilterDegraded "node=$S6_NODE"
  expect_alert gone NfguardNodeHazard code=FirewallUnconditionalDrop
  expect_alert gone NfguardNodesTainted
  ok "Node $S6_NODE Ready, profile probed at $(nnp "$S6_NODE" '{.status.lastProbeTime}') Fresh and Healthy, nfguard's taint removed ($((SECONDS - t0)) s after the incident began; repair to recovery ${WAITED} s)"
}

s6_restore_heartbeat() { # VALUE (empty: the variable was not set)
  local rc=0
  if [ -n "$1" ]; then
    kubectl -n "$NS" set env daemonset/nfguard-reporter "NFGUARD_HEARTBEAT_SECONDS=$1" >/dev/null || rc=1
  else
    kubectl -n "$NS" set env daemonset/nfguard-reporter NFGUARD_HEARTBEAT_SECONDS- >/dev/null || rc=1
  fi
  kubectl -n "$NS" rollout status daemonset/nfguard-reporter --timeout=240s >/dev/null || rc=1
  return "$rc"
}
