#!/usr/bin/env bash
# Repeats the heart of a failed run's output at the end of scripts/test.sh,
# where a CI page that keeps only the last lines still shows it: the e2e
# prints its failure, then hundreds of lines of diagnostics, then the whole
# test suite runs after it.
# Usage: scripts/repeat-failure.sh LOG [CONTEXT_LINES]
# Prints every FAIL line (at most 20), then the CONTEXT_LINES (60) lines that
# led to the first one; without a FAIL line, the lines before the e2e's
# "collecting diagnostics", or else the log's last lines.
set -euo pipefail
log=${1:?usage: $0 LOG [CONTEXT_LINES]}
ctx=${2:-60}
[ -r "$log" ] || { echo "repeat-failure: no log at $log" >&2; exit 2; }

# One pass over the whole file (no early exit: the file is read to its end).
awk -v ctx="$ctx" '
  { line[NR] = $0 }
  /FAIL/ { if (!first) first = NR; if (nfail < 20) fails[++nfail] = $0 }
  /collecting diagnostics/ && !diag { diag = NR }
  END {
    at = first ? first : (diag ? diag : NR + 1)
    if (nfail > 0) {
      print "---- the FAIL lines (" nfail " shown):"
      for (i = 1; i <= nfail; i++) print fails[i]
    }
    from = at - ctx; if (from < 1) from = 1
    to = first ? first : at - 1
    print "---- lines " from "-" to " of " NR ", up to the failure:"
    for (i = from; i <= to; i++) print line[i]
  }
' "$log"
