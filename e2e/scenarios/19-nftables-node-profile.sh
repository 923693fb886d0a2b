# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 19: the node without iptables: profile nft, kube-proxy mode nftables, kube-proxy's native table, marker chains not expected, no KubeletChainsMissing, Consistent; kubelet logs that it skips them; its reporter sees no iptables.
#
# the node without iptables (NFGUARD_E2E_NFTABLES_NODE): its profile
# says activeBackend nft, kubeProxyMode nftables, ip/kube-proxy among
# nativeTables, kubeletMarkers notExpected, no KubeletChainsMissing,
# Consistent=True; its kubelet logs that it skips the marker chains;
# its reporter sees nft and no iptables binary
#
# Runs on: kind, local. Needs: nftables-node.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes: nothing to undo (it changes nothing it leaves).

SCENARIO_TITLE="the node without iptables: profile nft, kube-proxy mode nftables, kube-proxy's native table, marker chains not expected, no KubeletChainsMissing, Consistent; kubelet logs that it skips them; its reporter sees no iptables"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS="nftables-node"
SCENARIO_MAY_SKIP_ON=""
SCENARIO_RUN=s19_nftables_profile

S19_PROFILE=""
s19_profile_native() { # NFT_NODE's profile says nft, nftables, notExpected (WHY otherwise)
  local j v
  j=$(kubectl get nodenetfilterprofile "$NFT_NODE" -o json 2>/dev/null) || { WHY="no profile"; return 1; }
  S19_PROFILE=$j
  v=$(jq -r '.status.activeBackend // "absent"' <<<"$j")
  [ "$v" = nft ] || { WHY="activeBackend $v"; return 1; }
  v=$(jq -r '.status.kubeProxyMode // "absent"' <<<"$j")
  [ "$v" = nftables ] || { WHY="kubeProxyMode $v"; return 1; }
  v=$(jq -r '[.status.nativeTables[]? | select(.family == "ip" and .name == "kube-proxy") | .chains] | first // 0' <<<"$j")
  [ "$v" -gt 0 ] ||
    { WHY="nativeTables has no ip/kube-proxy with chains: $(jq -c '.status.nativeTables' <<<"$j")"; return 1; }
  v=$(jq -r '.status.kubeletMarkers.state // "absent"' <<<"$j")
  [ "$v" = notExpected ] || { WHY="kubeletMarkers.state $v"; return 1; }
  v=$(jq -r '[.status.hazards[]?.code] | join(" ")' <<<"$j")
  [[ " $v " != *" KubeletChainsMissing "* ]] || { WHY="hazards: $v"; return 1; }
  v=$(jq -r '.status.conditions[]? | select(.type == "Consistent") | "\(.status) \(.reason)"' <<<"$j")
  [ "${v%% *}" = True ] || { WHY="Consistent ${v:-absent}"; return 1; }
}

s19_nftables_profile() {
  local log pid listing kminor skipped
  nftables_node
  wait_for 150 "$NFT_NODE's profile: activeBackend nft, kubeProxyMode nftables, ip/kube-proxy in nativeTables, kubeletMarkers notExpected, no KubeletChainsMissing, Consistent=True" s19_profile_native
  ok "$NFT_NODE: activeBackend nft, kubeProxyMode nftables, kubeletMarkers $(jq -c '.status.kubeletMarkers' <<<"$S19_PROFILE"), hazards [$(jq -r '[.status.hazards[]?.code] | join(", ")' <<<"$S19_PROFILE")], Consistent=True ($(jq -r '.status.conditions[] | select(.type == "Consistent") | .reason' <<<"$S19_PROFILE"))"
  jq -r '.status.nativeTables[] | "\(.family)/\(.name): \(.chains) chains, \(.rules) rules, \(.sets) sets"' <<<"$S19_PROFILE" | show
  # kubelet's own account (pkg/kubelet/kubelet_network_linux.go): no
  # iptables command for either family, so no marker chains. 1.34 says so
  # (kubernetes#129826); 1.30 tries, fails and says that instead.
  log=$(kubelet_log "$NFT_NODE") || fail "cannot read $NFT_NODE's kubelet log"
  kminor=$(kubectl get node "$NFT_NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion}')
  kminor=${kminor#v1.}
  kminor=${kminor%%.*}
  skipped='"No iptables support on this system; not creating the KUBE-IPTABLES-HINT chain"'
  [ "$kminor" -ge 34 ] || skipped='"Failed to initialize iptables rules; some functionality may be missing."'
  grep -qF "$skipped" <<<"$log" ||
    fail "$NFT_NODE's kubelet (1.$kminor) did not log $skipped"
  if grep -qF 'Initialized iptables rules' <<<"$log"; then
    fail "$NFT_NODE's kubelet initialized iptables rules: $(grep -F 'Initialized iptables rules' <<<"$log")"
  fi
  ok "$NFT_NODE's kubelet (1.$kminor) log: $(grep -F "${skipped//\"/}" <<<"$log" | sed -n 1p)"
  # The reporter reads the node's binaries through its /host mounts: it
  # must see the same host (nft, no iptables).
  pid=$(reporter_pid "$NFT_NODE") || fail "no reporter process found on $NFT_NODE"
  listing=$(node_exec "$NFT_NODE" ls -A "/proc/$pid/root/host/usr/sbin") || fail "cannot list the reporter's /host/usr/sbin"
  if grep -E '^(ip6?|arp|eb)tables|^xtables-' <<<"$listing"; then
    fail "the reporter on $NFT_NODE sees iptables binaries under /host/usr/sbin"
  fi
  grep -qx nft <<<"$listing" || fail "the reporter on $NFT_NODE does not see nft under /host/usr/sbin"
  ok "the reporter (pid $pid on $NFT_NODE) sees /host/usr/sbin/nft and no iptables, ip6tables, arptables, ebtables or xtables binary"
}
