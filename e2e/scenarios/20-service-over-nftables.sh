# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 20: the node without iptables: a ClusterIP Service is reached from the node and from a pod through kube-proxy's nftables rules, the only rules there.
#
# there, a ClusterIP Service backed by a pod on that node is reached
# from the node and from a pod through kube-proxy's nftables rules (its
# element and chain in table ip kube-proxy, conntrack's translation; no
# other table, no KUBE-SERVICES)
#
# Runs on: kind, local. Needs: nftables-node.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)

SCENARIO_TITLE="the node without iptables: a ClusterIP Service is reached from the node and from a pod through kube-proxy's nftables rules, the only rules there"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS="nftables-node"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s20_service_nftables

S20_CHAIN=""
s20_programmed() { # IP PODIP: the ClusterIP's element and the endpoint chain are in ip kube-proxy
  local table
  table=$(node_exec "$NFT_NODE" nft list table ip kube-proxy) || { WHY="nft list table ip kube-proxy failed"; return 1; }
  S20_CHAIN=$(grep -oE "${1//./\\.} \. tcp \. 80 : goto service-[A-Z0-9]+-$S20_NS/web/tcp/http" <<<"$table" | sed 's/.* goto //') || true
  WHY="no element '$1 . tcp . 80 : goto service-...-$S20_NS/web/tcp/http' in map service-ips"
  [ -n "$S20_CHAIN" ] || return 1
  WHY="no endpoint chain dnat to $2:8080"
  grep -qF "dnat to $2:8080" <<<"$table"
}

S20_NS=nfguard-e2e-s20
s20_service_nftables() {
  local ns=$S20_NS ip podip out tables ruleset ct chain
  nftables_node
  scenario_ns "$ns"
  nft_node_pod web "[\"sh\", \"-c\", \"mkdir -p /tmp/www && echo '$S20_BODY' >/tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www\"]" |
    kubectl -n "$ns" apply -f - >/dev/null
  nft_node_pod client '["sleep", "infinity"]' | kubectl -n "$ns" apply -f - >/dev/null
  kubectl -n "$ns" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
YAML
  kubectl -n "$ns" wait --for=condition=Ready pod/web pod/client --timeout=120s >/dev/null ||
    fail "the pods web and client are not Ready on $NFT_NODE"
  ip=$(get service web '{.spec.clusterIP}' -n "$ns")
  podip=$(get pod web '{.status.podIP}' -n "$ns")
  if [ -z "$ip" ] || [ -z "$podip" ]; then fail "Service web has ClusterIP '$ip', pod web IP '$podip'"; fi
  wait_for 60 "kube-proxy on $NFT_NODE to program $ip:80 -> $podip:8080 in table ip kube-proxy" s20_programmed "$ip" "$podip"
  chain=$S20_CHAIN
  ok "table ip kube-proxy on $NFT_NODE: map service-ips has '$ip . tcp . 80 : goto $chain', an endpoint chain does dnat to $podip:8080"
  node_exec "$NFT_NODE" nft list chain ip kube-proxy "$chain" | show

  # No other rule set on the node: only kube-proxy's native tables exist,
  # no iptables-owned table of either backend, no KUBE-SERVICES anywhere.
  tables=$(node_exec "$NFT_NODE" nft list tables)
  [ "$tables" = $'table ip kube-proxy\ntable ip6 kube-proxy' ] ||
    fail "$NFT_NODE holds nftables tables besides kube-proxy's: $(tr '\n' ' ' <<<"$tables")"
  ruleset=$(node_exec "$NFT_NODE" nft list ruleset)
  if grep -q 'KUBE-SERVICES' <<<"$ruleset"; then fail "$NFT_NODE has a KUBE-SERVICES chain"; fi
  out=$(node_exec "$NFT_NODE" cat /proc/net/ip_tables_names 2>/dev/null || true)
  [ -z "$out" ] || fail "$NFT_NODE's network namespace has legacy xtables tables: $out"
  ok "$NFT_NODE's only tables are ip/ip6 kube-proxy (no iptables-nft table, no legacy table, no KUBE-SERVICES chain, no iptables command)"

  out=$(node_exec "$NFT_NODE" curl -sS --max-time 10 "http://$ip/") || fail "the node could not reach http://$ip/: $out"
  [ "$out" = "$S20_BODY" ] || fail "the node got '$out' from http://$ip/"
  ok "from $NFT_NODE's network namespace: http://$ip/ answers '$out'"
  # busybox nc: the image's busybox wget crashes (SIGSEGV) on any URL.
  out=$(kubectl -n "$ns" exec client -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 10 $ip 80" 2>&1) ||
    fail "pod client could not reach $ip:80: $out"
  out=${out//$'\r'/}
  if [[ "$(sed -n 1p <<<"$out")" != "HTTP/1."?" 200 OK" ]] || ! grep -qxF "$S20_BODY" <<<"$out"; then
    fail "pod client got from http://$ip/: $out"
  fi
  ok "from pod client ($(get pod client '{.status.podIP}' -n "$ns")) on $NFT_NODE: http://$ip/ answers $(sed -n 1p <<<"$out"), '$S20_BODY'"
  # The connections were translated to the pod: the node's conntrack entries
  # for the ClusterIP reply from the pod's address (only kube-proxy's table
  # has a dnat rule on this node).
  ct=$(node_exec "$NFT_NODE" conntrack -L -p tcp --orig-dst "$ip" 2>/dev/null) || true
  grep -qE "dst=$ip sport=[0-9]+ dport=80 .*src=$podip " <<<"$ct" ||
    fail "no conntrack entry of $NFT_NODE translates $ip:80 to $podip: $ct"
  ok "conntrack on $NFT_NODE: $ip:80 translated to $podip:8080 ($(grep -cE "dst=$ip .*src=$podip " <<<"$ct") connection(s))"
}
