#!/usr/bin/env bash
# Downloads the real Debian packages of four iptables releases (1.8.7 from
# bullseye, 1.8.9 from bookworm, 1.8.11 from trixie, 1.8.13 from forky) and
# extracts each into
#   $OUT/<version>/root   (dpkg -x of iptables and its netfilter libraries and,
#                          where the host's glibc is too old, that suite's libc6)
#   $OUT/<version>/debs   (the .deb files, for building test images)
#   $OUT/<version>/run    (runs a tool of that release: run iptables-save ...)
# libmnl0, libnetfilter-conntrack3 and libnfnetlink0 come from the host.
# forky's iptables and libxtables12 need glibc >= 2.38 (__isoc23_strtol ...,
# Depends: libc6 (>= 2.38)), so 1.8.13 also carries forky's libc6, and a libc
# must be loaded by its own ld.so: its `run` starts the tool through the
# extracted loader with --library-path, never LD_LIBRARY_PATH, so programs the
# tool starts (modprobe) are unaffected. The older three run on the host's
# loader as before.
# forky is Debian testing: when it moves past 1.8.13 this script stops with
# "expected 1.8.13" rather than fetch another release under that name.
# The machine's own apt sources stay untouched: a private apt configuration
# takes the archive URI from the machine's configured Debian source, so no
# mirror host is written anywhere in this repository.
set -euo pipefail

OUT=${1:-${NFGUARD_FIXTURES:-$(cd "$(dirname "$0")/.." && pwd)/target/fixtures}/iptables}
mkdir -p "$OUT"
# Absolute: apt reads a relative Dir:: path below /etc/apt or /var/lib/apt,
# and each release's `run` wrapper names its own directory.
OUT=$(cd "$OUT" && pwd)

FETCH_NAME=fetch-iptables
# shellcheck source=scripts/debian-fetch.sh
source "$(dirname "$0")/debian-fetch.sh"

# suite, version, and "libc" when the suite's glibc must come along.
fetch_suite() { # suite version [libc]
  local suite=$1 ver=$2 libc=${3:-} dir="$OUT/$2"
  if [ -x "$dir/root/usr/sbin/xtables-nft-multi" ] && [ -f "$dir/.complete" ]; then
    return 0
  fi
  rm -rf "$dir"; mkdir -p "$dir/root"
  local pkgs=(iptables libxtables12 libip4tc2 libip6tc2 libnftnl11)
  if [ "$libc" = libc ]; then pkgs+=(libc6); fi
  fetch_debs "$dir" "$suite" "${pkgs[@]}"
  for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
  local got
  got=$(dpkg-deb -f "$dir"/debs/iptables_*.deb Version)
  case "$got" in "$ver"-*) ;; *) echo "fetch-iptables: $suite has iptables $got, expected $ver" >&2; exit 2;; esac
  if [ "$libc" = libc ]; then
    [ -e "$dir/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] || {
      echo "fetch-iptables: $suite's libc6 has no usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" >&2; exit 2; }
    cat > "$dir/run" <<RUN
#!/bin/sh
# Runs one tool of iptables $ver (Debian $suite) without installing it: run TOOL [ARGS...]
# (TOOL is xtables-nft-multi's or xtables-legacy-multi's applet name, e.g. iptables-nft-save)
# $suite's libc6 is loaded by its own ld.so; the loader's --library-path (not
# LD_LIBRARY_PATH) reaches the tool alone, not the programs it starts.
d="$dir/root"
lib="\$d/usr/lib/x86_64-linux-gnu"
case "\$1" in *legacy*) multi=xtables-legacy-multi;; *) multi=xtables-nft-multi;; esac
tool=\$1; shift
exec env XTABLES_LIBDIR="\$lib/xtables" "\$lib/ld-linux-x86-64.so.2" --library-path "\$lib" "\$d/usr/sbin/\$multi" "\$tool" "\$@"
RUN
  else
    cat > "$dir/run" <<RUN
#!/bin/sh
# Runs one tool of iptables $ver without installing it: run TOOL [ARGS...]
# (TOOL is xtables-nft-multi's or xtables-legacy-multi's applet name, e.g. iptables-nft-save)
d="$dir/root"
lib="\$d/usr/lib/x86_64-linux-gnu"
case "\$1" in *legacy*) multi=xtables-legacy-multi;; *) multi=xtables-nft-multi;; esac
tool=\$1; shift
exec env LD_LIBRARY_PATH="\$lib" XTABLES_LIBDIR="\$lib/xtables" "\$d/usr/sbin/\$multi" "\$tool" "\$@"
RUN
  fi
  chmod +x "$dir/run"
  touch "$dir/.complete"
  echo "fetch-iptables: $ver ready in $dir"
}

fetch_suite bullseye 1.8.7
fetch_suite bookworm 1.8.9
fetch_suite trixie 1.8.11
fetch_suite forky 1.8.13 libc
