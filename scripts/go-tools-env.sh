#!/usr/bin/env bash
# Builds the Go tools the tests need (scripts/go-tool.sh: from the Go module
# proxy, cached, so a second run takes a second) and prints the environment
# that points the tests at them, one NAME=VALUE a line. scripts/test.sh
# exports it; .github/workflows/tests.yml appends it to $GITHUB_ENV.
#   helm                 the chart's checks (tests/it/install_helm.rs), the e2e's Helm install
#   promtool, kustomize  tests/it/monitoring.rs
#   krew                 krew's validator and installer (tests/it/plugin_krew.rs)
#   actionlint           the GitHub workflows (tests/it/ci_workflows.rs)
set -euo pipefail
cd "$(dirname "$0")/.."

helm="$(scripts/go-tool.sh helm)"
promtool="$(scripts/go-tool.sh promtool)"
kustomize="$(scripts/go-tool.sh kustomize)"
krew="$(scripts/go-tool.sh krew)"
actionlint="$(scripts/go-tool.sh actionlint)"

echo "NFGUARD_HELM=$helm/helm"
echo "NFGUARD_PROMTOOL=$promtool/promtool"
echo "NFGUARD_KUSTOMIZE=$kustomize/kustomize"
echo "NFGUARD_KREW_TOOLS=$krew"
echo "NFGUARD_ACTIONLINT=$actionlint/actionlint"
