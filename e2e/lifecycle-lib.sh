# What the install life-cycle scripts share (sourced by e2e/helm-lifecycle.sh,
# e2e/kustomize-lifecycle.sh, e2e/upgrade.sh and e2e/plugin-status.sh): their
# output, the incident DaemonSet every nfguard denies, and what an uninstall
# must leave behind, one check for both install paths (helm uninstall,
# kubectl delete -k manifests/). The caller sets LOG (its output prefix) and
# NS (nfguard's namespace); needs kubectl and jq.
# shellcheck shell=bash

say() { printf '%s: %s\n' "$LOG" "$*"; }
ok() { say "ok: $*"; }
fail() {
  say "FAIL: $*"
  kubectl -n "$NS" get pods -o wide 2>&1 | sed 's/^/    /' || true
  exit 1
}

# incident_ds NAME NAMESPACE IMAGE: the incident DaemonSet (hostNetwork +
# NET_ADMIN, IMAGE the test registry's iptables-nft 1.8.7): every nfguard
# denies it ([OldReaderNewRules] on a node whose rules need a reader >= 1.8.8).
incident_ds() {
  cat <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: $1, namespace: $2}
spec:
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      hostNetwork: true
      containers:
        - name: cni
          image: $3
          securityContext: {capabilities: {add: ["NET_ADMIN"]}}
