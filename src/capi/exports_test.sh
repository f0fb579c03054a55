#!/usr/bin/env bash
# libtlr.so exports the C API and nothing else (no C++ internals, no standard-library template
# instances), and carries the ABI version in its SONAME.
# Usage: exports_test.sh LIBTLR TLR_H [NM OBJDUMP] (the target's tools in a cross-build)
set -euo pipefail
lib=$1
header=$2
nm=${3:-nm}
objdump=${4:-objdump}
symbols=$("$nm" -D --defined-only "$lib" | awk '{print $3}' | sort)
others=$(grep -v '^tlr_' <<<"$symbols" || true)
if [ -n "$others" ]; then
  echo "libtlr.so exports symbols other than tlr_*:" >&2
  head -20 <<<"$others" >&2
  echo "($(wc -l <<<"$others") in all)" >&2
  exit 1
fi
# Every function the header declares is exported, and nothing else.
declared=$(grep -v '^#' "$header" | grep -o 'TLR_API [^(]*(' | sed 's/($//; s/.*[ *]//' | sort)
if [ "$declared" != "$symbols" ]; then
  echo "exported and declared differ:" >&2
  diff <(echo "$declared") <(echo "$symbols") >&2 || true
  exit 1
fi
soname=$("$objdump" -p "$lib" | awk '$1 == "SONAME" {print $2}')
major=$(sed -n 's/^#define TLR_API_VERSION_MAJOR \([0-9]*\).*/\1/p' "$header")
if [ "$soname" != "libtlr.so.$major" ]; then
  echo "SONAME is '$soname', expected libtlr.so.$major" >&2
  exit 1
fi
echo "libtlr.so: $(wc -l <<<"$symbols") tlr_* symbols exported, SONAME $soname"
