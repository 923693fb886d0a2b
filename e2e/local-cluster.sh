#!/usr/bin/env bash
# A real Kubernetes cluster on this one machine, for nfguard's e2e scenarios
# where kind cannot run (no Docker engine). Everything lives in network
# namespaces this script creates; the machine's own network namespace and its
# netfilter rules are never touched.
#
#   e2e/local-cluster.sh up       build (cached), start, install nfguard; prints
#                                 `export KUBECONFIG=...`,
#                                 `export NFGUARD_E2E_REGISTRY=...` and the
#                                 private registry's NFGUARD_E2E_PRIVATE_*
#                                 on stdout
#   e2e/local-cluster.sh down     stop everything and remove every process,
#                                 namespace, mount, cgroup and file it made
#   e2e/local-cluster.sh env      print the export lines of a running cluster
#   e2e/local-cluster.sh install [kustomize|helm]   install nfguard on the
#                                 running cluster (after an uninstall), or
#                                 upgrade it as docs/install.md says (kustomize:
#                                 the same apply; helm: CRDs first, then helm
#                                 upgrade --reset-then-reuse-values)
#   e2e/local-cluster.sh node NODE CMD...   run CMD inside a node (its network
#                                 and mount namespace: the node's view)
#   e2e/local-cluster.sh cp CMD...  exec CMD in the control plane's network
#                                 namespace (the e2e's live Prometheus,
#                                 e2e/lib/monitoring.sh: its pid is CMD's)
#   e2e/local-cluster.sh diagnose print nodes, profiles, pods and component logs
#   e2e/local-cluster.sh kube-proxy NODE stop|cont   freeze (SIGSTOP) or resume
#                                 the node's kube-proxy (e2e scenario 6)
#   e2e/local-cluster.sh pod-network down|up   an outage of the pod network
#                                 (e2e scenario 31): the control plane's and
#                                 every node's routes to the other nodes' pod
#                                 ranges become blackholes, as when an overlay
#                                 is down mid-rollout or a managed control
#                                 plane never routes to pod IPs; up restores
#                                 them (a pod still reaches its own node)
#   e2e/local-cluster.sh restart   a power cut of the whole cluster: the
#                                 control plane and every node (daemons,
#                                 shims, containers) killed at once, then
#                                 started again from their state on disk
#                                 (e2e scenario 32); nothing is reinstalled
#   e2e/local-cluster.sh node-iptables NODE VERSION|restore   give the node
#                                 Debian's iptables VERSION (1.8.7, 1.8.9,
#                                 1.8.11) for real in its mount namespace and
#                                 restart its kubelet and kube-proxy; restore
#                                 undoes it (e2e scenario 24)
#
# Shape (docs/e2e.md):
#   netns nfguard-e2e-cp      etcd, kube-apiserver, controller-manager,
#                             scheduler, the test registry (:5000) and the
#                             one wanting credentials (:5001); bridge e2ebr0
#                             10.77.0.1/24 (the apiserver's advertise address)
#   netns nfguard-e2e-nft     node e2e-nft, 10.77.0.2, pods 10.88.1.0/24:
#                             containerd, kubelet, kube-proxy; iptables -> nft
#   netns nfguard-e2e-legacy  node e2e-legacy, 10.77.0.3, pods 10.88.2.0/24:
#                             the same with iptables -> legacy
#   netns nfguard-e2e-nftables  node e2e-nftables, 10.77.0.4, pods 10.88.3.0/24:
#                             no iptables command at all (hidden in its mount
#                             namespace), kube-proxy in nftables mode
# Each node also has its own mount namespace, where /etc/alternatives (what
# the reporter reads under /host), /var/log, /run/containerd and the sysctls
# kubelet would otherwise set on the whole machine are the node's own.
# The root namespace reaches the apiserver and the registry through two
# loopback forwarders (socat over a unix socket): 127.0.0.1:$API_PORT and
# 127.0.0.1:$REGISTRY_PORT. Images pushed there are pulled by the nodes under
# the same name (containerd mirror) or as 10.77.0.1:5000/... (nfguard's
# webhook and controller, which run in pods, use that name).
#
# Env: NFGUARD_E2E_STATE (/var/lib/nfguard-e2e), NFGUARD_E2E_CACHE
# (/var/cache/nfguard-e2e: Kubernetes binaries, base files), NFGUARD_E2E_API_PORT
# (36443), NFGUARD_E2E_REGISTRY_PORT (35000), NFGUARD_E2E_PRIVATE_REGISTRY_PORT
# (35001), NFGUARD_FIXTURES (node-iptables: the Debian releases; default
# target/fixtures), NFGUARD_E2E_BINARY (the nfguard
# binary for the image; default target/release/nfguard, built if missing),
# NFGUARD_E2E_IMAGE_TAR (a prebuilt nfguard image archive named
# ghcr.io/nfguard/nfguard:e2e), NFGUARD_E2E_NO_INSTALL=1 (no nfguard),
# NFGUARD_E2E_INSTALL=kustomize|helm (how up installs nfguard: manifests/
# through an overlay, or charts/nfguard with values; default kustomize),
# NFGUARD_E2E_SOURCE (where install reads manifests/, crds/ and charts/
# from; default this repository: e2e/upgrade.sh points it at an earlier
# commit), NFGUARD_E2E_REPORTER_UNREADY_NODE (install waits for the reporter
# on every node but this one: e2e/upgrade.sh's earlier version cannot
# describe a host without iptables), NFGUARD_E2E_IMAGE (the nfguard image's name; default
# ghcr.io/nfguard/nfguard:e2e),
# NFGUARD_E2E_BENCH=1 (scripts/bench-cluster.sh: kube-controller-manager
# without the node-lifecycle and ttl controllers, which would mark the
# benchmark's kubelet-less hollow Nodes unreachable, taint them and annotate
# each one; the real nodes' not-ready taint is removed once they are Ready,
# as that controller would).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

STATE=${NFGUARD_E2E_STATE:-/var/lib/nfguard-e2e}
CACHE=${NFGUARD_E2E_CACHE:-/var/cache/nfguard-e2e}
API_PORT=${NFGUARD_E2E_API_PORT:-36443}
REGISTRY_PORT=${NFGUARD_E2E_REGISTRY_PORT:-35000}
PRIVATE_REGISTRY_PORT=${NFGUARD_E2E_PRIVATE_REGISTRY_PORT:-35001}
RUN=/run/nfguard-e2e
NS_DIR=$RUN/ns
PREFIX=nfguard-e2e
CP_NS=$PREFIX-cp
BRIDGE=e2ebr0
CP_IP=10.77.0.1
SERVICE_CIDR=10.0.0.0/24
CLUSTER_CIDR=10.88.0.0/16
NODES=(e2e-nft e2e-legacy e2e-nftables)
declare -A NODE_IP=([e2e-nft]=10.77.0.2 [e2e-legacy]=10.77.0.3 [e2e-nftables]=10.77.0.4)
declare -A NODE_PODS=([e2e-nft]=10.88.1.0/24 [e2e-legacy]=10.88.2.0/24 [e2e-nftables]=10.88.3.0/24)
# The node's iptables: what its alternatives select, or none: no iptables,
# ip6tables, arptables, ebtables or xtables binary exists in its mount
# namespace (a Talos or SLE Micro like host; kubelet then skips its marker
# chains, kubernetes#129826).
declare -A NODE_BACKEND=([e2e-nft]=nft [e2e-legacy]=legacy [e2e-nftables]=none)
# kube-proxy's mode (KubeProxyConfiguration.mode); nftables needs only the
# nft command (>= 1.0.1) and a kernel >= 5.13.
declare -A NODE_PROXY_MODE=([e2e-nft]=iptables [e2e-legacy]=iptables [e2e-nftables]=nftables)
REGISTRY_PULL=$CP_IP:5000
# A second registry that answers only with credentials (htpasswd, Basic):
# private images (e2e scenario 25). Its user and password are made at up.
PRIVATE_REGISTRY_PULL=$CP_IP:5001
NFGUARD_IMAGE=${NFGUARD_E2E_IMAGE:-ghcr.io/nfguard/nfguard:e2e}
SRC=${NFGUARD_E2E_SOURCE:-$REPO}
PAUSE_IMAGE=registry.k8s.io/pause:3.10
# The identity (CN) of the API server's client certificate for the webhook,
# the only one the webhook answers (NFGUARD_CLIENT_CERT_NAMES).
WEBHOOK_CLIENT_NAME=kube-apiserver-nfguard-client
KCM_CONTROLLERS='*'
if [ "${NFGUARD_E2E_BENCH:-}" = 1 ]; then
  KCM_CONTROLLERS='*,-node-lifecycle-controller,-ttl-controller'
