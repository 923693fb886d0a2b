#!/bin/sh
# Image inspection benchmark: a real docker-registry on loopback, real images,
# nfguard (release build) vs `skopeo copy ... dir:` in the same run.
# Needs: docker-registry, skopeo, dpkg-deb, the iptables fixtures
# (scripts/fetch-iptables.sh). Prints the figures; see docs/image-inspection.md.
set -eu
cd "$(dirname "$0")/.."
exec cargo bench --bench image_inspect "$@"
