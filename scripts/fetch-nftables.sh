#!/usr/bin/env bash
# Downloads the real Debian packages of four nftables releases (0.9.8 from
# bullseye, 1.0.6 from bookworm, 1.1.3 from trixie, and whatever forky (testing) serves,
# which must be a fixed release >= 1.1.4) and extracts each into
#   $OUT/<version>/root   (dpkg -x of nftables, libnftables1, libnftnl11 and,
#                          where the host's glibc is too old, that suite's libc6)
#   $OUT/<version>/debs   (the .deb files, for building test images)
#   $OUT/<version>/run    (runs that release's nft: run list ruleset ...)
# forky's release lives in $OUT/forky (its version moves; $OUT/forky/version says it);
# NFGUARD_NFT_FORKY=0 skips it.
# Every other shared library nft needs (libmnl0, libxtables12, libjansson4,
# libgmp10, libedit2 and theirs) is taken from the bookworm host: each release's
# symbols all resolve against bookworm's versions (checked with LD_BIND_NOW).
# trixie's and forky's libnftables need glibc >= 2.38 (__isoc23_strtol ...), so
# those two also carry their suite's libc6, and a libc must be loaded by its own
# ld.so: their `run` uses the extracted loader, the others use the host's.
# `run` passes the library path with the loader's --library-path, never
# LD_LIBRARY_PATH, so programs that nft starts are unaffected.
# The machine's own apt sources stay untouched: a private apt configuration
# takes the archive URI from the machine's configured Debian source, so no
# mirror host is written anywhere in this repository.
set -euo pipefail

OUT=${1:-${NFGUARD_FIXTURES:-$(cd "$(dirname "$0")/.." && pwd)/target/fixtures}/nftables}
mkdir -p "$OUT"
# Absolute: apt reads a relative Dir:: path below /etc/apt or /var/lib/apt,
# and each release's `run` wrapper names its own directory.
OUT=$(cd "$OUT" && pwd)

FETCH_NAME=fetch-nftables
# shellcheck source=scripts/debian-fetch.sh
source "$(dirname "$0")/debian-fetch.sh"
HOST_LOADER=/lib64/ld-linux-x86-64.so.2

# suite, expected version (upstream part; "min:X" accepts any version >= X),
# directory name, and "libc" when the suite's glibc must come along.
fetch_suite() { # suite expect name [libc]
  local suite=$1 expect=$2 libc=${4:-} dir="$OUT/$3"
  if [ -x "$dir/root/usr/sbin/nft" ] && [ -x "$dir/run" ] && [ -f "$dir/.complete" ]; then
    return 0
  fi
  rm -rf "$dir"; mkdir -p "$dir/root"
  local pkgs=(nftables libnftables1 libnftnl11)
  if [ "$libc" = libc ]; then pkgs+=(libc6); fi
  fetch_debs "$dir" "$suite" "${pkgs[@]}"
  for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done

  local got lib
  got=$(dpkg-deb -f "$dir"/debs/nftables_*.deb Version)
  lib=$(dpkg-deb -f "$dir"/debs/libnftables1_*.deb Version)
  [ "$got" = "$lib" ] || { echo "fetch-nftables: $suite has nftables $got but libnftables1 $lib" >&2; exit 2; }
  case "$expect" in
    min:*)
      if ! dpkg --compare-versions "$got" ge "${expect#min:}"; then
        echo "fetch-nftables: $suite has nftables $got, expected >= ${expect#min:}" >&2; exit 2
      fi;;
    *)
      case "$got" in "$expect"-*) ;; *) echo "fetch-nftables: $suite has nftables $got, expected $expect" >&2; exit 2;; esac;;
  esac

  local loader=$HOST_LOADER libdirs="" d
  for d in usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu; do
    if [ -d "$dir/root/$d" ]; then libdirs="${libdirs:+$libdirs:}\$root/$d"; fi
  done
  if [ "$libc" = libc ]; then
    [ -e "$dir/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] || {
      echo "fetch-nftables: $suite's libc6 has no usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" >&2; exit 2; }
    loader="\$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
  fi
  cat > "$dir/run" <<RUN
#!/bin/sh
# Runs nft of nftables $got (Debian $suite) without installing it: run [NFT ARGS...]
# The loader's --library-path (not LD_LIBRARY_PATH) reaches nft alone, not its children.
root="$dir/root"
exec "$loader" --library-path "$libdirs" "\$root/usr/sbin/nft" "\$@"
RUN
  chmod +x "$dir/run"

  # The release must run on this host: its own version string, through run.
  local says
  says=$("$dir/run" --version 2>&1) || { echo "fetch-nftables: $dir/run --version failed: $says" >&2; exit 2; }
  case "$says" in "nftables v${got%%-*} "*) ;; *) echo "fetch-nftables: $dir/run --version says '$says', expected v${got%%-*}" >&2; exit 2;; esac

  echo "$got" > "$dir/version"
  touch "$dir/.complete"
  echo "fetch-nftables: $got ($suite) ready in $dir"
}

fetch_suite bullseye 0.9.8 0.9.8
fetch_suite bookworm 1.0.6 1.0.6
fetch_suite trixie 1.1.3 1.1.3 libc
if [ "${NFGUARD_NFT_FORKY:-1}" != 0 ]; then
  fetch_suite forky min:1.1.4 forky libc
fi
