# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# Scenario 4: a legacy-only image is allowed only where the rules are legacy.
#
# a legacy-only image is denied where the rules are nft and admitted (and
# runs) with nodeSelector nfguard.io/iptables-backend=legacy
#
# Runs on: kind, local.
# Starts from: a healthy cluster (every node Ready and untainted, nfguard
# available, every profile Fresh); the harness waits for it before and after.
# Undoes (defer: also when it fails, last first):
#   - namespace "$ns" (scenario_ns)
#   - kubectl -n "$ns" delete daemonset legacy-anywhere --ignore-not-found --wait=false

SCENARIO_TITLE="a legacy-only image is allowed only where the rules are legacy"
SCENARIO_PROVIDERS="kind local"
SCENARIO_NEEDS=""
SCENARIO_MAY_SKIP_ON="kind"
SCENARIO_RUN=s4_legacy_only

s4_legacy_only() {
  local ns=nfguard-e2e-s4 out part n nft=() legacy=() named
  for n in "${NODES[@]}"; do
    case "$(nnp "$n" '{.status.activeBackend}')" in
      nft) nft+=("$n") ;;
      legacy) legacy+=("$n") ;;
    esac
  done
  [ "${#nft[@]}" -ge 1 ] || fail "no node's rules live in nft: the denial half needs one"
  scenario_ns "$ns"
  defer kubectl -n "$ns" delete daemonset legacy-anywhere --ignore-not-found --wait=false

  if out=$(ds_yaml legacy-anywhere "$IMG_LEGACY" | kubectl -n "$ns" apply -f - 2>&1); then
    fail "the legacy image without a nodeSelector was admitted: $out"
  fi
  grep -qF 'admission webhook "validate.nfguard.io" denied the request' <<<"$out" ||
    fail "the legacy DaemonSet failed, but not by nfguard's webhook: $out"
  part=$(reason_part "$out" BackendMismatch)
  grep -qF "image writes through iptables-legacy but the node's rules live in nft" <<<"$part" ||
    fail "the denial has no [BackendMismatch] legacy-vs-nft reason: $out"
  for n in "${nft[@]}"; do
    names_node "$part" "$n" || fail "the [BackendMismatch] reason does not name the nft node $n: $part"
  done
  for n in "${legacy[@]}"; do
    if names_node "$part" "$n"; then fail "the [BackendMismatch] reason names the legacy node $n: $part"; fi
  done
  grep -qF 'nfguard.io/iptables-backend=legacy' <<<"$part" ||
    fail "the remedy does not point at nodeSelector nfguard.io/iptables-backend=legacy: $part"
  ok "without a nodeSelector the legacy image is denied, naming the nft node(s) ${nft[*]}:"
  show <<<"$out"

  out=$(ds_yaml legacy-only "$IMG_LEGACY" nfguard.io/iptables-backend=legacy | kubectl -n "$ns" apply -f - 2>&1) ||
    fail "the legacy image with nodeSelector nfguard.io/iptables-backend=legacy was denied: $out"
  if [ "${#legacy[@]}" -eq 0 ]; then
    grep -qF '[NoCandidateNodes]' <<<"$out" ||
      fail "admitted onto no node at all, but without nfguard's NoCandidateNodes warning: $out"
    wait_for 60 "the legacy-only DaemonSet to settle on 0 nodes" ds_running "$ns" legacy-only 0
    ok "with nodeSelector nfguard.io/iptables-backend=legacy it is admitted with nfguard's warning and lands nowhere: $out"
    skip "no node's rules live in legacy on $PROVIDER: the admitted DaemonSet cannot be shown running on a legacy node"
    return 0
  fi
  if grep -q 'ImageUnresolved' <<<"$out"; then
    fail "admitted only because the webhook could not resolve the image in time: $out"
  fi
  ok "with nodeSelector nfguard.io/iptables-backend=legacy it is admitted${out:+: $out}"
  wait_for 180 "legacy-only pods Ready on the ${#legacy[@]} legacy node(s)" ds_running "$ns" legacy-only "${#legacy[@]}"
  named=$(pods_by_node "$ns" legacy-only)
  for n in "${legacy[@]}"; do
    grep -q "^$n=.* True$" <<<"$named" || fail "no Ready legacy-only pod on the legacy node $n: $named"
  done
  for n in "${nft[@]}"; do
    if grep -q "^$n=" <<<"$named"; then fail "a legacy-only pod landed on the nft node $n: $named"; fi
  done
  ok "it runs on the legacy node(s) only: $(tr '\n' ' ' <<<"$named")"
}
