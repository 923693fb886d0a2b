module nfguard.dev/tools/prometheus-operator

go 1.26.7

// Not built: the module is read for its CRDs (example/prometheus-operator-crd/),
// which the e2e applies to the local cluster (scripts/go-module-dir.sh).
require github.com/prometheus-operator/prometheus-operator v0.85.0
