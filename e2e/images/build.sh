#!/usr/bin/env bash
# Builds the e2e images without Docker, from this Debian machine's own files:
#   build.sh nfguard BINARY OUT_TAR IMAGE_NAME   the Dockerfile's runtime stage: BINARY,
#                                                the libraries it links, CA bundle, nonroot
#   build.sh pause OUT_TAR [IMAGE_NAME]          the pod sandbox image (pause.c);
#                                                IMAGE_NAME defaults to registry.k8s.io/pause:3.10
#   build.sh iptables VERSION MODE DEST          Dockerfile.iptables: Debian's iptables VERSION
#                                                (1.8.7, 1.8.9, 1.8.11), MODE nft, legacy or wrapper
#   build.sh nft VERSION DEST                    Debian's nftables VERSION (0.9.8, 1.0.6, 1.1.3):
#                                                nft, libnftables1, libnftnl11 and, for 1.1.3,
#                                                trixie's libc6 with its own loader; busybox
#   build.sh nft-inputs VERSION                  what `nft VERSION` reads (sha256sum lines)
# OUT_TAR is an OCI archive whose index names the image (io.containerd.image.name
# and org.opencontainers.image.ref.name), so `ctr -n k8s.io images import OUT_TAR`
# imports it under IMAGE_NAME. DEST is a skopeo destination, e.g.
# docker://127.0.0.1:5000/nfguard-e2e/incident:1.8.7-nft (TLS not verified unless
# NFGUARD_DEST_TLS_VERIFY=true), or oci-archive:FILE:NAME (written like OUT_TAR).
# The iptables releases come from $NFGUARD_FIXTURES/iptables/VERSION/debs
# (scripts/fetch-iptables.sh; NFGUARD_FIXTURES defaults to $PWD/target/fixtures),
# the nftables releases from $NFGUARD_FIXTURES/nftables/VERSION/debs
# (scripts/fetch-nftables.sh).
#
# Needs (Debian packages): coreutils findutils tar gzip jq dpkg libc-bin
# ca-certificates busybox-static gcc libc6-dev binutils, and skopeo for DEST
# other than oci-archive:. Runs unprivileged; progress goes to stderr only.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
MULTIARCH=x86_64-linux-gnu
# Fixed timestamps: equal inputs give equal digests, so a re-import is a no-op.
EPOCH=${SOURCE_DATE_EPOCH:-0}
CREATED=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)

