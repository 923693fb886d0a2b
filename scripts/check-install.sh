#!/usr/bin/env bash
# Offline checks of nfguard's install artefacts (tests/it/install_check.rs runs it):
#   1. render manifests/ with kustomize (NFGUARD_KUSTOMIZE, the one the tests
#      build; else `kubectl kustomize` or `kustomize build` on PATH) and with
#      scripts/kustomize_render.py; both must agree (in CI a kustomize must
#      exist);
#   2. validate every built-in object with kubernetes-validate (strict) for
#      the oldest (1.30: ValidatingAdmissionPolicy v1, node-name token claim)
#      and newest Kubernetes release nfguard supports;
#   3. validate custom resources against the generated CRD schemas, evaluate
#      the reporter policy's CEL on sample requests, and check the security
#      and wiring invariants (scripts/check_manifests.py).
# Needs python3 with: kubernetes-validate==1.37.0 jsonschema==4.26.0 PyYAML==6.0.3
# common-expression-language==0.10.0 (CEL of the reporter's admission policy).
# Without them it prints "skipped: ..." and exits 0, unless
# NFGUARD_REQUIRE_PRIVILEGED=1 or NFGUARD_REQUIRE_INSTALL_TOOLS=1 (CI), then 1.
# NFGUARD_RENDERER=fallback forces the Python renderer (to test it).
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSIONS=(1.30.0 1.33.0)
PIP_PACKAGES="kubernetes-validate==1.37.0 jsonschema==4.26.0 PyYAML==6.0.3 common-expression-language==0.10.0"
PY=${PYTHON:-python3}

skip_or_fail() {
  if [ "${NFGUARD_REQUIRE_PRIVILEGED:-}" = 1 ] || [ "${NFGUARD_REQUIRE_INSTALL_TOOLS:-}" = 1 ]; then
    echo "check-install: $1 (required in CI)" >&2
    exit 1
  fi
  echo "skipped: $1"
  exit 0
}

command -v "$PY" >/dev/null || skip_or_fail "python3 not found"
"$PY" -c 'import yaml, jsonschema, kubernetes_validate, cel' 2>/dev/null ||
  skip_or_fail "python modules missing: pip install $PIP_PACKAGES"
KV=(kubernetes-validate)
command -v kubernetes-validate >/dev/null || KV=("$PY" -m kubernetes_validate)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. Render.
"$PY" scripts/kustomize_render.py manifests >"$work/fallback.yaml"
renderer=""
if [ "${NFGUARD_RENDERER:-}" = fallback ]; then
  renderer="scripts/kustomize_render.py (forced by NFGUARD_RENDERER=fallback)"
  cp "$work/fallback.yaml" "$work/rendered.yaml"
elif [ -n "${NFGUARD_KUSTOMIZE:-}" ]; then
  # The kustomize the tests build (scripts/go-tools-env.sh): under
  # scripts/test.sh the fallback is always compared with the real renderer.
  "$NFGUARD_KUSTOMIZE" build manifests >"$work/kubectl.yaml" 2>"$work/kubectl.err" ||
    { cat "$work/kubectl.err" >&2; echo "check-install: NFGUARD_KUSTOMIZE=$NFGUARD_KUSTOMIZE build failed" >&2; exit 1; }
  renderer="$NFGUARD_KUSTOMIZE build"
  cp "$work/kubectl.yaml" "$work/rendered.yaml"
elif command -v kubectl >/dev/null && kubectl kustomize manifests >"$work/kubectl.yaml" 2>"$work/kubectl.err"; then
  renderer="kubectl kustomize"
  cp "$work/kubectl.yaml" "$work/rendered.yaml"
elif command -v kustomize >/dev/null && kustomize build manifests >"$work/kubectl.yaml" 2>"$work/kubectl.err"; then
  renderer="kustomize build"
  cp "$work/kubectl.yaml" "$work/rendered.yaml"
elif [ "${NFGUARD_REQUIRE_PRIVILEGED:-}" = 1 ] || [ "${NFGUARD_REQUIRE_INSTALL_TOOLS:-}" = 1 ]; then
  echo "check-install: no kustomize to compare scripts/kustomize_render.py with (NFGUARD_KUSTOMIZE, kubectl or kustomize; required in CI)" >&2
  exit 1
else
  renderer="scripts/kustomize_render.py (no kubectl or kustomize here)"
  cp "$work/fallback.yaml" "$work/rendered.yaml"
fi
echo "check-install: rendered manifests/ with $renderer"
if [ -s "$work/kubectl.yaml" ]; then
  "$PY" - "$work/kubectl.yaml" "$work/fallback.yaml" <<'PYEOF'
import sys, yaml
def load(p):
    objs = [o for o in yaml.safe_load_all(open(p, encoding="utf-8")) if o]
    return sorted(objs, key=lambda o: (o["kind"], o["metadata"]["name"]))
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    print("check-install: scripts/kustomize_render.py disagrees with kustomize:", file=sys.stderr)
    for x, y in zip(a, b):
        if x != y:
            print(f"  first difference in {x['kind']}/{x['metadata']['name']}", file=sys.stderr)
            break
    else:
        print(f"  {len(a)} vs {len(b)} objects", file=sys.stderr)
    sys.exit(1)
print(f"check-install: fallback renderer agrees with kustomize ({len(a)} objects)")
PYEOF
fi

# 2. Built-in kinds against the Kubernetes OpenAPI schemas (strict: unknown fields fail).
"$PY" - "$work/rendered.yaml" "$work/builtin.yaml" <<'PYEOF'
import sys, yaml
objs = [o for o in yaml.safe_load_all(open(sys.argv[1], encoding="utf-8")) if o]
builtin = [o for o in objs if not o["apiVersion"].startswith("nfguard.io/")]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    yaml.safe_dump_all(builtin, f)
PYEOF
for v in "${K8S_VERSIONS[@]}"; do
  if ! "${KV[@]}" --strict -k "$v" --quiet "$work/builtin.yaml" >"$work/kv.out" 2>&1; then
    cat "$work/kv.out" >&2
    echo "check-install: kubernetes-validate failed for Kubernetes $v" >&2
    exit 1
  fi
  if grep -q "Couldn't find schema" "$work/kv.out"; then
    cat "$work/kv.out" >&2
    echo "check-install: kubernetes-validate has no schema for a built-in kind (Kubernetes $v)" >&2
    exit 1
  fi
  echo "check-install: kubernetes-validate --strict -k $v: ok"
done

# 3. Custom resources against the CRDs; least privilege and wiring invariants.
"$PY" scripts/check_manifests.py "$work/rendered.yaml" docs/install.md
echo "check-install: ok"
