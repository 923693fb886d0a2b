# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Requests as nfguard's own identities (sourced by e2e/scenarios.sh): a
# kubeconfig with only a token (bound to a running pod, as the pod's own
# is), raw API requests sent as the components send them, a component's
# metric through the API server's pod proxy.

# token_kubeconfig FILE TOKEN: a kubeconfig for this cluster that
# authenticates with TOKEN only (no client certificate of the admin's).
token_kubeconfig() {
  local server ca
  server=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  if [ -z "$ca" ]; then
    ca=$(base64 -w0 <"$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')")
  fi
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: token, user: {token: "$2"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: token}}]
current-context: e2e
EOF
}

# reporter_kubeconfig NODE: REPORTER is "KUBECONFIG POD": a kubeconfig (removed
# at the scenario's end) with a token bound to POD, the reporter pod on NODE,
# as that pod's own token is.
REPORTER=""
reporter_kubeconfig() {
  local pod kc
  pod=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=reporter \
    --field-selector "spec.nodeName=$1" -o jsonpath='{.items[0].metadata.name}')
  [ -n "$pod" ] || fail "no reporter pod on $1"
  kc=$(mktemp)
  defer rm -f "$kc"
  token_kubeconfig "$kc" "$(kubectl -n "$NS" create token nfguard-reporter --bound-object-kind Pod \
    --bound-object-name "$pod" --duration=10m)"
  REPORTER="$kc $pod"
}

# as_token KUBECONFIG METHOD PATH CONTENT_TYPE BODY: one request to
# $PROFILES_API/PATH with the token of KUBECONFIG, sent as the reporter's
# code sends it (kubectl would GET first, which the reporter may not).
# Prints "HTTP <code>" and the API's message; fails on an HTTP error.
PROFILES_API=/apis/nfguard.io/v1alpha1/nodenetfilterprofiles
MERGE=application/merge-patch+json
as_token() { api_as_token "$1" "$2" "$PROFILES_API$3" "$4" "$5"; }

# api_as_token KUBECONFIG METHOD API_PATH CONTENT_TYPE BODY: as_token, for
# any path of the API server (/api/v1/nodes/NAME, ...). With API_ANSWER set
# to a file, the answer's body is written there.
api_as_token() {
  local kc=$1 method=$2 path=$3 ctype=$4 body=$5 server token ca out code msg
  server=$(kubectl --kubeconfig "$kc" config view --raw -o jsonpath='{.clusters[0].cluster.server}')
  token=$(kubectl --kubeconfig "$kc" config view --raw -o jsonpath='{.users[0].user.token}')
  ca=$(mktemp)
  kubectl --kubeconfig "$kc" config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
    base64 -d >"$ca"
  out=$(curl -sS --max-time 30 --cacert "$ca" -X "$method" -H "Authorization: Bearer $token" \
    -H "Content-Type: $ctype" --data-binary "$body" -w '\n%{http_code}' "$server$path" 2>&1) || true
  rm -f "$ca"
  code=${out##*$'\n'}
  out=${out%$'\n'*}
  [ -z "${API_ANSWER:-}" ] || printf '%s\n' "$out" >"$API_ANSWER"
  if [[ "$code" == 2?? ]]; then
    echo "HTTP $code"
    return 0
  fi
  msg=$(jq -r '.message // empty' <<<"$out" 2>/dev/null || true)
  echo "HTTP $code: ${msg:-${out:0:400}}"
  return 1
}

# pod_metrics POD: an nfguard pod's /metrics through the apiserver's pod
# proxy, whole; fails (empty) when it cannot be read.
pod_metrics() {
  # The port named metrics: the webhook's differs from the others' (it may
  # share a node's network with the reporter).
  local port
  port=$(get pod "$1" '{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}' -n "$NS")
  kubectl get --raw "/api/v1/namespaces/$NS/pods/$1:${port:-none}/proxy/metrics" 2>/dev/null
}
pod_metric() { # POD NAME: a metric's value (empty if absent or unreachable)
  # Read whole first: awk leaving early would kill kubectl with SIGPIPE (141).
  local text
  text=$(pod_metrics "$1") || true
  awk -v m="$2" '$1 == m && !done { print $2; done = 1 }' <<<"$text"
}
