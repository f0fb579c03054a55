#!/usr/bin/env bash
# Generation and prompt-processing speed of every weight type and llama.cpp mix TLR runs, on
# random-weight models with real shapes (tlr make-random), as one Markdown table on stdout:
# file type, file size, tg tok/s (median), tg as % of the memory roofline (against the best of
# the probe at the start, median of each run against short probes beside it, and each step
# against a read pass right after it: the stable one on a shared host), pp tok/s and
# its share of the measured int8 dot-product peak.
#
# Single types are written with --pure (every weight matrix in that type, so q4_k is pure
# q4_K; rows that the type's block does not divide fall back as llama.cpp does); the mixes
# are llama-quantize's per-tensor choices. Each file is deleted after its run (an f32
# llama3.2-1b is 5 GB). Timings need an otherwise idle machine.
#
# Usage: scripts/bench_all_types.sh [--presets "P ..."] [--types "T ..."] [--mixes "M ..."]
#          [--reps N] [--pp N] [--tg N] [--threads N] [--build DIR] [--tmp DIR]
# The same settings come from the environment: PRESETS, TYPES, MIXES, REPS, PP, TG, THREADS,
# BUILD_DIR, TMPDIR (options win). Smoke run: --presets tiny --reps 1 --tg 4 --pp 8.
set -euo pipefail
cd "$(dirname "$0")/.."

presets=${PRESETS:-"qwen2.5-0.5b llama3.2-1b"}
types=${TYPES:-"f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs"}
mixes=${MIXES-"q4_k_m q4_k_s q5_k_m q3_k_m"}
reps=${REPS:-5}
pp=${PP:-128}
tg=${TG:-64}
threads=${THREADS:-2}
build=${BUILD_DIR:-build}
tmp_parent=${TMPDIR:-/tmp}

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --presets) presets=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --mixes) mixes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --pp) pp=$2; shift 2 ;;
    --tg) tg=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --tmp) tmp_parent=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_all_types: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

tlr=$build/bin/tlr
[ -x "$tlr" ] || { echo "bench_all_types: $tlr not found (build first, or pass --build DIR)" >&2; exit 1; }
command -v jq > /dev/null || { echo "bench_all_types: needs jq" >&2; exit 1; }
tmp=$(mktemp -d "$tmp_parent/tlr-bench-types.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "tlr bench --pp $pp --tg $tg -r $reps -t $threads ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores)"
echo
echo "| preset | file type | size MiB | tg tok/s | tg roofline % | tg roofline % (paired probes) | tg roofline % (interleaved) | pp$pp tok/s | pp % of int8 peak |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for preset in $presets; do
  for kind in single mix; do
    if [ $kind = single ]; then list=$types; flags=(--pure); else list=$mixes; flags=(); fi
    for t in $list; do
      label=$t
      [ "$kind:$t" = single:q4_k ] && label="q4_k (pure)"
      file=$tmp/$preset-$t.gguf
      if ! "$tlr" make-random --preset "$preset" --type "$t" "${flags[@]}" -o "$file" > /dev/null; then
        echo "| $preset | $label | make-random failed | | | | | | |"
        continue
      fi
      mib=$(awk -v b="$(stat -c %s "$file")" 'BEGIN { printf "%.1f", b / 1048576 }')
      if json=$("$tlr" bench -m "$file" --pp "$pp" --tg "$tg" -r "$reps" -t "$threads" --json); then
        echo "$json" | jq -r --arg p "$preset" --arg t "$label" --arg mib "$mib" \
          '"| \($p) | \($t) | \($mib) | \(.tg_tok_s * 10 | round / 10) | \(.tg_roofline_pct * 10 | round / 10) | \(.tg_roofline_pct_paired * 10 | round / 10) | \(.tg_roofline_pct_interleaved * 10 | round / 10) | \(.pp_tok_s * 10 | round / 10) | \(.pp_int8_peak_pct | round) |"'
      else
        echo "| $preset | $label | $mib | bench failed | | | | | |"
      fi
      rm -f "$file"
    done
  done
done
