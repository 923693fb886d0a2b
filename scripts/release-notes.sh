#!/usr/bin/env bash
# Prints the release notes of TAG: its section of CHANGELOG.md (the lines
# under "## vX.Y.Z ..." up to the next "## "). Fails when the section is
# missing or empty, so a release cannot go out without notes.
#   scripts/release-notes.sh vX.Y.Z [CHANGELOG]
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 vX.Y.Z [CHANGELOG]" >&2; exit 2; }
tag=$1
log=${2:-$(cd "$(dirname "$0")/.." && pwd)/CHANGELOG.md}
text=$(<"$log")
out="" in=0
while IFS= read -r line; do
  if [[ "$line" == "## "* ]]; then
    if [ "$in" = 1 ]; then break; fi
    heading=${line#"## "}
    heading=${heading%% *}
    [ "$heading" = "$tag" ] && in=1
    continue
  fi
  [ "$in" = 1 ] && out+="$line"$'\n'
done <<<"$text"
[ "$in" = 1 ] || { echo "release-notes.sh: CHANGELOG.md has no section \"## $tag\"" >&2; exit 1; }
trimmed=${out//[[:space:]]/}
[ -n "$trimmed" ] || { echo "release-notes.sh: the section \"## $tag\" is empty" >&2; exit 1; }
printf '%s' "$out"
