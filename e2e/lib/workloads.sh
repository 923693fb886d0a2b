# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# The workloads the scenarios create (sourced by e2e/scenarios.sh): a fresh
# namespace per scenario, deleted at its end; hostNetwork + NET_ADMIN pods
# and DaemonSets with a given image; waiting for them to run.

# scenario_ns NAME: a fresh namespace (privileged pod security), deleted at the end.
scenario_ns() {
  delete_ns "$1" >/dev/null 2>&1 || true
  kubectl create namespace "$1" >/dev/null
  kubectl label namespace "$1" pod-security.kubernetes.io/enforce=privileged \
    app.kubernetes.io/part-of=nfguard-e2e >/dev/null
  defer delete_ns "$1"
  on_dump kubectl -n "$1" get all,events -o wide
}

delete_ns() {
  kubectl delete namespace "$1" --ignore-not-found --wait=true --timeout=120s >/dev/null && return 0
  kubectl -n "$1" delete pods --all --grace-period=0 --force >/dev/null 2>&1
  kubectl delete namespace "$1" --ignore-not-found --wait=true --timeout=60s >/dev/null
}

# A DaemonSet whose containers can write the node's rules (hostNetwork +
# NET_ADMIN), tolerating every taint.
# ds_yaml NAME IMAGE [LABEL=VALUE selector] [NODE kept out by node affinity]
ds_yaml() {
  local name=$1 image=$2 sel=${3:-} not=${4:-}
  cat <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: $name, labels: {app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  selector: {matchLabels: {app: $name}}
  template:
    metadata: {labels: {app: $name}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      tolerations: [{operator: Exists}]
YAML
  if [ -n "$sel" ]; then
    printf '      nodeSelector: {%s: %s}\n' "${sel%%=*}" "${sel#*=}"
  fi
  if [ -n "$not" ]; then
    printf '      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: NotIn, values: [%s]}]}]}}}\n' "$not"
  fi
  cat <<YAML
      containers:
        - name: cni
          image: $image
          command: ["sleep", "infinity"]
          securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}

# ds_running NS NAME WANT: WANT pods scheduled, all Ready and up to date.
ds_running() {
  local s
  s=$(get daemonset "$2" '{.status.desiredNumberScheduled} {.status.numberReady} {.status.updatedNumberScheduled}' -n "$1")
  WHY="desired/ready/updated: ${s:-none}; want $3"
  [ "$s" = "$3 $3 $3" ]
}

# "node=pod ready" for the pods of app=NAME in NS, one a line.
pods_by_node() {
  kubectl -n "$1" get pods -l "app=$2" \
    -o jsonpath='{range .items[*]}{.spec.nodeName}={.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}'
}

# incident_pod NAME NODE ANNOTATIONS COMMAND: a pod with iptables-nft 1.8.7,
# hostNetwork + NET_ADMIN, on NODE (ANNOTATIONS and COMMAND in YAML flow style).
incident_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: $3
spec:
  nodeName: $2
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
  containers:
    - name: kube-router
      image: $IMG_INCIDENT
      command: $4
      securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}

pod_yaml() { # NAME IMAGE
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
  containers:
    - name: cni
      image: $2
      command: ["sleep", "infinity"]
      securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}

pod_running() { # NS POD
  local phase
  phase=$(get pod "$2" '{.status.phase}' -n "$1")
  WHY="pod $2 is ${phase:-absent}"
  [ "$phase" = Running ]
}

plain_pod_yaml() { # NAME IMAGE: no hostNetwork, no capability, not privileged
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: $2
      command: ["sleep", "infinity"]
YAML
}

S20_BODY="nfguard-e2e-s20: served on the node without iptables"
nft_node_pod() { # NAME COMMAND (YAML flow): an ordinary pod on NFT_NODE
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: $1, app.kubernetes.io/part-of: nfguard-e2e}}
spec:
  nodeName: $NFT_NODE
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: $IMG_COMPATIBLE
      command: $2
YAML
}
