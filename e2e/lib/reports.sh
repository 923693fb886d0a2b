# shellcheck shell=bash disable=SC2034,SC2153 # SCENARIO_*, WHY and others are read by e2e/scenarios.sh
# The report CRDs (sourced by e2e/scenarios.sh; scenarios 24, 30 and 33):
# fetched from the Go modules the tools/ pins name, deleted with every
# object of theirs.
REPORTS_MODULE=github.com/openreports/reports-api # pinned by tools/openreports
WG_MODULE=github.com/kyverno/kyverno               # pinned by tools/kyverno

# report_crd TOOL MODULE PATH: the file PATH of the Go module MODULE at the
# version tools/TOOL pins (scripts/go-module-dir.sh: downloaded through the
# Go module proxy once, checked against that go.sum).
report_crd() {
  local dir
  dir=$("$REPO/scripts/go-module-dir.sh" "$1" "$2") || fail "scripts/go-module-dir.sh $1 $2 failed"
  [ -f "$dir/$3" ] || fail "$2 (tools/$1) has no $3"
  echo "$dir/$3"
}

no_report_crd() { # NAME
  if kubectl get crd "$1" >/dev/null 2>&1; then
    WHY="crd $1 still exists"
    return 1
  fi
}

delete_report_crds() { # FILE...: delete the CRDs (and so every object of theirs)
  local f
  for f in "$@"; do
    kubectl delete --ignore-not-found --wait=true -f "$f" >/dev/null
  done
}
