# shellcheck shell=bash
# The Debian-dependent part of scripts/test.sh, sourced by it (and run by
# scripts/check-fresh-setup.sh in plain Debian roots made with debootstrap):
# the Debian packages the tests need, and the Python test tools in a virtual
# environment put first on PATH. Needs root and the repository as the
# working directory.

APT_PACKAGES=(
  iptables nftables iproute2 kmod   # the host tools and netns for scenario tests
  docker-registry skopeo umoci      # a real OCI registry on loopback, image tooling
  libclang-dev pkg-config           # build-time needs of -sys crates
  shellcheck jq zstd curl ca-certificates
  python3 python3-venv              # the Python test tools' virtual environment
  time                              # GNU time: a child's own peak RSS in the hostile-image tests
  rpm                               # a real rpmdb.sqlite for the rpm probe test
  # the local Kubernetes cluster of the e2e scenarios (e2e/local-cluster.sh)
  containerd runc containernetworking-plugins conntrack util-linux socat openssl
  busybox-static gcc libc6-dev
  binutils                          # objcopy: the e2e's binary without its debug information
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || true
  [[ $status == *'install ok installed'* ]] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi


# Offline manifest validation (scripts/check-install.sh) and the JUnit/SARIF
# schema checks of tests/it/check_ci_*.rs: pinned PyPI packages, in a
# virtual environment of their own (Debian's Python refuses `pip install`
# into the system: PEP 668), first on PATH for every script and test below.
venv="$PWD/target/test-venv"
[ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r scripts/test-requirements.txt
export PATH="$venv/bin:$PATH"
