#!/usr/bin/env bash
# README's set-up on a fresh machine of a given Debian release: makes a plain
# Debian root with debootstrap (minbase, from the machine's configured
# Debian archive) and runs scripts/test-setup.sh in it, the Debian packages
# and the Python test tools of scripts/test.sh, then imports every Python
# module the tests use. Nothing of the machine's own packages or Python is
# in the root. Not part of scripts/test.sh (minutes of downloads); the last
# runs are in docs/ci.md.
#
#   scripts/check-fresh-setup.sh SUITE [DIR]    SUITE: bookworm, trixie
#
# DIR (default /var/tmp/nfguard-fresh-SUITE) is kept for a second run;
# delete it for a fresh one.
set -euo pipefail
cd "$(dirname "$0")/.."
suite=${1:?usage: scripts/check-fresh-setup.sh SUITE [DIR]}
dir=${2:-/var/tmp/nfguard-fresh-$suite}
[ "$(id -u)" = 0 ] || { echo "check-fresh-setup: run as root (debootstrap, chroot)" >&2; exit 2; }
FETCH_NAME=check-fresh-setup
# shellcheck source=scripts/debian-fetch.sh
source "$(dirname "$0")/debian-fetch.sh"
if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
uri=$(archive_uri)
t0=$SECONDS
if [ ! -x "$dir/usr/bin/apt-get" ]; then
  rm -rf "$dir"
  debootstrap --variant=minbase "$suite" "$dir" "$uri" >"$dir.debootstrap.log" 2>&1 ||
    { tail -n 20 "$dir.debootstrap.log" >&2; exit 1; }
fi
echo "check-fresh-setup: $suite root in $dir ($((SECONDS - t0)) s)"
# Package scripts start no daemon in the root.
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
chmod +x "$dir/usr/sbin/policy-rc.d"
echo "deb $uri $suite main" >"$dir/etc/apt/sources.list"
cp /etc/resolv.conf "$dir/etc/resolv.conf"
# The machine's own network trust, as any machine of its kind has it: local
# CAs (a proxy in front of the registries) and pip's configuration naming
# the system bundle. Debian's ca-certificates takes them in at install.
mkdir -p "$dir/usr/local/share/ca-certificates"
cp -a /usr/local/share/ca-certificates/. "$dir/usr/local/share/ca-certificates/"
[ ! -f /etc/pip.conf ] || cp /etc/pip.conf "$dir/etc/pip.conf"
mkdir -p "$dir/src/scripts"
cp scripts/test-setup.sh scripts/test-requirements.txt "$dir/src/scripts/"
mount -t proc proc "$dir/proc"
trap 'umount "$dir/proc"' EXIT
t0=$SECONDS
# shellcheck disable=SC2016 # expanded in the root
chroot "$dir" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  bash -c 'set -euo pipefail
    cd /src
    ! command -v update-ca-certificates >/dev/null || update-ca-certificates >/dev/null
    source scripts/test-setup.sh
    python3 -c "import yaml, jsonschema, kubernetes_validate, cel, xmlschema, elementpath"
    echo "check-fresh-setup: $(. /etc/os-release; echo "$PRETTY_NAME"): ${#APT_PACKAGES[@]} packages installed, $(python3 --version) venv with $(pip freeze | grep -c .) packages; every test module imports"
    for c in iptables nft containerd runc skopeo umoci registry shellcheck jq; do
      command -v "$c" >/dev/null || command -v "docker-$c" >/dev/null || { echo "check-fresh-setup: $c missing" >&2; exit 1; }
    done'
echo "check-fresh-setup: $suite set-up done in $((SECONDS - t0)) s"