log() { printf 'build.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() {
  sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/nfguard-images.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ---- rootfs helpers ------------------------------------------------------------

is_elf() { # FILE (a builtin read: this runs for every file of a release)
  local magic=""
  LC_ALL=C IFS= read -r -n 4 magic <"$1" 2>/dev/null || true
  [ "$magic" = $'\x7fELF' ]
}

# first_link BASE PATH: whether a component of PATH is a symlink under BASE
# ("" for this machine); the first such is left in LINK (the path up to and
# including it) and REST (what follows it).
first_link() {
  local base=$1 comp
  LINK="" REST=${2#/}
  while [ -n "$REST" ]; do
    comp=${REST%%/*}
    if [ "$comp" = "$REST" ]; then REST=""; else REST=${REST#*/}; fi
    LINK=$LINK/$comp
    [ -L "$base$LINK" ] && return 0
  done
  return 1
}

# copy_host ROOT PATH: puts this machine's file PATH into ROOT under the same
# path, recreating every symlink met on the way (usrmerge's /lib -> usr/lib,
# /lib64/ld-linux-x86-64.so.2 -> ..., soname -> real file), so the image
# resolves PATH to the same bytes as this machine.
copy_host() {
  local root=$1 path=$2 prefix rest target hops=0
  while first_link "" "$path"; do
    prefix=$LINK rest=$REST
    target=$(readlink "$prefix")
    if [ ! -L "$root$prefix" ]; then
      [ ! -e "$root$prefix" ] || die "$prefix is a symlink here but already a file or directory in the image"
      mkdir -p "$root${prefix%/*}"
      ln -s "$target" "$root$prefix"
      echo "$prefix" >>"$WORK/host-files"
    fi
    case $target in /*) ;; *) target=${prefix%/*}/$target ;; esac
    path=$(realpath -m -s "$target${rest:+/$rest}")
    hops=$((hops + 1))
    [ "$hops" -le 40 ] || die "$2: too many levels of symlinks"
  done
  [ -f "$path" ] || die "$2: not a regular file on this machine"
  mkdir -p "$root${path%/*}"
  cp -p "$path" "$root$path"
  echo "$path" >>"$WORK/host-files"
}

# resolve ROOT PATH: PATH with every symlink inside ROOT followed (absolute
# targets taken relative to ROOT, as in the container).
resolve() {
  local root=$1 path=$2 prefix rest target hops=0
  while first_link "$root" "$path"; do
    prefix=$LINK rest=$REST
    target=$(readlink "$root$prefix")
    case $target in /*) ;; *) target=${prefix%/*}/$target ;; esac
    path=$(realpath -m -s "$target${rest:+/$rest}")
    hops=$((hops + 1))
    [ "$hops" -le 40 ] || die "$2: too many levels of symlinks in the image"
  done
  echo "$path"
}

# copy_libs ROOT LIBDIR STRICT FILE...: copies from this machine the shared
# libraries FILEs load (per ldd, with LIBDIR -- the image's own libraries --
# searched first) that are not in ROOT yet. A missing library always fails;
# a missing symbol version (a library newer than this machine's) fails when
# STRICT=strict and is only reported when STRICT=warn. Static FILEs need none.
copy_libs() {
  local root=$1 strict=$3 out lib msg env=(env -u LD_LIBRARY_PATH)
  [ -z "$2" ] || env+=(LD_LIBRARY_PATH="$2")
  shift 3
  [ $# -gt 0 ] || return 0
  # One ldd for all FILEs; its status only says some FILE was static.
  out=$("${env[@]}" ldd "$@" 2>&1) || true
  if grep -q -e '=> not found' -e '^ldd: ' <<<"$out"; then
    die "missing libraries: $(awk -v f="$1" '/^[^\t].*:$/ { f = substr($0, 1, length($0) - 1); next }
      /=> not found|^ldd: / { print f ":" $0 }' <<<"$out" | sed "s#$root##g" | tr -s ' \t\n' ' ')"
  fi
  if grep -q 'version .* not found' <<<"$out"; then
    msg="newer libraries than this machine's needed: $(grep -o 'version [^ ]* not found (required by [^)]*)' <<<"$out" |
      sed "s#$root##" | sort -u | tr '\n' ' ')"
    [ "$strict" = warn ] || die "$msg"
    log "warning: $msg"
  fi
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' <<<"$out" | sort -u |
    while read -r lib; do
      case $lib in "$root"/*) continue ;; esac
      [ -e "$root$lib" ] || copy_host "$root" "$lib"
    done
}

# forbid_netfilter_tools ROOT: the nfguard and pause images must not ship them.
forbid_netfilter_tools() {
  local found
  found=$(cd "$1" && find . \( -name iptables -o -name ip6tables -o -name nft -o -name 'xtables-*-multi' \) -print)
  [ -z "$found" ] || die "the image would contain netfilter tools: $(tr '\n' ' ' <<<"$found")"
}

base_dirs() { # ROOT: /tmp (1777) and the directories every image has
  mkdir -p "$1/etc" "$1/tmp" "$1/root"
  chmod 1777 "$1/tmp"
  chmod 0700 "$1/root"
}

# ---- OCI image -----------------------------------------------------------------

put_blob() { # LAYOUT FILE: moves FILE into LAYOUT's blobs; prints its digest
  local hex
  hex=$(sha256sum "$2" | cut -d' ' -f1)
  mv "$2" "$1/blobs/sha256/$hex"
  echo "sha256:$hex"
}

# oci_image ROOT NAME CONFIG [PATH...]: WORK/oci, an OCI layout with ROOT as its
# one layer (everything root:root, PATHs owned by 65532:65532), CONFIG (a JSON
# object) as the config's .config, and NAME (may be empty) in the index.
oci_image() {
  local root=$1 name=$2 config=$3 layout=$WORK/oci
  shift 3
  local tarf=$WORK/layer.tar diff_id digest size cfg_digest cfg_size man_digest man_size
  local topts=(--format=gnu --mtime="@$EPOCH" --numeric-owner --no-recursion -C "$root")
  rm -rf "$layout"
  mkdir -p "$layout/blobs/sha256"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

  log "layer: $(du -sh "$root" | cut -f1) of files"
  # Sorted names without "./", like the tars docker and buildkit write.
  (cd "$root" && find . -mindepth 1 -printf '%P\0') | LC_ALL=C sort -z |
    { if [ $# -gt 0 ]; then grep -zvxF -f <(printf '%s\n' "$@"); else cat; fi; } |
    tar -cf "$tarf" "${topts[@]}" --owner=0 --group=0 --null -T -
  if [ $# -gt 0 ]; then
    tar -rf "$tarf" "${topts[@]}" --owner=65532 --group=65532 -- "$@"
  fi
  diff_id=sha256:$(sha256sum "$tarf" | cut -d' ' -f1)
  gzip -n -6 "$tarf"
  size=$(stat -c %s "$tarf.gz")
  digest=$(put_blob "$layout" "$tarf.gz")

  jq -cn --arg created "$CREATED" --arg diff "$diff_id" --argjson config "$config" '{
      created: $created, architecture: "amd64", os: "linux", config: $config,
      rootfs: {type: "layers", diff_ids: [$diff]},
      history: [{created: $created, created_by: "e2e/images/build.sh"}]}' >"$WORK/config.json"
  cfg_size=$(stat -c %s "$WORK/config.json")
  cfg_digest=$(put_blob "$layout" "$WORK/config.json")

  jq -cn --arg cd "$cfg_digest" --argjson cs "$cfg_size" --arg ld "$digest" --argjson ls "$size" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cd, size: $cs},
      layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $ld, size: $ls}]}' >"$WORK/manifest.json"
  man_size=$(stat -c %s "$WORK/manifest.json")
  man_digest=$(put_blob "$layout" "$WORK/manifest.json")

  # containerd's importer names the image after io.containerd.image.name;
  # skopeo's oci-archive:FILE:NAME and podman look up org.opencontainers.image.ref.name.
  jq -cn --arg md "$man_digest" --argjson ms "$man_size" --arg name "$name" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $md, size: $ms,
        platform: {architecture: "amd64", os: "linux"}}
        + (if $name == "" then {} else {annotations: {
            "io.containerd.image.name": $name, "org.opencontainers.image.ref.name": $name}} end)]}' \
    >"$layout/index.json"
  log "image: layer $digest ($size bytes compressed), manifest $man_digest"
}

# oci_archive OUT: WORK/oci as one tar, written next to OUT and renamed, so a
# failed build never leaves a half-written OUT behind.
oci_archive() {
  local out=$1
  mkdir -p "$(dirname "$out")"
  tar -cf "$out.tmp.$$" --format=gnu --mtime="@$EPOCH" --numeric-owner --owner=0 --group=0 \
    -C "$WORK/oci" oci-layout index.json blobs
  mv -f "$out.tmp.$$" "$out"
  log "wrote $out ($(du -h "$out" | cut -f1))"
}

# ---- nfguard ---------------------------------------------------------------------

cmd_nfguard() {
  [ $# -eq 3 ] || usage
  local bin=$1 out=$2 name=$3 root=$WORK/rootfs
  [ -f "$bin" ] || die "$bin: no such binary"
  is_elf "$bin" || die "$bin is not an ELF binary"
  [ -f /etc/ssl/certs/ca-certificates.crt ] || die "/etc/ssl/certs/ca-certificates.crt missing (apt-get install ca-certificates)"
  log "nfguard image $name from $bin"

  base_dirs "$root"
  mkdir -p "$root/usr/local/bin" "$root/home/nonroot"
  install -m 0755 "$bin" "$root/usr/local/bin/nfguard"
  copy_libs "$root" "" strict "$root/usr/local/bin/nfguard"
  copy_host "$root" /etc/ssl/certs/ca-certificates.crt
  [ ! -e /etc/os-release ] || copy_host "$root" /etc/os-release
  # distroless's accounts: the controller and webhook run as nonroot.
  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
nonroot:x:65532:
EOF
  chmod 0644 "$root/etc/passwd" "$root/etc/group"
  chmod 0700 "$root/home/nonroot"
  forbid_netfilter_tools "$root"

  oci_image "$root" "$name" "$(jq -cn --arg path "$PATH_ENV" '{
      User: "65532:65532", WorkingDir: "/home/nonroot",
      Env: [$path, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
      Entrypoint: ["/usr/local/bin/nfguard"],
      ExposedPorts: {"8443/tcp": {}, "9090/tcp": {}}}')" home/nonroot
  oci_archive "$out"
}

# ---- pause -----------------------------------------------------------------------

cmd_pause() {
  [ $# -eq 1 ] || [ $# -eq 2 ] || usage
  local out=$1 name=${2:-registry.k8s.io/pause:3.10} root=$WORK/rootfs
  log "pause image $name"
  mkdir -p "$root"
  gcc -Os -static -Wall -Wextra -o "$root/pause" "$HERE/pause.c"
  strip "$root/pause"
  chmod 0755 "$root/pause"
  forbid_netfilter_tools "$root"
  oci_image "$root" "$name" '{"User":"65535:65535","Entrypoint":["/pause"]}'
  oci_archive "$out"
}

# ---- iptables ----------------------------------------------------------------------

# dpkg_record ROOT PKG_ID STANZA_FILE LIST_FILE: what dpkg keeps of an installed
# package: its status stanza (control fields with Status) and info/PKG_ID.list.
dpkg_record() {
  local root=$1 id=$2
  cat "$3" >>"$root/var/lib/dpkg/status"
  echo >>"$root/var/lib/dpkg/status"
  cp "$4" "$root/var/lib/dpkg/info/$id.list"
}

# install_deb ROOT DEB: dpkg -i without dpkg: files, status, info/.
install_deb() {
  local root=$1 deb=$2 ctl=$WORK/control pkg arch id f
  rm -rf "$ctl"
  dpkg-deb -x "$deb" "$root"
  dpkg-deb -e "$deb" "$ctl"
  pkg=$(dpkg-deb -f "$deb" Package)
  arch=$(dpkg-deb -f "$deb" Architecture)
  # dpkg names a Multi-Arch: same package's info files PKG:ARCH.*
  id=$pkg
  [ "$(dpkg-deb -f "$deb" Multi-Arch)" != same ] || id=$pkg:$arch
  {
    echo "Package: $pkg"
    echo "Status: install ok installed"
    grep -v '^Package:' "$ctl/control"
    if [ -s "$ctl/conffiles" ]; then
      echo "Conffiles:"
      while read -r f; do echo " $f $(md5sum <"$root$f" | cut -d' ' -f1)"; done <"$ctl/conffiles"
    fi
  } >"$WORK/stanza"
  # The package's paths as dpkg lists them: "/." then every entry, no trailing /.
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's#^\./$#/.#' -e 's#^\./#/#' -e 's#\(.\)/$#\1#' >"$WORK/list"
  dpkg_record "$root" "$id" "$WORK/stanza" "$WORK/list"
  for f in "$ctl"/*; do
    [ "${f##*/}" = control ] || cp -p "$f" "$root/var/lib/dpkg/info/$id.${f##*/}"
  done
  log "installed $pkg $(dpkg-deb -f "$deb" Version)"
}

# record_host_packages ROOT: status stanzas and .list files for the packages of
# this machine whose files copy_host put into ROOT (libc6, libmnl0, ...), so the
# image's dpkg database covers what it holds. dpkg knows a file by the path
# its package ships, with or without usrmerge's /usr; shared directories and
# generated files (no single owner) are left out.
record_host_packages() {
  local root=$1 path owner
  [ -s "$WORK/host-files" ] || return 0
  # One dpkg-query for all paths (each call reads the whole database).
  sort -u "$WORK/host-files" | while read -r path; do
    case $path in /usr/*) printf '%s\t%s\n' "$path" "${path#/usr}" ;; *) printf '%s\t%s\n' "$path" "/usr$path" ;; esac
  done >"$WORK/host-paths"
  tr '\t' '\n' <"$WORK/host-paths" | xargs -d '\n' dpkg-query -S 2>/dev/null >"$WORK/dpkg-owners" || true
  # owner<TAB>path for each path (first of path, twin) that one package owns.
  awk -F'\t' 'NR == FNR { i = index($0, ": "); o = substr($0, 1, i - 1); p = substr($0, i + 2)
                          if (o !~ /, / && o !~ /^diversion by/) owner[p] = o; next }
               $1 in owner { print owner[$1] "\t" $1; next }
               $2 in owner { print owner[$2] "\t" $2 }' "$WORK/dpkg-owners" "$WORK/host-paths" |
    sort -u >"$WORK/host-owners"
  local id md5
  cut -f1 "$WORK/host-owners" | uniq | while read -r owner; do
    dpkg-query -s "$owner" >"$WORK/stanza"
    { echo /.; awk -F'\t' -v o="$owner" '$1 == o {print $2}' "$WORK/host-owners"; } >"$WORK/list"
    id=$(dpkg-query -W -f '${binary:Package}' "$owner")
    dpkg_record "$root" "$id" "$WORK/stanza" "$WORK/list"
    # The md5sums of the files the image got ("MD5  path" without the leading /).
    md5=$(dpkg-query --control-path "$owner" md5sums 2>/dev/null) || md5=/dev/null
    awk 'NR == FNR { want[substr($0, 2)] = 1; next } $2 in want' "$WORK/list" "${md5:-/dev/null}" \
      >"$root/var/lib/dpkg/info/$id.md5sums"
  done
}

# alternative ROOT NAME STATUS CURRENT BACKEND:PRIORITY...: update-alternatives'
# state after iptables' postinst registered each BACKEND (with -restore and
# -save slaves) and, for STATUS manual, `update-alternatives --set`.
alternative() {
  local root=$1 name=$2 status=$3 current=$4 choice b s
  shift 4
  {
    echo "$status"
    echo "/usr/sbin/$name"
    for s in restore save; do echo "$name-$s"; echo "/usr/sbin/$name-$s"; done
    echo
    for choice; do
      b=${choice%%:*}
      echo "/usr/sbin/$name-$b"
      echo "${choice#*:}"
      echo "/usr/sbin/$name-$b-restore"
      echo "/usr/sbin/$name-$b-save"
    done
    echo
  } >"$root/var/lib/dpkg/alternatives/$name"
  for s in "" -restore -save; do
    [ -e "$root/usr/sbin/$name-$current$s" ] || die "/usr/sbin/$name-$current$s is not in the release"
    ln -sfn "/etc/alternatives/$name$s" "$root/usr/sbin/$name$s"
    ln -sfn "/usr/sbin/$name-$current$s" "$root/etc/alternatives/$name$s"
  done
}

# busybox_tools ROOT: this machine's static busybox as /usr/bin/busybox and
# the applets a workload image runs (sh, sleep, grep, ...) linked to it.
busybox_tools() {
  local root=$1 f
  [ -f /bin/busybox ] || die "/bin/busybox missing (apt-get install busybox-static)"
  copy_host "$root" /bin/busybox
  for f in sh ash cat grep egrep sed awk ls sleep basename dirname echo printf env true false test '[' \
    head tail wc tr cut sort uniq tee id ps kill mkdir rmdir rm cp mv ln chmod touch find xargs \
    readlink realpath uname hostname date stat more less vi mount umount; do
    [ -e "$root/usr/bin/$f" ] || ln -s busybox "$root/usr/bin/$f"
  done
}

cmd_iptables() {
  [ $# -eq 3 ] || usage
  local version=$1 mode=$2 dest=$3 root=$WORK/rootfs deb f
  case $version in 1.8.7 | 1.8.9 | 1.8.11) ;; *) die "VERSION must be 1.8.7, 1.8.9 or 1.8.11, not $version" ;; esac
  case $mode in nft | legacy | wrapper) ;; *) die "MODE must be nft, legacy or wrapper, not $mode" ;; esac
  case $dest in oci-archive:*:*) ;; oci-archive:*) die "DEST oci-archive:FILE needs a name: oci-archive:FILE:NAME" ;; esac
  [ -f /bin/busybox ] || die "/bin/busybox missing (apt-get install busybox-static)"
  local debdir=${NFGUARD_FIXTURES:-$PWD/target/fixtures}/iptables/$version/debs
  compgen -G "$debdir/iptables_*.deb" >/dev/null ||
    die "no iptables .deb in $debdir: run scripts/fetch-iptables.sh ${NFGUARD_FIXTURES:-$PWD/target/fixtures}/iptables"
  log "iptables $version ($mode) image for $dest"

  base_dirs "$root"
  mkdir -p "$root/run" "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/alternatives" "$root/etc/alternatives"
  : >"$root/var/lib/dpkg/status"
  echo 1 >"$root/var/lib/dpkg/info/format" # info files of Multi-Arch: same packages are PKG:ARCH.*
  for deb in "$debdir"/*.deb; do install_deb "$root" "$deb"; done
  case $(dpkg-deb -f "$debdir"/iptables_*.deb Version) in
    "$version"-*) ;;
    *) die "$debdir holds iptables $(dpkg-deb -f "$debdir"/iptables_*.deb Version), not $version" ;;
  esac

  # What the release links but its debs lack (libc6, libmnl0, libnfnetlink0,
  # libnetfilter-conntrack3) comes from this machine. A newer release may need
  # a newer glibc for a few rarely used extensions: those are only reported.
  local core=() ext=() libdir=$root/usr/lib/$MULTIARCH
  while IFS= read -r -d '' f; do
    is_elf "$f" || continue
    case $f in "$libdir/xtables/"*) ext+=("$f") ;; *) core+=("$f") ;; esac
  done < <(find "$root" -type f -print0)
  copy_libs "$root" "$libdir" strict "${core[@]}"
  copy_libs "$root" "$libdir" warn "${ext[@]}"

  # A shell and coreutils (busybox) so the image runs `sh -c '...'`, `sleep
  # infinity` and iptables-wrapper (sh, grep, basename); usrmerge as bookworm.
  busybox_tools "$root"
  for f in bin sbin lib lib64; do [ -e "$root/$f" ] || ln -s "usr/$f" "$root/$f"; done
  # netbase: iptables looks protocol and ether type names up in these.
  for f in /etc/protocols /etc/services /etc/ethertypes /etc/os-release; do
    [ ! -e "$f" ] || copy_host "$root" "$f"
  done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
  echo 'root:x:0:' >"$root/etc/group"
  record_host_packages "$root"

  local backend=nft
  case $mode in
    nft | legacy)
      backend=$mode
      alternative "$root" iptables manual "$mode" legacy:10 nft:20
      alternative "$root" ip6tables manual "$mode" legacy:10 nft:20
      ;;
    wrapper)
      # apt's state (auto, nft) with the commands replaced by the wrapper.
      alternative "$root" iptables auto nft legacy:10 nft:20
      alternative "$root" ip6tables auto nft legacy:10 nft:20
      install -m 0755 "$HERE/iptables-wrapper" "$root/usr/sbin/iptables-wrapper"
      for f in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
        ln -sfn /usr/sbin/iptables-wrapper "$root/usr/sbin/$f"
      done
      ;;
  esac
  alternative "$root" arptables auto nft nft:20
  alternative "$root" ebtables auto nft nft:20

  # The Dockerfile's checks, without running anything as root or touching
  # netfilter: the release's tools report VERSION with the image's own
  # libraries, and /usr/sbin/iptables leads to the MODE's binary.
  local ld want got
  ld=$root$(resolve "$root" /lib64/ld-linux-x86-64.so.2)
  for b in nft:nf_tables legacy:legacy; do
    got=$("$ld" --library-path "$libdir" "$root/usr/sbin/xtables-${b%%:*}-multi" iptables --version)
    [ "$got" = "iptables v$version (${b#*:})" ] || die "xtables-${b%%:*}-multi says '$got', not iptables v$version (${b#*:})"
  done
  case $mode in wrapper) want=/usr/sbin/iptables-wrapper ;; *) want=/usr/sbin/xtables-$backend-multi ;; esac
  for f in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    got=$(resolve "$root" "/usr/sbin/$f")
    [ "$got" = "$want" ] || die "/usr/sbin/$f leads to $got, not $want"
  done

  workload_image "$root" "nfguard-e2e-iptables-$version-$mode" "$dest"
}

# workload_image ROOT TITLE DEST: ROOT as a runnable workload image (`sleep
# infinity` by default), written to DEST (oci-archive:FILE:NAME is written
# like OUT_TAR, so ctr imports it by name; anything else goes through skopeo).
workload_image() {
  local root=$1 title=$2 dest=$3 file="" name=""
  case $dest in oci-archive:*:*) file=${dest#oci-archive:} name=${file#*:} file=${file%%:*} ;; esac
  oci_image "$root" "$name" "$(jq -cn --arg path "$PATH_ENV" --arg title "$title" '{
      Env: [$path], Cmd: ["sleep", "infinity"],
      Labels: {"org.opencontainers.image.title": $title}}')"
  case $dest in
    oci-archive:*:*) oci_archive "$file" ;;
    *)
      command -v skopeo >/dev/null || die "skopeo is needed to copy to $dest (apt-get install skopeo)"
      local tls=()
      case $dest in docker://*) tls=(--dest-tls-verify="${NFGUARD_DEST_TLS_VERIFY:-false}") ;; esac
      # Our own fresh image: no signature policy to apply.
      skopeo --insecure-policy copy --quiet "${tls[@]}" "oci:$WORK/oci" "$dest" >&2
      log "pushed $dest"
      ;;
  esac
}

# ---- nftables -----------------------------------------------------------------------

# nft_debdir VERSION: the release's .debs (scripts/fetch-nftables.sh).
nft_debdir() {
  local fixtures=${NFGUARD_FIXTURES:-$PWD/target/fixtures} dir
  dir=$fixtures/nftables/$1/debs
  compgen -G "$dir/libnftables1_*.deb" >/dev/null ||
    die "no libnftables1 .deb in $dir: run scripts/fetch-nftables.sh $fixtures/nftables"
  echo "$dir"
}

# nft_unpack ROOT DEBDIR INSTALL: the release's nftables, libnftables1 and
# libnftnl11 into ROOT (INSTALL=install: with their dpkg records; extract:
# files only), then the suite's libc6 where the release brings one (trixie's
# libnftables needs glibc >= 2.38: that libc, loaded by its own loader). The
# release's own ELF files are left in NFT_ELF, the loader to run them with in
# NFT_LD (the image's, or "" for this machine's).
NFT_ELF=()
NFT_LD=""
nft_unpack() {
  local root=$1 debdir=$2 how=$3 deb f libc=""
  NFT_ELF=()
  NFT_LD=""
  for deb in "$debdir"/*.deb; do
    case ${deb##*/} in
      libc6_*) libc=$deb ;;
      nftables_* | libnftables1_* | libnftnl11_*)
        if [ "$how" = install ]; then install_deb "$root" "$deb"; else dpkg-deb -x "$deb" "$root"; fi ;;
      *) die "$deb: not a package of an nftables release" ;;
    esac
  done
  [ -f "$root/usr/sbin/nft" ] || die "$debdir: no usr/sbin/nft in its nftables .deb"
  while IFS= read -r -d '' f; do
    is_elf "$f" && NFT_ELF+=("$f")
  done < <(find "$root" -type f -print0)
  [ -n "$libc" ] || return 0
  if [ "$how" = install ]; then install_deb "$root" "$libc"; else dpkg-deb -x "$libc" "$root"; fi
  NFT_LD=$root/usr/lib/$MULTIARCH/ld-linux-x86-64.so.2
  [ -f "$NFT_LD" ] || die "${libc##*/} has no /usr/lib/$MULTIARCH/ld-linux-x86-64.so.2"
}

