module nfguard.dev/tools/openreports

go 1.26.7

// Not built: the module is read for its CRDs (config/crd/), which the e2e
// and the bench cluster apply (scripts/go-module-dir.sh).
require github.com/openreports/reports-api v0.2.1