fi
APT_PACKAGES=(containerd runc containernetworking-plugins conntrack iptables iproute2
  util-linux socat openssl docker-registry skopeo umoci jq busybox-static gcc libc6-dev curl)

log() { printf 'local-cluster: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (network namespaces, containerd, kubelet)"

node_ns() { echo "$PREFIX-${1#e2e-}"; }
# in_cp CMD...: run in the control plane's network namespace.
in_cp() { nsenter --net="/run/netns/$CP_NS" -- "$@"; }
# in_node NODE CMD...: run with the node's network and mount namespaces.
in_node() {
  local node=$1
  shift
  nsenter --net="/run/netns/$(node_ns "$node")" --mount="$NS_DIR/mnt-$node" -- "$@"
}

# start NAME CMD...: a long-running component, logs in $STATE/logs/NAME.log.
start() {
  local name=$1
  shift
  mkdir -p "$STATE/logs" "$RUN/pids"
  # The daemons outlive this script (KEEP_CLUSTER=1): they must not inherit
  # its other open files, above all the lock of `flock
  # /tmp/nfguard-cluster.lock e2e/local.sh`, which they would hold until
  # `down`, and `flock ... down` would wait for itself.
  (close_inherited_fds; exec setsid "$@") >>"$STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/pids/$name.pid"
}
close_inherited_fds() {
  local fd
  for fd in "/proc/$BASHPID/fd"/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] || continue
    eval "exec $fd>&-" 2>/dev/null || true
  done
}
running() { [ -f "$RUN/pids/$1.pid" ] && kill -0 "$(cat "$RUN/pids/$1.pid")" 2>/dev/null; }

# wait_for SECONDS WHAT CMD...: retry CMD every second.
wait_for() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after $1 s waiting for $what"
    sleep 1
  done
}

kctl() { "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

install_packages() {
  local missing=() p status
  for p in "${APT_PACKAGES[@]}"; do
    # Read whole: no early-exit reader after a pipe.
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# ---- certificates -------------------------------------------------------------
# One CA signs the serving certificate and every client identity of the
# cluster; a CA of its own signs the certificate the API server presents to
# nfguard's webhook (only that one may call /validate).
cert() { # name CN [O] [SANs] [CA]
  local name=$1 cn=$2 o=${3:-} sans=${4:-} ca=${5:-ca} subj ext
  [ -f "$STATE/pki/$name.crt" ] && return 0
  subj="/CN=$cn"
  [ -n "$o" ] && subj="/O=$o$subj"
  ext=$(mktemp)
  if [ -n "$sans" ]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" >"$ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' >"$ext"
  fi
  openssl req -new -newkey rsa:2048 -nodes -keyout "$STATE/pki/$name.key" -subj "$subj" \
    -out "$STATE/pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$STATE/pki/$name.csr" -CA "$STATE/pki/$ca.crt" -CAkey "$STATE/pki/$ca.key" \
    -CAcreateserial -days 30 -extfile "$ext" -out "$STATE/pki/$name.crt" 2>/dev/null
  rm -f "$ext" "$STATE/pki/$name.csr"
}

kubeconfig() { # file cert-name server
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nfguard-e2e
  cluster:
    server: $3
    certificate-authority-data: $(base64 -w0 "$STATE/pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$STATE/pki/$2.crt")
    client-key-data: $(base64 -w0 "$STATE/pki/$2.key")
contexts:
- name: nfguard-e2e
  context: {cluster: nfguard-e2e, user: $2}
current-context: nfguard-e2e
EOF
}

make_pki() {
  mkdir -p "$STATE/pki"
  if [ ! -f "$STATE/pki/ca.crt" ]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$STATE/pki/ca.key" -days 30 \
      -subj "/CN=nfguard-e2e-ca" -out "$STATE/pki/ca.crt" 2>/dev/null
    openssl genrsa -out "$STATE/pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$STATE/pki/sa.key" -pubout -out "$STATE/pki/sa.pub" 2>/dev/null
  fi
  if [ ! -f "$STATE/pki/webhook-client-ca.crt" ]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$STATE/pki/webhook-client-ca.key" -days 30 \
      -subj "/CN=nfguard-e2e-webhook-client-ca" -out "$STATE/pki/webhook-client-ca.crt" 2>/dev/null
  fi
  cert apiserver-webhook-client "$WEBHOOK_CLIENT_NAME" "" "" webhook-client-ca
  admission_config
  cert apiserver kube-apiserver "" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$CP_IP,IP:10.0.0.1"
  cert admin kubernetes-admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  cert kube-proxy system:kube-proxy
  local node
  for node in "${NODES[@]}"; do cert "kubelet-$node" "system:node:$node" system:nodes; done
  local inside="https://$CP_IP:6443"
  kubeconfig "$STATE/admin.kubeconfig" admin "https://127.0.0.1:$API_PORT"
  kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager "$inside"
  kubeconfig "$STATE/scheduler.kubeconfig" scheduler "$inside"
  kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy "$inside"
  for node in "${NODES[@]}"; do kubeconfig "$STATE/kubelet-$node.kubeconfig" "kubelet-$node" "$inside"; done
}

# The API server's AdmissionConfiguration: for calls to nfguard's webhook
# (the Service's host, port 443) it presents apiserver-webhook-client, which
# the install trusts through the ConfigMap nfguard-webhook-client-ca
# (docs/webhook.md, "Client certificates").
admission_config() {
  cat >"$STATE/webhook-client.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: nfguard-webhook.nfguard-system.svc
  user:
    client-certificate: $STATE/pki/apiserver-webhook-client.crt
    client-key: $STATE/pki/apiserver-webhook-client.key
EOF
  cat >"$STATE/admission-config.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $STATE/webhook-client.kubeconfig
EOF
}

# ---- network ------------------------------------------------------------------
make_network() {
  ip netns add "$CP_NS"
  in_cp ip link set lo up
  in_cp ip link add "$BRIDGE" type bridge
  in_cp ip addr add "$CP_IP/24" dev "$BRIDGE"
  in_cp ip link set "$BRIDGE" up
  in_cp sysctl -qw net.ipv4.ip_forward=1
  local node ns other
  for node in "${NODES[@]}"; do
    ns=$(node_ns "$node")
    ip netns add "$ns"
    # Both ends are created inside our namespaces: nothing appears in the root one.
    ip -n "$CP_NS" link add "v-${node#e2e-}" type veth peer name eth0 netns "$ns"
    ip -n "$CP_NS" link set "v-${node#e2e-}" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "${NODE_IP[$node]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$CP_IP"
    ip -n "$CP_NS" route add "${NODE_PODS[$node]}" via "${NODE_IP[$node]}"
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
  done
  for node in "${NODES[@]}"; do
    for other in "${NODES[@]}"; do
      [ "$node" = "$other" ] || ip -n "$(node_ns "$node")" route add "${NODE_PODS[$other]}" via "${NODE_IP[$other]}"
    done
  done
}

# pod_network down|up: blackhole or restore every route make_network added
# to a pod range (in the control plane's namespace and between nodes); the
# routes of each node to its own pods (cni0) stay. Idempotent.
pod_network() {
  local node other how
  for node in "${NODES[@]}"; do
    case "$1" in
      down) how=(blackhole "${NODE_PODS[$node]}") ;;
      up) how=("${NODE_PODS[$node]}" via "${NODE_IP[$node]}") ;;
      *) die "pod-network down|up, not '$1'" ;;
    esac
    ip -n "$CP_NS" route replace "${how[@]}"
    for other in "${NODES[@]}"; do
      [ "$node" = "$other" ] || ip -n "$(node_ns "$other")" route replace "${how[@]}"
    done
  done
  log "pod network $1: $(ip -n "$CP_NS" route show | grep -c '^blackhole' || true) pod ranges blackholed in the control plane"
}