# nft_host_libs ROOT: the libraries of this machine that the release's ELF
# files load and its .debs lack (libedit, libmnl, libxtables, libjansson,
# libgmp and theirs), one path a line, resolved by the image's own loader
# with its libraries first (the image's libc, not this machine's, binds them).
nft_host_libs() {
  local root=$1 libdir=$1/usr/lib/$MULTIARCH f out
  for f in "${NFT_ELF[@]}"; do
    out=$(LD_BIND_NOW=1 "$NFT_LD" --library-path "$libdir:/usr/lib/$MULTIARCH" --list "$f" 2>&1) ||
      die "${f#"$root"}: its loader cannot list it: $out"
    if grep -q -e 'not found' -e 'error' <<<"$out"; then die "${f#"$root"}: $(tr -s ' \t\n' ' ' <<<"$out")"; fi
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$out"
  done | { grep -v "^$root/" || true; } | sort -u
}

# build.sh nft-inputs VERSION: what `build.sh nft VERSION` reads besides
# itself, as sha256sum lines: the release's .debs and every file it takes
# from this machine (the cache key of e2e/push-images.sh).
cmd_nft_inputs() {
  [ $# -eq 1 ] || usage
  local debdir root=$WORK/unpacked files=()
  debdir=$(nft_debdir "$1")
  mkdir -p "$root"
  nft_unpack "$root" "$debdir" extract
  if [ -n "$NFT_LD" ]; then
    mapfile -t files < <(nft_host_libs "$root")
  else
    mapfile -t files < <(LD_LIBRARY_PATH=$root/usr/lib/$MULTIARCH ldd "${NFT_ELF[@]}" 2>/dev/null |
      awk -v r="$root/" '$2 == "=>" && $3 ~ /^\// && index($3, r) != 1 {print $3}
                         $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u)
  fi
  (cd "$debdir" && sha256sum -- *.deb)
  sha256sum /bin/busybox /etc/protocols /etc/services "${files[@]}"
}

cmd_nft() {
  [ $# -eq 2 ] || usage
  local version=$1 dest=$2 root=$WORK/rootfs libdir debdir got f ld out
  case $dest in oci-archive:*:*) ;; oci-archive:*) die "DEST oci-archive:FILE needs a name: oci-archive:FILE:NAME" ;; esac
  debdir=$(nft_debdir "$version")
  got=$(dpkg-deb -f "$debdir"/libnftables1_*.deb Version)
  case $got in "$version"-*) ;; *) die "$debdir holds libnftables1 $got, not $version" ;; esac
  log "nftables $version image for $dest"
  libdir=$root/usr/lib/$MULTIARCH

  base_dirs "$root"
  mkdir -p "$root/run" "$root/var/lib/dpkg/info"
  : >"$root/var/lib/dpkg/status"
  echo 1 >"$root/var/lib/dpkg/info/format"
  nft_unpack "$root" "$debdir" install
  # usrmerge (older releases ship /lib/systemd/...; trixie's loader is
  # /lib64/ld-linux-x86-64.so.2 through lib64 -> usr/lib64, where its libc6
  # puts the link to it).
  for f in bin sbin lib lib64; do
    if [ -d "$root/$f" ] && [ ! -L "$root/$f" ]; then
      mkdir -p "$root/usr/$f"
      cp -a "$root/$f/." "$root/usr/$f/"
      rm -rf "${root:?}/$f"
    fi
    [ -L "$root/$f" ] || ln -s "usr/$f" "$root/$f"
  done
  if [ -n "$NFT_LD" ]; then
    nft_host_libs "$root" >"$WORK/host-libs"
    while read -r f; do copy_host "$root" "$f"; done <"$WORK/host-libs"
    ld=$root$(resolve "$root" /lib64/ld-linux-x86-64.so.2)
    [ "$ld" = "$NFT_LD" ] || die "/lib64/ld-linux-x86-64.so.2 leads to ${ld#"$root"}, not the suite's loader ${NFT_LD#"$root"}"
    if grep -E '/(ld-linux-x86-64\.so\.2|libc\.so\.6)$' "$WORK/host-files"; then
      die "this machine's libc or loader went into the image"
    fi
  else
    # An older release runs on this machine's glibc: its libc and loader.
    copy_libs "$root" "$libdir" strict "${NFT_ELF[@]}"
    ld=$root$(resolve "$root" /lib64/ld-linux-x86-64.so.2)
  fi
  busybox_tools "$root"
  # netbase: nft looks protocol and service names up in these.
  for f in /etc/protocols /etc/services; do copy_host "$root" "$f"; done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
  echo 'root:x:0:' >"$root/etc/group"
  record_host_packages "$root"

  # The image runs its own nft on its own libraries: every library the
  # image's loader resolves is the image's, and nft says VERSION (run here
  # unprivileged: --version touches no netfilter).
  out=$(LD_BIND_NOW=1 "$ld" --library-path "$libdir" --list "$root/usr/sbin/nft" 2>&1) ||
    die "the image's loader cannot list /usr/sbin/nft: $out"
  if awk -v r="$root/" '$2 == "=>" && index($3, r) != 1 {bad = 1} END {exit !bad}' <<<"$out"; then
    die "/usr/sbin/nft loads libraries from outside the image: $(tr -s ' \t\n' ' ' <<<"$out")"
  fi
  got=$(LD_BIND_NOW=1 "$ld" --library-path "$libdir" "$root/usr/sbin/nft" --version)
  case $got in "nftables v$version "*) ;; *) die "the image's nft says '$got', not nftables v$version" ;; esac
  for f in libnftables1 nftables libnftnl11; do
    grep -qx "Package: $f" "$root/var/lib/dpkg/status" || die "the image's dpkg status does not name $f"
  done
  log "nft in the image: $got; dpkg: $(awk '/^Package:/ {p = $2} /^Version:/ {printf "%s %s, ", p, $2}' "$root/var/lib/dpkg/status")"

  workload_image "$root" "nfguard-e2e-nft-$version" "$dest"
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
  nfguard) cmd_nfguard "$@" ;;
  pause) cmd_pause "$@" ;;
  iptables) cmd_iptables "$@" ;;
  nft) cmd_nft "$@" ;;
  nft-inputs) cmd_nft_inputs "$@" ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
