# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Reading the cluster and reaching into its nodes (sourced by e2e/scenarios.sh
# for every scenario): one field of an object, a profile's conditions, a
# node's taints; node_exec runs a command in a node's network and mount
# namespace (local: `e2e/local-cluster.sh node`, kind: `docker exec`; the
# node has its own iptables, iptables-save and curl), node_kube_proxy freezes
# or resumes its kube-proxy (SIGSTOP/SIGCONT).
#
# NFT_NODE (NFGUARD_E2E_NFTABLES_NODE; local: e2e-nftables) has no iptables
# command at all and runs kube-proxy in nftables mode: its Service rules
# live only in the native tables ip/ip6 kube-proxy, which iptables never
# lists. Each of its scenarios first checks that premise (nftables_node).

# node_exec NODE CMD...: CMD in the node's network and mount namespace.
node_exec() {
  local node=$1
  shift
  case "$PROVIDER" in
    local) "$REPO/e2e/local-cluster.sh" node "$node" "$@" </dev/null ;;
    kind) docker exec "$node" "$@" </dev/null ;;
  esac
}

# node_kube_proxy NODE stop|cont: freeze or resume the node's kube-proxy.
node_kube_proxy() {
  local node=$1 sig
  case "$2" in stop) sig=STOP ;; cont) sig=CONT ;; *) return 2 ;; esac
  case "$PROVIDER" in
    local) "$REPO/e2e/local-cluster.sh" kube-proxy "$node" "$2" </dev/null ;;
    # kind runs kube-proxy as a pod; its process is visible from the node.
    kind) docker exec "$node" sh -c "pids=\$(pgrep -x kube-proxy) && kill -$sig \$pids" </dev/null ;;
  esac
}

# node_exec_in NODE CMD...: the same with this script's stdin.
node_exec_in() {
  local node=$1
  shift
  case "$PROVIDER" in
    local) "$REPO/e2e/local-cluster.sh" node "$node" "$@" ;;
    kind) docker exec -i "$node" "$@" ;;
  esac
}

# get KIND NAME JSONPATH [ARGS...]: one field, empty when absent.
get() {
  local kind=$1 name=$2 path=$3
  shift 3
  kubectl get "$kind" "$name" "$@" -o jsonpath="$path" 2>/dev/null || true
}

nnp() { get nodenetfilterprofile "$1" "$2"; }

condition() { # NODE TYPE FIELD: a profile condition's field
  nnp "$1" "{.status.conditions[?(@.type==\"$2\")].$3}"
}

node_ready() { get node "$1" '{.status.conditions[?(@.type=="Ready")].status}'; }

nfguard_taints() { # NODE: key=value:effect of nfguard's taints, one a line
  get node "$1" '{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}' | grep '^nfguard\.io/' || true
}

epoch() { date -u -d "$1" +%s 2>/dev/null || echo 0; }

# node_taint NODE KEY=VALUE:EFFECT YES|NO: NODE carries exactly that taint
# (NO: no taint KEY=VALUE, whatever its effect).
node_taint() {
  local t
  # Read directly: an unreadable Node must not pass for an untainted one.
  t=$(kubectl get node "$1" -o jsonpath='{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}') ||
    { WHY="cannot read node $1"; return 1; }
  WHY="$1 carries: ${t:-no taint}"
  case "$3" in
    YES) grep -qxF "$2" <<<"$t" ;;
    NO) if grep -qF "${2%:*}:" <<<"$t"; then return 1; fi ;;
  esac
}

# new_rules_node: RULES_NODE is the first nft node whose live rules need
# iptables >= 1.8.8 (status.minReaderVersion): iptables-nft 1.8.7 there is the incident.
RULES_NODE=""
new_rules_node() {
  local n
  for n in "${NODES[@]}"; do
    if [ "$(nnp "$n" '{.status.activeBackend}')" = nft ] && [ -n "$(nnp "$n" '{.status.minReaderVersion}')" ]; then
      RULES_NODE=$n
      return 0
    fi
  done
  fail "no nft node whose rules need iptables >= 1.8.8 (status.minReaderVersion)"
}