# forward NAME PORT TARGET: 127.0.0.1:PORT in the root namespace -> TARGET in
# the control plane's namespace, through a unix socket (no route, no
# interface and no rule added to the root namespace).
forward() {
  local name=$1 port=$2 target=$3 sock="$RUN/$1.sock"
  rm -f "$sock"
  start "forward-$name-in" nsenter --net="/run/netns/$CP_NS" -- \
    socat "UNIX-LISTEN:$sock,fork,mode=600" "TCP:$target"
  wait_for 10 "the $name socket" test -S "$sock"
  start "forward-$name-out" socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$sock"
}

# made_dir DIR: create a mount point the machine lacks, and remember to
# remove it again at down.
made_dir() {
  [ -d "$1" ] && return 0
  mkdir -p "$1"
  echo "$1" >>"$RUN/made-dirs"
}

# The minor version of the Kubernetes binaries in $BIN (30 for v1.30.14).
kube_minor() {
  local v
  v=$("$BIN/kubelet" --version)
  [[ $v =~ v1\.([0-9]+)\. ]] || die "cannot read the version of $BIN/kubelet: $v"
  echo "${BASH_REMATCH[1]}"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---- control plane ------------------------------------------------------------
start_control_plane() {
  mkdir -p "$STATE/etcd"
  start etcd nsenter --net="/run/netns/$CP_NS" -- "$BIN/etcd" --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
  wait_for 60 etcd in_cp curl -fsS http://127.0.0.1:2379/health

  start kube-apiserver nsenter --net="/run/netns/$CP_NS" -- "$BIN/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:2379 --bind-address=0.0.0.0 --secure-port=6443 \
    --advertise-address="$CP_IP" --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --admission-control-config-file="$STATE/admission-config.yaml" \
    --client-ca-file="$STATE/pki/ca.crt" \
    --tls-cert-file="$STATE/pki/apiserver.crt" --tls-private-key-file="$STATE/pki/apiserver.key" \
    --kubelet-client-certificate="$STATE/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$STATE/pki/apiserver-kubelet-client.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$STATE/pki/sa.pub" --service-account-signing-key-file="$STATE/pki/sa.key" \
    --allow-privileged=true --enable-aggregator-routing=true --kubelet-preferred-address-types=InternalIP \
    --audit-log-path="$STATE/logs/audit.log" --audit-policy-file="$STATE/audit-policy.yaml" \
    --audit-log-maxsize=200 --audit-log-maxbackup=1
  wait_for 120 "kube-apiserver /readyz" in_cp curl -fsS --cacert "$STATE/pki/ca.crt" \
    --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" "https://$CP_IP:6443/readyz"

  start kube-controller-manager nsenter --net="/run/netns/$CP_NS" -- "$BIN/kube-controller-manager" \
    --kubeconfig="$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file="$STATE/pki/sa.key" --root-ca-file="$STATE/pki/ca.crt" \
    --cluster-signing-cert-file="$STATE/pki/ca.crt" --cluster-signing-key-file="$STATE/pki/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --controllers="$KCM_CONTROLLERS"
  start kube-scheduler nsenter --net="/run/netns/$CP_NS" -- "$BIN/kube-scheduler" \
    --kubeconfig="$STATE/scheduler.kubeconfig" --authentication-kubeconfig="$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE/scheduler.kubeconfig" --bind-address=127.0.0.1 --leader-elect=false
}

start_registry() {
  mkdir -p "$STATE/registry"
  cat >"$STATE/registry.yaml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $STATE/registry}
  delete: {enabled: true}
http: {addr: "$CP_IP:5000"}
EOF
  start registry nsenter --net="/run/netns/$CP_NS" -- docker-registry serve "$STATE/registry.yaml"
  wait_for 30 "the registry" in_cp curl -fsS "http://$REGISTRY_PULL/v2/"
}

# The private registry: htpasswd (bcrypt, by the system's libcrypt through
# perl) for one user with a random password, kept in
# $STATE/private-registry.auth as USER:PASSWORD (mode 600).
start_private_registry() {
  local dir="$STATE/registry-private" password salt
  mkdir -p "$dir/data"
  password=$(openssl rand -hex 16)
  salt=$(openssl rand -base64 24)
  salt=${salt//+/.}
  salt=${salt:0:22}
  (umask 077 && echo "nfguard-e2e:$password" >"$STATE/private-registry.auth")
  # shellcheck disable=SC2016 # the salt's prefix is literal
  NFGUARD_E2E_PW=$password NFGUARD_E2E_SALT=$salt perl -e \
    'print "nfguard-e2e:", crypt($ENV{NFGUARD_E2E_PW}, q($2b$10$) . $ENV{NFGUARD_E2E_SALT}), "\n"' >"$dir/htpasswd"
  # shellcheck disable=SC2016 # a literal bcrypt prefix
  grep -q '^nfguard-e2e:\$2b\$10\$' "$dir/htpasswd" || die "no bcrypt from this system's crypt(3): $dir/htpasswd"
  cat >"$dir/registry.yaml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $dir/data}
  delete: {enabled: true}
http: {addr: "$PRIVATE_REGISTRY_PULL"}
auth:
  htpasswd: {realm: nfguard-e2e, path: $dir/htpasswd}
EOF
  start registry-private nsenter --net="/run/netns/$CP_NS" -- docker-registry serve "$dir/registry.yaml"
  wait_for 30 "the private registry" in_cp curl -fsS -u "nfguard-e2e:$password" "http://$PRIVATE_REGISTRY_PULL/v2/"
  [ "$(in_cp curl -s -o /dev/null -w '%{http_code}' "http://$PRIVATE_REGISTRY_PULL/v2/")" = 401 ] ||
    die "the private registry answers without credentials"
}

# ---- nodes --------------------------------------------------------------------
# The cgroup every pod of a node lives under: below this shell's own cgroup,
# so that nothing of the cluster escapes what started it.
cgroup_root() {
  local base
  base=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
  echo "${base%/}/$PREFIX/$1"
}

make_cgroups() { # node
  local root h
  root=$(cgroup_root "$1")
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    [ "$(stat -fc %T "$h")" = cgroupfs ] || [ "$(stat -fc %T "$h")" = cgroup2fs ] || continue
    mkdir -p "$h$root"
    if [ -f "$h/cpuset.cpus" ]; then
      # cpuset children start empty: give each level its parent's cpus and mems.
      local d="$h" part
      for part in ${root//\// }; do
        d="$d/$part"
        [ -n "$(cat "$d/cpuset.cpus")" ] || cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
        [ -n "$(cat "$d/cpuset.mems")" ] || cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
      done
    fi
  done
}

# The node's mount namespace, persisted in $NS_DIR/mnt-NODE.
make_node_mounts() { # node
  local node=$1 dir="$STATE/nodes/$1" backend=${NODE_BACKEND[$1]} t
  mkdir -p "$dir/alternatives" "$dir/log" "$dir/sysctl" "$dir/cni/net.d" "$dir/cni/data"
  # The node's iptables backend, the way Debian's update-alternatives sets it.
  cp -a /etc/alternatives/. "$dir/alternatives/"
  if [ "$backend" = none ]; then
    # A host without the iptables package has none of its alternatives.
    rm -f "$dir/alternatives/"{ip,ip6,arp,eb}tables*
    hide_iptables "$dir/hide"
  else
    for t in iptables ip6tables; do
      ln -sfn "/usr/sbin/$t-$backend" "$dir/alternatives/$t"
      ln -sfn "/usr/sbin/$t-$backend-restore" "$dir/alternatives/$t-restore"
      ln -sfn "/usr/sbin/$t-$backend-save" "$dir/alternatives/$t-save"
    done
  fi
  # kubelet sets these on start; the node's copies keep the machine's own.
  echo 1 >"$dir/sysctl/overcommit_memory"
  echo 0 >"$dir/sysctl/panic_on_oom"
  echo 10 >"$dir/sysctl/panic"
  echo 1 >"$dir/sysctl/panic_on_oops"
  echo 1000000 >"$dir/sysctl/root_maxkeys"
  echo 25000000 >"$dir/sysctl/root_maxbytes"
  touch "$NS_DIR/mnt-$node"
  mkdir -p "$dir/kubelet" "$dir/cni/cache"
  made_dir /var/lib/kubelet
  made_dir /var/lib/cni
  # shellcheck disable=SC2016 # expanded by the inner shell
  nsenter --net="/run/netns/$(node_ns "$node")" -- unshare --mount="$NS_DIR/mnt-$node" --propagation private \
    sh -eu -c '
      dir=$1
      # /run: containerd state, pod network namespaces and the xtables
      # lock of this node alone.
      mount -t tmpfs -o mode=0755 tmpfs /run
      mount --bind "$dir/alternatives" /etc/alternatives
      mount --bind "$dir/log" /var/log
      mount --bind "$dir/kubelet" /var/lib/kubelet
      mount --bind "$dir/cni/cache" /var/lib/cni
      mount --bind "$dir/sysctl/overcommit_memory" /proc/sys/vm/overcommit_memory
      mount --bind "$dir/sysctl/panic_on_oom" /proc/sys/vm/panic_on_oom
      mount --bind "$dir/sysctl/panic" /proc/sys/kernel/panic
      mount --bind "$dir/sysctl/panic_on_oops" /proc/sys/kernel/panic_on_oops
      mount --bind "$dir/sysctl/root_maxkeys" /proc/sys/kernel/keys/root_maxkeys
      mount --bind "$dir/sysctl/root_maxbytes" /proc/sys/kernel/keys/root_maxbytes
      # No iptables (hide_iptables): the directory becomes a read-only
      # overlay whose top layer holds only whiteouts of the iptables binaries.
      for d in /usr/sbin /usr/bin; do
        [ -d "$dir/hide$d" ] || continue
        mount -t overlay overlay -o "ro,lowerdir=$dir/hide$d:$d" "$d"
      done
    ' sh "$dir"
}

# hide_iptables DIR: DIR/usr/sbin and DIR/usr/bin get an overlay whiteout (a
# 0/0 character device) for every iptables, ip6tables, arptables, ebtables
# and xtables binary of this machine; make_node_mounts lays them over the
# node's /usr/sbin and /usr/bin. /sbin and /bin are links to those (merged
# /usr). nft stays.
hide_iptables() {
  local hide=$1 d f
  for d in /sbin /bin; do
    [ "$(readlink "$d")" = "usr$d" ] || die "$d is not a link to usr$d: iptables there would stay visible"
  done
  for d in /usr/sbin /usr/bin; do
    mkdir -p "$hide$d"
    for f in "$d"/iptables* "$d"/ip6tables* "$d"/arptables* "$d"/ebtables* "$d"/xtables-*; do
      [ -e "$f" ] || [ -L "$f" ] || continue
      mknod "$hide$d/${f##*/}" c 0 0
    done
  done
}

start_node() { # node
  local node=$1 dir="$STATE/nodes/$1" ns
  ns=$(node_ns "$node")
  mkdir -p "$dir/containerd" "$dir/certs.d/$REGISTRY_PULL" "$dir/certs.d/127.0.0.1:$REGISTRY_PORT" \
    "$dir/manifests"
  make_cgroups "$node"
  make_node_mounts "$node"

  # The test registry speaks plain HTTP; the loopback name the root namespace
  # pushes to is mirrored to it, so either name pulls.
  printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
    "$REGISTRY_PULL" "$REGISTRY_PULL" >"$dir/certs.d/$REGISTRY_PULL/hosts.toml"
  mkdir -p "$dir/certs.d/$PRIVATE_REGISTRY_PULL"
  printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
    "$PRIVATE_REGISTRY_PULL" "$PRIVATE_REGISTRY_PULL" >"$dir/certs.d/$PRIVATE_REGISTRY_PULL/hosts.toml"
  cp "$dir/certs.d/$REGISTRY_PULL/hosts.toml" "$dir/certs.d/127.0.0.1:$REGISTRY_PORT/hosts.toml"
  cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd"
state = "/run/containerd"
[grpc]
  address = "$dir/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_selinux = false
  # This machine refuses a lower oom_score_adj than the caller's (no
  # CAP_SYS_RESOURCE); the sandbox's -998 would fail every pod.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$dir/certs.d"
EOF
  # portmap writes iptables rules: a node without iptables does without it
  # (bridge with ipMasq false writes no netfilter rule).
  local portmap=',
    {"type": "portmap", "capabilities": {"portMappings": true}}'
  [ "${NODE_BACKEND[$node]}" != none ] || portmap=""
  cat >"$dir/cni/net.d/10-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "nfguard-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/data",
              "ranges": [[{"subnet": "${NODE_PODS[$node]}"}]], "routes": [{"dst": "0.0.0.0/0"}]}}$portmap
  ]
}
EOF
  start_containerd "$node"
  ctr --address "$dir/containerd.sock" -n k8s.io images import "$CACHE/images/pause.tar" >/dev/null

  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$dir/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $(cgroup_root "$node")
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
address: ${NODE_IP[$node]}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
staticPodPath: $dir/manifests
podLogsDir: /var/log/pods
resolvConf: ""
clusterDomain: cluster.local
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
rotateCertificates: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
EOF
  start_kubelet "$node"

  # nftables mode is beta (on by default) from 1.31; 1.30 needs its gate.
  local proxy_gates=""
  if [ "${NODE_PROXY_MODE[$node]}" = nftables ] && [ "$(kube_minor)" -lt 31 ]; then
    proxy_gates="featureGates: {NFTablesProxyMode: true}"
  fi
  cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
hostnameOverride: $node
mode: ${NODE_PROXY_MODE[$node]}
$proxy_gates
clusterCIDR: $CLUSTER_CIDR
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# Leave the machine-wide conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start_kube_proxy "$node"
}

