#!/usr/bin/env bash
# monitoring/ holds the one source of nfguard's alert rules and Grafana
# dashboard (tests/it/monitoring.rs checks them, `kubectl apply -k monitoring/`
# installs them). Helm reads files only from inside its chart, so the chart
# carries generated copies in charts/nfguard/files/; this script writes them.
#   scripts/sync-monitoring.sh           rewrite the chart's copies
#   scripts/sync-monitoring.sh --check   only compare; exit 1 naming each
#                                        stale copy and this command
# NFGUARD_CHART: another chart directory (the tests check a stale copy fails).
set -euo pipefail
cd "$(dirname "$0")/.."

CHART=${NFGUARD_CHART:-charts/nfguard}
HEADER="# Generated from monitoring/prometheus-rules.yaml by scripts/sync-monitoring.sh:
# edit that file, then run the script (tests/it/install_helm.rs fails while the
# two differ). The chart renders this file's spec, never as a template."

mode="write"
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: scripts/sync-monitoring.sh [--check]" >&2; exit 2 ;;
esac

# The expected content of each copy on stdout.
expected() { # copy-name
  case "$1" in
    prometheus-rules.yaml) printf '%s\n' "$HEADER"; cat monitoring/prometheus-rules.yaml ;;
    grafana-dashboard.json) cat monitoring/grafana-dashboard.json ;;
  esac
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stale=0
for name in prometheus-rules.yaml grafana-dashboard.json; do
  expected "$name" >"$work/$name"
  copy=$CHART/files/$name
  if cmp -s "$work/$name" "$copy"; then
    continue
  fi
  if [ "$mode" = check ]; then
    echo "sync-monitoring: $copy is not the generated copy of monitoring/$name: run scripts/sync-monitoring.sh" >&2
    stale=1
  else
    mkdir -p "$CHART/files"
    cp "$work/$name" "$copy"
    echo "sync-monitoring: wrote $copy"
  fi
done
[ "$stale" = 0 ] || exit 1
if [ "$mode" = check ]; then
  echo "sync-monitoring: $CHART/files/ matches monitoring/"
fi