# keep_out_of_namespace NS KEEP...: every NetfilterPolicy but KEEP... stops
# selecting NS (a `kubernetes.io/metadata.name NotIn` requirement); each
# selector is restored at the end. The strictest policy wins, so the shipped
# `action: Deny` default would otherwise deny what the scenario's Taint
# policy admits.
keep_out_of_namespace() {
  local ns=$1 p sel path expr
  shift
  expr="{\"key\":\"kubernetes.io/metadata.name\",\"operator\":\"NotIn\",\"values\":[\"$ns\"]}"
  for p in $(kubectl get netfilterpolicies -o jsonpath='{.items[*].metadata.name}'); do
    [[ " $* " != *" $p "* ]] || continue
    sel=$(get netfilterpolicy "$p" '{.spec.namespaceSelector}')
    if [ -z "$sel" ]; then
      defer kubectl patch netfilterpolicy "$p" --type=json -p='[{"op":"remove","path":"/spec/namespaceSelector"}]'
      kubectl patch netfilterpolicy "$p" --type=merge \
        -p "{\"spec\":{\"namespaceSelector\":{\"matchExpressions\":[$expr]}}}" >/dev/null
    else
      defer kubectl patch netfilterpolicy "$p" --type=json \
        -p="[{\"op\":\"replace\",\"path\":\"/spec/namespaceSelector\",\"value\":$sel}]"
      path=/spec/namespaceSelector/matchExpressions
      if [ -n "$(get netfilterpolicy "$p" '{.spec.namespaceSelector.matchExpressions}')" ]; then
        kubectl patch netfilterpolicy "$p" --type=json -p="[{\"op\":\"add\",\"path\":\"$path/-\",\"value\":$expr}]" >/dev/null
      else
        kubectl patch netfilterpolicy "$p" --type=json -p="[{\"op\":\"add\",\"path\":\"$path\",\"value\":[$expr]}]" >/dev/null
      fi
    fi
    say "NetfilterPolicy $p: does not select namespace $ns for this scenario"
  done
}

# reporter_pid NODE: the reporter's pid as the node sees it (its argv and NODE_NAME).
reporter_pid() {
  # shellcheck disable=SC2016 # expanded by the node's shell
  node_exec "$1" bash -c '
    for p in /proc/[0-9]*; do
      argv=$(tr "\0" " " <"$p/cmdline" 2>/dev/null) || continue
      case "$argv" in *" reporter --host-root "*) ;; *) continue ;; esac
      env=$(tr "\0" "\n" <"$p/environ" 2>/dev/null) || continue
      while IFS= read -r line; do
        [ "$line" != "NODE_NAME=$0" ] || { echo "${p#/proc/}"; exit 0; }
      done <<<"$env"
    done
    exit 1' "$1"
}

# kubelet_log NODE: the node's kubelet log, whole.
kubelet_log() {
  case "$PROVIDER" in
    local) cat "${NFGUARD_E2E_LOG_DIR:?the local cluster exports NFGUARD_E2E_LOG_DIR}/kubelet-$1.log" ;;
    kind) docker exec "$1" journalctl -u kubelet --no-pager </dev/null ;;
  esac
}

# The premise: NFT_NODE is a worker node without any iptables command, and
# its kube-proxy table exists.
nftables_node() {
  local found tables
  [[ " ${NODES[*]} " == *" $NFT_NODE "* ]] ||
    fail "NFGUARD_E2E_NFTABLES_NODE=$NFT_NODE is not a worker node (${NODES[*]})"
  # shellcheck disable=SC2016 # expanded by the node's shell
  found=$(node_exec "$NFT_NODE" sh -c 'for c in iptables ip6tables iptables-nft iptables-legacy \
    iptables-save iptables-restore xtables-nft-multi xtables-legacy-multi; do command -v "$c"; done; true')
  [ -z "$found" ] || fail "$NFT_NODE has iptables commands: $(tr '\n' ' ' <<<"$found")"
  tables=$(node_exec "$NFT_NODE" nft list tables) || fail "nft list tables failed on $NFT_NODE"
  grep -qxF 'table ip kube-proxy' <<<"$tables" ||
    fail "$NFT_NODE has no table ip kube-proxy (is kube-proxy in nftables mode?): $(tr '\n' ' ' <<<"$tables")"
}