# The node's containerd, kubelet and kube-proxy, from the configurations
# start_node wrote (also node_iptables' restarts and cluster_restart).
start_containerd() { # node
  local node=$1 dir="$STATE/nodes/$1"
  start "containerd-$node" nsenter --net="/run/netns/$(node_ns "$node")" --mount="$NS_DIR/mnt-$node" -- \
    containerd --config "$dir/containerd.toml"
  wait_for 60 "containerd on $node" ctr --address "$dir/containerd.sock" version
}
start_kubelet() { # node
  local node=$1 dir="$STATE/nodes/$1"
  start "kubelet-$node" nsenter --net="/run/netns/$(node_ns "$node")" --mount="$NS_DIR/mnt-$node" -- \
    "$BIN/kubelet" --config="$dir/kubelet.yaml" --kubeconfig="$STATE/kubelet-$node.kubeconfig" \
    --hostname-override="$node" --node-ip="${NODE_IP[$node]}"
}
start_kube_proxy() { # node
  local node=$1
  start "kube-proxy-$node" nsenter --net="/run/netns/$(node_ns "$node")" --mount="$NS_DIR/mnt-$node" -- \
    "$BIN/kube-proxy" --config="$STATE/nodes/$node/kube-proxy.yaml"
}

node_ready() {
  [ "$(kctl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# ---- images and nfguard -----------------------------------------------------------
build_images() {
  mkdir -p "$CACHE/images"
  [ -f "$CACHE/images/pause.tar" ] || e2e/images/build.sh pause "$CACHE/images/pause.tar" "$PAUSE_IMAGE"
}

nfguard_binary() {
  local bin=${NFGUARD_E2E_BINARY:-$REPO/target/release/nfguard}
  if [ ! -x "$bin" ]; then
    log "building $bin"
    cargo build --release --locked --bin nfguard >&2
  fi
  echo "$bin"
}

ca_bundle_set() {
  [ -n "$(kctl get validatingwebhookconfiguration nfguard -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]
}

# The nfguard image, built once per cluster and imported into every node's
# containerd (imagePullPolicy Never: never pulled).
import_nfguard_image() {
  local node image=${NFGUARD_E2E_IMAGE_TAR:-}
  if [ -z "$image" ]; then
    image="$STATE/nfguard-image-${NFGUARD_IMAGE##*:}.tar"
    [ -f "$image" ] || scripts/build-image.sh --binary "$(nfguard_binary)" --out "$image" --name "$NFGUARD_IMAGE" >&2
  fi
  for node in "${NODES[@]}"; do
    ctr --address "$STATE/nodes/$node/containerd.sock" -n k8s.io images import "$image" >/dev/null
  done
}

# The README's install, with an overlay for the image (imported, never
# pulled) and the test registry, which speaks plain HTTP and lives on a
# private address (the in-cluster egress policy refuses those unless
# allowed: its one address is).
install_kustomize() {
  local overlay="$STATE/overlay" client_ca="" client_ca_patch=""
  rm -rf "$overlay"
  mkdir -p "$overlay"
  cp -r "$SRC/manifests" "$SRC/crds" "$overlay/"
  cp "$STATE/pki/webhook-client-ca.crt" "$overlay/webhook-client-ca.crt"
  # Only the API server's client certificate may call /validate (an earlier
  # nfguard, e2e/upgrade.sh, may not have the component).
  if [ -d "$SRC/manifests/webhook-client-ca" ]; then
    client_ca="components: [manifests/webhook-client-ca]
configMapGenerator:
  - name: nfguard-webhook-client-ca
    namespace: nfguard-system
    files: [ca.crt=webhook-client-ca.crt]
    options: {disableNameSuffixHash: true}"
    client_ca_patch="  - target: {kind: Deployment, name: nfguard-webhook, namespace: nfguard-system}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: NFGUARD_CLIENT_CERT_NAMES, value: \"$WEBHOOK_CLIENT_NAME\"}"
  fi
  cat >"$overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [manifests]
$client_ca
images:
  - name: ghcr.io/nfguard/nfguard
    newName: ${NFGUARD_IMAGE%:*}
    newTag: ${NFGUARD_IMAGE##*:}
patches:
  - target: {kind: DaemonSet|Deployment, namespace: nfguard-system}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
  - target: {kind: Deployment, namespace: nfguard-system}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: NFGUARD_INSECURE_REGISTRIES, value: "$REGISTRY_PULL,$PRIVATE_REGISTRY_PULL"}
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: NFGUARD_REGISTRY_ALLOW_CIDRS, value: "$CP_IP/32"}
$client_ca_patch
EOF
  kctl apply --server-side -k "$overlay/crds" >&2
  kctl wait --for=condition=Established --timeout=60s \
    crd/nodenetfilterprofiles.nfguard.io crd/netfilterpolicies.nfguard.io >&2
  kctl apply --server-side -k "$overlay" >&2
}

helm_bin() { echo "$(scripts/go-tool.sh helm)/helm"; }

# charts/nfguard's install (charts/nfguard/README.md): the namespace made and
# labelled first; the same image, pull policy and registry setting as values.
# With the release already there, the upgrade docs/install.md gives: the
# chart's CRDs applied first, then helm upgrade --reset-then-reuse-values.
install_helm() {
  local helm
  helm=$(helm_bin)
  cat >"$STATE/helm-values.yaml" <<EOF
image: {repository: ${NFGUARD_IMAGE%:*}, tag: ${NFGUARD_IMAGE##*:}, pullPolicy: Never}
controller:
  extraEnv: [{name: NFGUARD_INSECURE_REGISTRIES, value: "$REGISTRY_PULL,$PRIVATE_REGISTRY_PULL"},
    {name: NFGUARD_REGISTRY_ALLOW_CIDRS, value: "$CP_IP/32"}]
webhook:
  extraEnv: [{name: NFGUARD_INSECURE_REGISTRIES, value: "$REGISTRY_PULL,$PRIVATE_REGISTRY_PULL"},
    {name: NFGUARD_REGISTRY_ALLOW_CIDRS, value: "$CP_IP/32"}]
EOF
  # An earlier chart (e2e/upgrade.sh) may not know the client CA.
  if grep -q '^  clientCA:' "$SRC/charts/nfguard/values.yaml"; then
    echo "  clientCA: {configMapName: nfguard-webhook-client-ca, allowedNames: [$WEBHOOK_CLIENT_NAME]}" \
      >>"$STATE/helm-values.yaml"
  fi
  kctl get namespace nfguard-system >/dev/null 2>&1 || kctl create namespace nfguard-system >&2
  kctl label namespace nfguard-system --overwrite pod-security.kubernetes.io/enforce=privileged >&2
  # The operator's own ConfigMap (the chart only names it).
  kctl -n nfguard-system create configmap nfguard-webhook-client-ca \
    --from-file=ca.crt="$STATE/pki/webhook-client-ca.crt" --dry-run=client -o yaml |
    kctl apply --server-side -f - >&2
  if "$helm" --kubeconfig "$STATE/admin.kubeconfig" --namespace nfguard-system status nfguard >/dev/null 2>&1; then
    kctl apply --server-side --force-conflicts -f "$SRC/charts/nfguard/crds/" >&2
    "$helm" --kubeconfig "$STATE/admin.kubeconfig" upgrade nfguard "$SRC/charts/nfguard" \
      --namespace nfguard-system --reset-then-reuse-values --values "$STATE/helm-values.yaml" >&2
  else
    "$helm" --kubeconfig "$STATE/admin.kubeconfig" install nfguard "$SRC/charts/nfguard" \
      --namespace nfguard-system --values "$STATE/helm-values.yaml" >&2
  fi
}

# reporters_ready_except NODE: a Ready reporter pod on every node but NODE.
reporters_ready_except() {
  local nodes pods
  nodes=$(kctl get nodes -o json) || return 1
  pods=$(kctl -n nfguard-system get pods -o json) || return 1
  jq -e --arg skip "$1" --argjson pods "$pods" '
    [.items[].metadata.name | select(. != $skip)] as $nodes
    | [$pods.items[] | select(.metadata.name | startswith("nfguard-reporter-"))
       | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))
       | .spec.nodeName] as $ready
    | ($nodes | length) > 0 and all($nodes[]; . as $n | $ready | index($n) != null)' <<<"$nodes"
}

# install_nfguard [kustomize|helm]: default $NFGUARD_E2E_INSTALL, else kustomize.
install_nfguard() {
  local method=${1:-${NFGUARD_E2E_INSTALL:-kustomize}}
  case "$method" in
    kustomize | helm) ;;
    *) die "unknown install method '$method' (NFGUARD_E2E_INSTALL: kustomize or helm)" ;;
  esac
  import_nfguard_image
  "install_$method"
  if [ -n "${NFGUARD_E2E_REPORTER_UNREADY_NODE:-}" ]; then
    wait_for 180 "the reporter Ready on every node but $NFGUARD_E2E_REPORTER_UNREADY_NODE" \
      reporters_ready_except "$NFGUARD_E2E_REPORTER_UNREADY_NODE"
  else
    kctl -n nfguard-system rollout status daemonset/nfguard-reporter --timeout=180s >&2
  fi
  kctl -n nfguard-system rollout status deployment/nfguard-controller --timeout=180s >&2
  kctl -n nfguard-system rollout status deployment/nfguard-webhook --timeout=180s >&2
  wait_for 120 "the webhook's caBundle" ca_bundle_set
  log "nfguard installed with $method"
}