YAML
}
# denied_by_nfguard TEXT: TEXT is the API server's answer with nfguard's denial.
denied_by_nfguard() { grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$1"; }

# node_marks: every node's nfguard.io/ labels and taints, sorted lines
# "NODE label KEY=VALUE" and "NODE taint KEY=VALUE:EFFECT".
node_marks() {
  local json
  json=$(kubectl get nodes -o json) || fail "cannot list the nodes"
  jq -r '.items[] | .metadata.name as $n
    | (((.metadata.labels // {}) | to_entries[] | select(.key | startswith("nfguard.io/"))
        | "\($n) label \(.key)=\(.value)"),
       ((.spec.taints // [])[] | select(.key | startswith("nfguard.io/"))
        | "\($n) taint \(.key)=\(.value // ""):\(.effect)"))' <<<"$json" | sort
}

# Every listable kind except events (records that expire on their own).
listable_kinds() {
  local kinds
  kinds=$(kubectl api-resources --verbs=list -o name)
  grep -vxE 'events|events\.events\.k8s\.io' <<<"$kinds" | paste -sd, -
}

# nfguard_objects FILE CRDS: from a listing of every object (FILE, `kubectl
# get KINDS -A -o json`), each one named or labelled nfguard, as "KIND
# NAMESPACE/NAME" lines. CRDS=kept leaves out what Helm keeps by design: the
# CRDs, the APIService the API server registers for their group
# (automanaged) and nfguard's namespace itself (the caller checks what it
# holds). CRDS=gone leaves out nothing. Either way the reporters'
# certificate requests (signer nfguard.io/reporter-metrics) are left out:
# records, like events, that the cluster deletes itself (kube-controller-
# manager's csrcleaner: an hour after they were answered).
nfguard_objects() {
  jq -r --arg ns "$NS" --arg crds "$2" '.items[]
    | select((.metadata.name | test("nfguard")) or (.metadata.labels["app.kubernetes.io/name"] == "nfguard")
             or (.metadata.namespace == $ns))
    | select((.kind == "CertificateSigningRequest" and .spec.signerName == "nfguard.io/reporter-metrics") | not)
    | select($crds == "gone"
             or ((.kind == "CustomResourceDefinition")
                 or (.kind == "APIService" and .metadata.labels["kube-aggregator.kubernetes.io/automanaged"] != null)
                 or (.kind == "Namespace" and .metadata.name == $ns)
                 or (.metadata.namespace == $ns) | not))
    | "\(.kind) \(.metadata.namespace // "-")/\(.metadata.name)"' "$1"
}

# leftovers_check WHAT CRDS FILE: after WHAT (the uninstall), nothing named
# or labelled nfguard is left in any namespace or cluster-wide (nfguard_objects
# with CRDS). Retries for 60 s: a deleted namespace terminates and the API
# server drops its APIService for the CRDs' group a moment after the delete
# returns. Leaves the last listing in FILE.
leftovers_check() {
  local what=$1 crds=$2 file=$3 kinds left deadline=$((SECONDS + 60))
  kinds=$(listable_kinds)
  while :; do
    kubectl get "$kinds" -A -o json 2> >(grep -v '^Warning: .* deprecated' >&2) >"$file" ||
      fail "cannot list every object after $what"
    left=$(nfguard_objects "$file" "$crds")
    if [ -z "$left" ] || [ "$SECONDS" -ge "$deadline" ]; then break; fi
    sleep 2
  done
  [ -z "$left" ] || fail "left behind after $what:
$left"
  ok "nothing named or labelled nfguard is left in any namespace or cluster-wide$([ "$crds" = kept ] && echo " but the CRDs (kept by design) and namespace $NS") ($(jq '.items | length' "$file") objects of $(tr ',' '\n' <<<"$kinds" | wc -l) kinds searched)"
}

# gate_probe FILE STOP IMAGE: until STOP exists, every 0.2 s a server-side
# dry run of the incident DaemonSet (IMAGE) in namespace default; one line
# each, "END nfguard|admitted|error ANSWER".
gate_probe() {
  local out class
  while [ ! -e "$2" ]; do
    if out=$(incident_ds gate-probe default "$3" | kubectl create --dry-run=server --request-timeout=15s -f - 2>&1); then
      class=admitted
    elif denied_by_nfguard "$out"; then
      class=nfguard
    else
      class=error
    fi
    printf '%s %s %s\n' "$(date +%s.%N)" "$class" "$(tr '\n' ' ' <<<"$out" | cut -c1-200)" >>"$1"
    sleep 0.2
  done
}

# probed_uninstall DIR IMAGE WHAT CMD...: CMD (an uninstall) under
# failurePolicy Fail with gate_probe running from 2 s before to 2 s after,
# its output in DIR/uninstall.out; then gate_probe_check. The gate must go
# first (Helm deletes webhook configurations before the rest, manifests/'
# sortOptions put it first): no gated request refused for want of a webhook.
probed_uninstall() {
  local dir=$1 image=$2 what=$3 prober t0
  shift 3
  kubectl patch validatingwebhookconfiguration nfguard --type=json \
    -p='[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]' >/dev/null ||
    fail "cannot set failurePolicy Fail before $what"
  gate_probe "$dir/probes" "$dir/stop" "$image" &
  prober=$!
  sleep 2
  t0=$SECONDS
  "$@" >"$dir/uninstall.out" 2>&1 || { touch "$dir/stop"; fail "$what failed: $(cat "$dir/uninstall.out")"; }
  # shellcheck disable=SC2034 # the callers report it
  UNINSTALL_SECONDS=$((SECONDS - t0))
  sleep 2
  touch "$dir/stop"
  wait "$prober" || true
  gate_probe_check "$dir/probes" "$what"
}

# gate_probe_check FILE WHAT: while WHAT removed the gate (the webhook
# configuration under failurePolicy Fail, then its backend), no probe was
# refused for want of a webhook: nfguard's denials, then admissions once the
# configuration was gone, never an error, never a denial after an admission.
gate_probe_check() {
  local file=$1 what=$2 errors order
  [ "$(grep -c . "$file")" -gt 0 ] || fail "no gate probe ran during $what"
  errors=$(awk '$2 == "error"' "$file")
  [ -z "$errors" ] || fail "during $what the gate failed without nfguard's answer (the webhook configuration outlived its backend):
$errors"
  order=$(awk '{ print $2 }' "$file" | uniq | paste -sd' ')
  [[ "$order" =~ ^(nfguard)?( ?admitted)?$ ]] || fail "during $what the probes went $order, want nfguard's denials then admissions"
  ok "during $what: $(grep -c . "$file") probes under failurePolicy Fail, $(grep -c ' nfguard ' "$file" || true) denied by nfguard, then $(grep -c ' admitted ' "$file" || true) admitted once the configuration was gone; none failed calling the webhook"
}
