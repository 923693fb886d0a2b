#!/usr/bin/env bash
# Builds the pinned Kubernetes and etcd binaries (e2e/kubebins/go.mod, or
# e2e/kubebins-1.30/go.mod with NFGUARD_E2E_KUBE=1.30) from the
# Go module proxy into a cache outside the work tree, keyed by the pins, and
# prints the directory that holds them. A second run finds them and returns at
# once.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# NFGUARD_E2E_KUBE picks the Kubernetes minor: unset or the newest (1.34):
# e2e/kubebins; 1.30, the oldest nfguard claims: e2e/kubebins-1.30.
case "${NFGUARD_E2E_KUBE:-1.34}" in
  1.34 | 1.34.*) mod="$here/kubebins" ;;
  1.30 | 1.30.*) mod="$here/kubebins-1.30" ;;
  *) echo "build-kube.sh: NFGUARD_E2E_KUBE=$NFGUARD_E2E_KUBE: pinned are 1.34 (e2e/kubebins) and 1.30 (e2e/kubebins-1.30)" >&2; exit 2 ;;
esac
cache="${NFGUARD_E2E_CACHE:-/var/cache/nfguard-e2e}"

kube_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "$mod/go.mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$mod/go.mod")"
if [ -z "$kube_version" ] || [ -z "$etcd_version" ]; then echo "build-kube.sh: cannot read the pins in $mod/go.mod" >&2; exit 1; fi
# RECIPE changes with the build flags below, so a changed recipe rebuilds.
RECIPE=2
key="$( (echo "$RECIPE"; cat "$mod/go.mod" "$mod/go.sum") | sha256sum | cut -c1-12)"
out="$cache/kube-$kube_version-$key"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kubelet)

have_all() { for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if have_all; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "build-kube.sh: needs Go (with access to the Go module proxy)" >&2; exit 1; }
mkdir -p "$out.tmp"
minor="$(echo "$kube_version" | cut -d. -f2)"
ld="-s -w"
# Stamp the version so /version (and kubeletVersion) say what was built.
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
cd "$mod"
export GOFLAGS=-mod=readonly CGO_ENABLED=0
start=$SECONDS
for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kubelet; do
  echo "build-kube.sh: building $c $kube_version" >&2
  go build -trimpath -ldflags "$ld" -o "$out.tmp/$c" "k8s.io/kubernetes/cmd/$c"
done
echo "build-kube.sh: building etcd $etcd_version" >&2
go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3
rm -rf "$out"; mv "$out.tmp" "$out"
echo "build-kube.sh: built in $((SECONDS - start)) s into $out" >&2
echo "$out"