print_env() {
  echo "export KUBECONFIG=$STATE/admin.kubeconfig"
  echo "export NFGUARD_E2E_REGISTRY=127.0.0.1:$REGISTRY_PORT"
  echo "export NFGUARD_E2E_REGISTRY_PULL=$REGISTRY_PULL"
  echo "export NFGUARD_E2E_PRIVATE_REGISTRY=127.0.0.1:$PRIVATE_REGISTRY_PORT"
  echo "export NFGUARD_E2E_PRIVATE_REGISTRY_PULL=$PRIVATE_REGISTRY_PULL"
  echo "export NFGUARD_E2E_PRIVATE_REGISTRY_AUTH_FILE=$STATE/private-registry.auth"
  echo "export NFGUARD_E2E_PROVIDER=local"
  echo "export NFGUARD_E2E_AUDIT_LOG=$STATE/logs/audit.log"
  echo "export NFGUARD_E2E_LOG_DIR=$STATE/logs"
  # The API server's webhook client certificate (PATH.crt, PATH.key):
  # scenario 27 sends a malformed review as the API server would.
  echo "export NFGUARD_E2E_WEBHOOK_CLIENT_CERT=$STATE/pki/apiserver-webhook-client"
  echo "export PATH=$BIN:\$PATH"
  echo "export NFGUARD_HELM=$(helm_bin)"
}

