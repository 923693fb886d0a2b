#!/usr/bin/env bash
# Downloads the real Debian packages of three iptables releases (1.8.7 from
# bullseye, 1.8.9 from bookworm, 1.8.11 from trixie) and extracts each into
#   $OUT/<version>/root   (dpkg -x of iptables and its netfilter libraries)
#   $OUT/<version>/debs   (the .deb files, for building test images)
#   $OUT/<version>/run    (runs a tool of that release: run iptables-save ...)
# The machine's own apt sources stay untouched: a private apt configuration
# takes the archive URI from the machine's configured Debian source, so no
# mirror host is written anywhere in this repository.
set -euo pipefail

OUT=${1:-${NFGUARD_FIXTURES:-$(cd "$(dirname "$0")/.." && pwd)/target/fixtures}/iptables}
mkdir -p "$OUT"
# Absolute: apt reads a relative Dir:: path below /etc/apt or /var/lib/apt,
# and each release's `run` wrapper names its own directory.
OUT=$(cd "$OUT" && pwd)

archive_uri() {
  local uri=""
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb" && $0 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || { echo "fetch-iptables: no Debian archive URI in /etc/apt/sources*" >&2; exit 2; }
  echo "$uri"
}

URI=$(archive_uri)
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

fetch_suite() { # suite version
  local suite=$1 ver=$2 dir="$OUT/$2"
  if [ -x "$dir/root/usr/sbin/xtables-nft-multi" ] && [ -f "$dir/.complete" ]; then
    return 0
  fi
  rm -rf "$dir"; mkdir -p "$dir/debs" "$dir/root" "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial"
  echo "deb [signed-by=$KEYRING] $URI $suite main" > "$dir/apt/sources.list"
  local opts=(-o "Dir::Etc::sourcelist=$dir/apt/sources.list" -o "Dir::Etc::sourceparts=-"
              -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache"
              -o "Dir::State::status=/dev/null" -o "APT::Get::List-Cleanup=0"
              -o "Acquire::Languages=none" -o "APT::Architecture=amd64" -o "APT::Architectures=amd64")
  apt-get -qq "${opts[@]}" update
  (cd "$dir/debs" && apt-get -qq "${opts[@]}" download iptables libxtables12 libip4tc2 libip6tc2 libnftnl11)
  for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
  local got
  got=$(dpkg-deb -f "$dir"/debs/iptables_*.deb Version)
  case "$got" in "$ver"-*) ;; *) echo "fetch-iptables: $suite has iptables $got, expected $ver" >&2; exit 2;; esac
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
  chmod +x "$dir/run"
  rm -rf "$dir/apt"
  touch "$dir/.complete"
  echo "fetch-iptables: $ver ready in $dir"
}

fetch_suite bullseye 1.8.7
fetch_suite bookworm 1.8.9
fetch_suite trixie 1.8.11
