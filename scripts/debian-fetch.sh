# shellcheck shell=bash
# Sourced by scripts/fetch-iptables.sh and scripts/fetch-nftables.sh: Debian
# packages of any suite, fetched with a private apt configuration so the
# machine's own sources stay untouched. The archive URI is taken from the
# machine's configured Debian source, so no mirror host is written anywhere in
# this repository. Needs FETCH_NAME (the calling script's name, for messages).

# The machine's Debian archive URI (not its security archive).
archive_uri() {
  local uri=""
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb" && $0 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || { echo "$FETCH_NAME: no Debian archive URI in /etc/apt/sources*" >&2; exit 2; }
  echo "$uri"
}

# fetch_debs DIR SUITE PACKAGE...: the packages of SUITE (amd64) into DIR/debs,
# through a private apt state in DIR/apt (removed afterwards). A failed update
# or download is tried once more: the archive answers a passing error at times
# (a Packages index once failed to open and apt-get -qq still exited 0, so the
# download is what shows it).
fetch_debs() {
  local dir=$1 suite=$2 try
  shift 2
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg uri
  uri=$(archive_uri)
  for try in 1 2; do
    rm -rf "$dir/apt" "$dir/debs"
    mkdir -p "$dir/debs" "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial"
    echo "deb [signed-by=$keyring] $uri $suite main" > "$dir/apt/sources.list"
    local opts=(-o "Dir::Etc::sourcelist=$dir/apt/sources.list" -o "Dir::Etc::sourceparts=-"
                -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache"
                -o "Dir::State::status=/dev/null" -o "APT::Get::List-Cleanup=0"
                -o "Acquire::Languages=none" -o "APT::Architecture=amd64" -o "APT::Architectures=amd64")
    if apt-get -qq "${opts[@]}" update && (cd "$dir/debs" && apt-get -qq "${opts[@]}" download "$@"); then
      rm -rf "$dir/apt"
      return 0
    fi
    echo "$FETCH_NAME: fetching $* from $suite failed (try $try of 2)" >&2
  done
  exit 2
}