up() {
  local started=$SECONDS node
  if [ -f "$STATE/up" ] && running kube-apiserver; then
    log "already up"
    BIN=$(cat "$STATE/bin")
    print_env
    return 0
  fi
  down_quiet
  install_packages
  BIN=$(e2e/build-kube.sh)
  port_free "$API_PORT" || die "127.0.0.1:$API_PORT is in use (NFGUARD_E2E_API_PORT)"
  port_free "$REGISTRY_PORT" || die "127.0.0.1:$REGISTRY_PORT is in use (NFGUARD_E2E_REGISTRY_PORT)"
  port_free "$PRIVATE_REGISTRY_PORT" ||
    die "127.0.0.1:$PRIVATE_REGISTRY_PORT is in use (NFGUARD_E2E_PRIVATE_REGISTRY_PORT)"
  mkdir -p "$STATE" "$RUN" "$NS_DIR"
  # ip netns add makes /run/netns a mount point of its own when it is none.
  mountpoint -q /run/netns 2>/dev/null || echo /run/netns >>"$RUN/made-mounts"
  made_dir /run/netns
  echo "$BIN" >"$STATE/bin"
  # A private mount point so the namespace files bound below stay ours.
  mount --bind "$NS_DIR" "$NS_DIR"
  mount --make-private "$NS_DIR"
  make_pki
  printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n' >"$STATE/audit-policy.yaml"
  make_network
  start_control_plane
  start_registry
  start_private_registry
  forward api "$API_PORT" "$CP_IP:6443"
  forward registry "$REGISTRY_PORT" "$REGISTRY_PULL"
  forward registry-private "$PRIVATE_REGISTRY_PORT" "$PRIVATE_REGISTRY_PULL"
  wait_for 60 "the apiserver through 127.0.0.1:$API_PORT" kctl get --raw /readyz
  build_images
  for node in "${NODES[@]}"; do start_node "$node"; done
  for node in "${NODES[@]}"; do wait_for 180 "node $node Ready" node_ready "$node"; done
  if [ "${NFGUARD_E2E_BENCH:-}" = 1 ]; then
    # What the node-lifecycle controller does once a node is Ready.
    for node in "${NODES[@]}"; do kctl taint nodes "$node" node.kubernetes.io/not-ready:NoSchedule- >&2 || true; done
  fi
  wait_for 60 "the default ServiceAccount" kctl -n default get serviceaccount default
  log "cluster up in $((SECONDS - started)) s ($("$BIN/kubectl" version --client -o json | jq -r .clientVersion.gitVersion))"
  if [ "${NFGUARD_E2E_NO_INSTALL:-}" != 1 ]; then
    install_nfguard
    log "nfguard ready after $((SECONDS - started)) s"
  fi
  touch "$STATE/up"
  print_env
}

# ---- down -----------------------------------------------------------------------
our_namespaces() { # inode list of the net and mount namespaces we made
  local f
  for f in /run/netns/"$PREFIX"-*; do [ -e "$f" ] && stat -Lc %i "$f"; done
  for f in "$NS_DIR"/mnt-*; do [ -e "$f" ] && stat -Lc %i "$f" 2>/dev/null; done
  true
}

# Every process inside one of our namespaces or cgroups: components,
# containerd shims, containers.
our_pids() {
  pids_within "$(our_namespaces)" ''
}

# pids_within INODES NODE: every process whose network or mount namespace is
# one of INODES (a list), or in the cgroups of NODE ('': of every node).
pids_within() {
  local inodes=" ${1//$'\n'/ } " pid ns procs
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [ "$pid" = $$ ] && continue
    for ns in net mnt; do
      ns=$(stat -Lc %i "/proc/$pid/ns/$ns" 2>/dev/null) || continue
      case "$inodes" in *" $ns "*) echo "$pid"; break ;; esac
    done
  done
  procs=/sys/fs/cgroup/pids$(cgroup_root "$2")
  [ -d "$procs" ] && find "$procs" -name cgroup.procs -exec cat {} + 2>/dev/null
  true
}

kill_all() {
  local pids f tries=0
  for f in "$RUN"/pids/*.pid; do
    # A daemon that died already (e.g. of a full disk) is no reason to stop here.
    if [ -f "$f" ]; then kill "$(cat "$f")" 2>/dev/null || true; fi
  done
  sleep 1
  while pids=$(our_pids | sort -u) && [ -n "$pids" ]; do
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    tries=$((tries + 1))
    [ "$tries" -lt 30 ] || { log "processes still alive: $pids"; break; }
    sleep 0.5
  done
  rm -rf "$RUN/pids"
}

# node_pids NODE: every process of the node: its daemons (its network or
# mount namespace), the shims and the containers (its cgroups).
node_pids() {
  pids_within "$(stat -Lc %i "/run/netns/$(node_ns "$1")" "$NS_DIR/mnt-$1" 2>/dev/null)" "$1"
}

# cluster_restart: a power cut of the whole cluster and its return. The
# control plane (etcd, kube-apiserver, controller-manager, scheduler) and
# every node (containerd, kubelet, kube-proxy, the shims and the containers)
# are killed at once with SIGKILL, then started again from what they keep on
# disk (etcd's data, each node's containerd root, kubelet and kube-proxy
# configurations); nothing else is done: pods come back the way the kubelet
# brings them back. The registries, the loopback forwarders and anything else
# in the control plane's namespace (the e2e's Prometheus) stay up, as
# services outside the cluster would.
cluster_restart() {
  local node name pids tries t0=$SECONDS
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    if running "$name"; then kill -9 "$(cat "$RUN/pids/$name.pid")"; fi
  done
  for node in "${NODES[@]}"; do
    tries=0
    while pids=$(node_pids "$node" | sort -u) && [ -n "$pids" ]; do
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null || true
      tries=$((tries + 1))
      [ "$tries" -lt 30 ] || die "processes of $node still alive: $pids"
      sleep 0.5
    done
  done
  log "cluster stopped: control plane and ${#NODES[@]} nodes killed"
  start_control_plane
  wait_for 60 "the apiserver through 127.0.0.1:$API_PORT" kctl get --raw /readyz
  for node in "${NODES[@]}"; do
    start_containerd "$node"
    start_kubelet "$node"
    start_kube_proxy "$node"
  done
  for node in "${NODES[@]}"; do wait_for 180 "node $node Ready" node_ready "$node"; done
  log "cluster started again: every node Ready $((SECONDS - t0)) s after the cut"
}

remove_cgroups() {
  local root h
  root=$(cgroup_root '')
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    [ -d "$h$root" ] || continue
    find "$h$root" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

down_quiet() {
  kill_all
  local f
  for f in "$NS_DIR"/mnt-*; do
    [ -e "$f" ] || continue
    umount "$f" 2>/dev/null || true
    rm -f "$f"
  done
  if mountpoint -q "$NS_DIR" 2>/dev/null; then umount "$NS_DIR"; fi
  for f in /run/netns/"$PREFIX"-*; do
    [ -e "$f" ] && ip netns delete "${f#/run/netns/}"
  done
  remove_cgroups
  if [ -f "$RUN/made-mounts" ]; then
    while read -r f; do
      [ -n "$(ls -A "$f" 2>/dev/null)" ] || umount "$f" 2>/dev/null || true
    done <"$RUN/made-mounts"
  fi
  if [ -f "$RUN/made-dirs" ]; then
    tac "$RUN/made-dirs" | while read -r f; do rmdir "$f" 2>/dev/null || true; done
  fi
  rm -rf "$RUN" "$STATE"
}

down() {
  down_quiet
  log "down: no process, namespace, mount, cgroup or file of the cluster is left"
}

# ---- tools --------------------------------------------------------------------
# kube_proxy NODE stop|cont: SIGSTOP or SIGCONT the node's kube-proxy, and
# wait until the kernel says it is stopped or running.
kube_proxy() {
  local pid sig want state
  case "$2" in stop) sig=STOP want=T ;; cont) sig=CONT want=S ;; *) die "usage: $0 kube-proxy NODE stop|cont" ;; esac
  pid=$(cat "$RUN/pids/kube-proxy-$1.pid" 2>/dev/null) || die "no kube-proxy started on node $1"
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = kube-proxy ] || die "process $pid of node $1 is not kube-proxy"
  kill "-$sig" "$pid"
  for _ in $(seq 50); do
    state=$(awk '{print $3}' "/proc/$pid/stat")
    # Resumed: anything but stopped (running or sleeping).
    if [ "$state" = "$want" ] || { [ "$want" = S ] && [ "$state" != T ]; }; then return 0; fi
    sleep 0.1
  done
  die "kube-proxy $pid on node $1 is in state $state after SIG$sig"
}

# ---- a node's iptables release, for real --------------------------------------------
# node_iptables NODE VERSION: NODE runs Debian's iptables VERSION (the
# release scripts/fetch-iptables.sh extracts under $NFGUARD_FIXTURES) instead
# of the machine's. Only in the node's own mount namespace: every regular
# file of the release's /usr/sbin, /usr/bin and /usr/lib/<arch> (the
# xtables-*-multi binaries, libxtables, libip4tc, libip6tc, libnftnl) is
# bound over the machine's file of the same name, and its xtables/ directory
# over the machine's; the reporter's host probe reads exactly these
# (/host/usr, /host/sbin, /host/bin, /host/etc/alternatives; no dpkg
# database is mounted into it). A node without iptables (NODE_BACKEND none)
# first loses its hiding overlay and gains the alternatives of Debian's
# default backend, nft. Then the node's kubelet and kube-proxy are
# restarted, so that what they write (kubelet's marker chains, kube-proxy's
# full resync in iptables mode) is written by that release, as after the
# reboot an OS upgrade implies. The machine's files, mounts and namespaces
# are not touched: nothing is created outside the node's mount namespace
# and $STATE. Pods keep the view they started with (a hostPath is bound at
# container start): restart the ones that must see the change.
# node_iptables NODE restore: undoes all of it (also the iptables tables
# kubelet made on a node that had no iptables) and restarts both again.
FIXTURES=${NFGUARD_FIXTURES:-$REPO/target/fixtures}

release_root() { # VERSION: the extracted release (fetched when missing)
  local dir="$FIXTURES/iptables/$1"
  [ -f "$dir/.complete" ] || scripts/fetch-iptables.sh "$FIXTURES/iptables" >&2
  [ -f "$dir/.complete" ] || die "no iptables $1 in $FIXTURES/iptables (scripts/fetch-iptables.sh fetches 1.8.7, 1.8.9, 1.8.11)"
  echo "$dir/root"
}

# release_binds ROOT: "SOURCE TARGET" per bind mount, one a line. Dies when
# the release's layout differs from the machine's (a link the machine has
# as a file or the reverse, or a link to another name): a bind over it would
# not give the node that release. A link only the release has is left out.
release_binds() {
  local root=$1 lib d f t
  lib=$(gcc -print-multiarch)
  for d in usr/sbin usr/bin "usr/lib/$lib"; do
    [ -d "$root/$d" ] || continue
    for f in "$root/$d"/*; do
      t="/$d/${f##*/}"
      if [ -L "$f" ] && [ ! -e "$t" ] && [ ! -L "$t" ]; then
        # A name new in the release (1.8.11: arptables-translate): making it
        # would mean a file on the machine; nothing the node runs calls it.
        log "$t: new in the release, not made"
      elif [ -L "$f" ]; then
        { [ -L "$t" ] && [ "$(readlink "$f")" = "$(readlink "$t")" ]; } ||
          die "$t: the release has a link to $(readlink "$f"), the machine $(readlink "$t" || echo 'no link')"
      elif [ -f "$f" ]; then
        { [ -f "$t" ] && [ ! -L "$t" ]; } || die "$t: the release has a file, the machine none (nothing to bind over)"
        echo "$f $t"
      fi
    done
  done
  { [ -d "$root/usr/lib/$lib/xtables" ] && [ -d "/usr/lib/$lib/xtables" ]; } ||
    die "no xtables extension directory in $root or on the machine"
  echo "$root/usr/lib/$lib/xtables /usr/lib/$lib/xtables"
}

# restart_node_writers NODE: kubelet and kube-proxy stopped and started
# again; waits until kube-proxy answers its health port and the node is Ready.
restart_node_writers() {
  local node=$1 c pid
  for c in kubelet kube-proxy; do
    pid=$(cat "$RUN/pids/$c-$node.pid" 2>/dev/null) || die "no $c started on node $node"
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$c" ] || die "process $pid of node $node is not $c"
    kill "$pid"
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    ! kill -0 "$pid" 2>/dev/null || die "$c $pid on node $node did not stop in 30 s"
  done
  start_kubelet "$node"
  start_kube_proxy "$node"
  wait_for 60 "kube-proxy on $node healthy" in_node "$node" curl -fsS http://127.0.0.1:10256/healthz
  wait_for 120 "node $node Ready" node_ready "$node"
}

node_iptables() {
  local node=$1 want=$2 dir="$STATE/nodes/$1" record="$STATE/nodes/$1/iptables-release" root binds
  [ -n "${NODE_IP[$node]:-}" ] || die "no node $node (${NODES[*]})"
  [ -e "$NS_DIR/mnt-$node" ] || die "node $node is not running"
  if [ "$want" = restore ]; then
    node_iptables_restore "$node"
    return 0
  fi
  [ ! -f "$record" ] || die "node $node runs iptables $(sed -n 1p "$record") already: restore it first"
  root=$(release_root "$want")
  binds=$(release_binds "$root")
  # What restore needs: the release, the node's alternatives and, on a node
  # without iptables, its nf_tables tables (kubelet adds its marker chains').
  { echo "$want"; echo "$binds"; } >"$record.tmp"
  rm -rf "$dir/alternatives.before"
  cp -a "$dir/alternatives" "$dir/alternatives.before"
  in_node "$node" nft list tables >"$dir/tables.before"
  mv "$record.tmp" "$record"
  if [ "${NODE_BACKEND[$node]}" = none ]; then
    cp -a /etc/alternatives/{ip,ip6,arp,eb}tables* "$dir/alternatives/"
    local t
    for t in iptables ip6tables; do
      ln -sfn "/usr/sbin/$t-nft" "$dir/alternatives/$t"
      ln -sfn "/usr/sbin/$t-nft-restore" "$dir/alternatives/$t-restore"
      ln -sfn "/usr/sbin/$t-nft-save" "$dir/alternatives/$t-save"
    done
  fi
  # shellcheck disable=SC2016 # expanded by the inner shell
  nsenter --mount="$NS_DIR/mnt-$node" -- sh -eu -c '
    # The hiding overlay goes (lazily: the node runs containerd from
    # /usr/bin; it keeps its binary, new lookups see the machine'"'"'s tree).
    for d in /usr/sbin /usr/bin; do
      if [ -d "$1/hide$d" ]; then umount -l "$d"; fi
    done
    echo "$2" | while read -r src dst; do mount --bind -o ro "$src" "$dst"; done
  ' sh "$dir" "$binds"
  local v
  v=$(in_node "$node" iptables --version) || die "iptables does not run on $node after the change"
  [[ "$v" == "iptables v$want "* ]] || die "iptables on $node says '$v', want v$want"
  restart_node_writers "$node"
  log "node $node runs $v (Debian's release, in its mount namespace); kubelet and kube-proxy restarted"
}

node_iptables_restore() {
  local node=$1 dir="$STATE/nodes/$1" record="$STATE/nodes/$1/iptables-release" binds fam table
  if [ ! -f "$record" ]; then
    log "node $node runs the machine's iptables already"
    return 0
  fi
  binds=$(sed 1d "$record")
  # shellcheck disable=SC2016 # expanded by the inner shell
  nsenter --mount="$NS_DIR/mnt-$node" -- sh -eu -c '
    # What a failed change left half done is undone as far as it went.
    # Lazily: an iptables that kube-proxy or kubelet started a moment ago
    # may still map the release'"'"'s library; it keeps it, nothing new sees it.
    echo "$2" | tac | while read -r src dst; do
      if [ -n "$dst" ] && grep -q " $dst " /proc/self/mountinfo; then umount -l "$dst"; fi
    done
    for d in /usr/sbin /usr/bin; do
      [ -d "$1/hide$d" ] || continue
      [ "$(findmnt -n -o FSTYPE --mountpoint "$d" || true)" = overlay ] ||
        mount -t overlay overlay -o "ro,lowerdir=$1/hide$d:$d" "$d"
    done
  ' sh "$dir" "$binds"
  rm -rf "$dir/alternatives"/*
  cp -a "$dir/alternatives.before/." "$dir/alternatives/"
  rm -rf "$dir/alternatives.before"
  restart_node_writers "$node"
  if [ "${NODE_BACKEND[$node]}" = none ]; then
    # The tables kubelet made through the release (its marker chains); the
    # node had none of iptables' own.
    while read -r _ fam table; do
      case "$fam/$table" in ip/* | ip6/*) ;; *) continue ;; esac
      case "$table" in filter | nat | mangle | raw | security) ;; *) continue ;; esac
      grep -qxF "table $fam $table" "$dir/tables.before" || in_node "$node" nft delete table "$fam" "$table"
    done < <(in_node "$node" nft list tables)
  fi
  local tables
  tables=$(in_node "$node" nft list tables)
  [ "$tables" = "$(cat "$dir/tables.before")" ] ||
    die "node $node's nf_tables tables are not as before the change: $(tr '\n' ' ' <<<"$tables")"
  rm -f "$record" "$dir/tables.before"
  log "node $node runs the machine's iptables again: $(in_node "$node" sh -c 'iptables --version 2>/dev/null || echo "no iptables command"')"
}

diagnose() {
  BIN=$(cat "$STATE/bin")
  set +e
  kctl get nodes -o wide --show-labels
  kctl get nodenetfilterprofiles -o yaml
  kctl get pods -A -o wide
  kctl get events -A --sort-by=.lastTimestamp | tail -40
  local c
  for c in reporter controller webhook; do
    kctl -n nfguard-system logs -l "app.kubernetes.io/component=$c" --tail=60 --prefix --all-containers
  done
  for f in "$STATE"/logs/*.log; do
    [ "$(basename "$f")" = audit.log ] && continue
    echo "==== $f (last 30 lines)"
    tail -n 30 "$f"
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) [ -f "$STATE/bin" ] || die "not up"; BIN=$(cat "$STATE/bin"); print_env ;;
  install) [ -f "$STATE/up" ] || die "not up"; BIN=$(cat "$STATE/bin"); install_nfguard "${2:-}" ;;
  node) [ $# -ge 3 ] || die "usage: $0 node NODE CMD..."; shift; in_node "$@" ;;
  cp) [ $# -ge 2 ] || die "usage: $0 cp CMD..."; shift; exec nsenter --net="/run/netns/$CP_NS" -- "$@" ;;
  diagnose) diagnose ;;
  kube-proxy) [ $# = 3 ] || die "usage: $0 kube-proxy NODE stop|cont"; kube_proxy "$2" "$3" ;;
  pod-network) [ $# = 2 ] || die "usage: $0 pod-network down|up"; [ -f "$STATE/up" ] || die "not up"; pod_network "$2" ;;
  restart) [ -f "$STATE/up" ] || die "not up"; BIN=$(cat "$STATE/bin"); cluster_restart ;;
  node-iptables)
    [ $# = 3 ] || die "usage: $0 node-iptables NODE VERSION|restore"
    [ -f "$STATE/up" ] || die "not up"
    BIN=$(cat "$STATE/bin")
    node_iptables "$2" "$3"
    ;;
  *) echo "usage: $0 up|down|env|install [kustomize|helm]|node NODE CMD...|cp CMD...|kube-proxy NODE stop|cont|pod-network down|up|restart|node-iptables NODE VERSION|restore|diagnose" >&2; exit 2 ;;
esac
