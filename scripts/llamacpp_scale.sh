#!/usr/bin/env bash
# TLR against llama.cpp per weight type and thread count, on this machine (not part of `make test`):
# one random-weight f16 file of PRESET's shape (tlr make-random), quantized to each type by
# llama.cpp's own llama-quantize, then `tlr bench --pp PP --tg TG` and `llama-bench -p PP -n TG`
# on the same file, alternated ROUNDS times per (type, threads); prints a Markdown table of the
# medians and their ratios, with the CPU it ran on. llama.cpp is built from source by
# tools/interop/llamacpp_source.sh (GGML_NATIVE: its AVX-512, VNNI and AMX paths where the CPU
# has them). ../shared/tools/many-core/run.sh is the same measurement for a 16-core machine.
#
# Usage: scripts/llamacpp_scale.sh   (from anywhere; knobs from the environment)
#   PRESET (qwen2.5-0.5b) TYPES ("Q8_0 Q4_0 Q4_K_M Q5_0 Q6_K F16") THREADS ("1 2") ROUNDS (2)
#   PP (128) TG (64) TLR (build/bin/tlr) WORK (/tmp/tlr-llamacpp-scale: the model files)
#   LLAMA_BIN (another llama.cpp build's bin/, e.g. one without AMX: on the 2-core Emerald Rapids
#   VMs llama.cpp's native build dies with SIGILL in its AMX Q8_0 kernel, tinygemm_kernel_amx)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${PRESET:-qwen2.5-0.5b}
types=${TYPES:-"Q8_0 Q4_0 Q4_K_M Q5_0 Q6_K F16"}
threads=${THREADS:-"1 2"}
rounds=${ROUNDS:-2}
pp=${PP:-128}
tg=${TG:-64}
tlr=${TLR:-build/bin/tlr}
work=${WORK:-/tmp/tlr-llamacpp-scale}
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3

lb=${LLAMA_BIN:-$(tools/interop/llamacpp_source.sh)/bin}
mkdir -p "$work"
[ -f "$work/f16.gguf" ] || "$tlr" make-random --preset "$preset" --type f16 --seed 1 -o "$work/f16.gguf" >/dev/null
for q in $types; do
  [ -f "$work/$q.gguf" ] && continue
  if [ "$q" = F16 ]; then cp "$work/f16.gguf" "$work/$q.gguf"
  else "$lb/llama-quantize" "$work/f16.gguf" "$work/$q.gguf" "$q" >/dev/null 2>&1 || { echo "llama-quantize $q failed" >&2; exit 1; }
  fi
  "$tlr" bench -m "$work/$q.gguf" --pp 8 --tg 2 -r 1 -t 1 >/dev/null 2>&1  # writes the weight cache
done

ours() {  # file threads -> "pp tg"
  "$tlr" bench -m "$1" --pp "$pp" --tg "$tg" -r 1 -t "$2" --json 2>/dev/null |
    $py -c 'import json,sys; j=json.load(sys.stdin); print(j["pp_tok_s"], j["tg_tok_s"])'
}
theirs() {  # file threads -> "pp tg"
  local out rc=0
  out=$("$lb/llama-bench" -m "$1" -p "$pp" -n "$tg" -r 1 -t "$2" -o jsonl 2>"$work/llama-bench.err") || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "llama-bench failed on $1 with $2 threads (exit $rc; $work/llama-bench.err)" >&2
    return 1
  fi
  echo "$out" | $py -c 'import json,sys
r={}
for l in sys.stdin:
    j=json.loads(l); r["pp" if j["n_prompt"] > 0 else "tg"]=j["avg_ts"]
print(r["pp"], r["tg"])'
}
median() { $py -c 'import sys,statistics; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F); TLR $(git rev-parse --short HEAD)"
echo
echo "| type | threads | TLR pp$pp | llama.cpp pp$pp | ratio | TLR tg$tg | llama.cpp tg$tg | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for q in $types; do
  for t in $threads; do
    opp=() otg=() lpp=() ltg=()
    for ((i = 0; i < rounds; i++)); do
      res=$(ours "$work/$q.gguf" "$t") || exit 1
      read -r a b <<<"$res"; opp+=("$a"); otg+=("$b")
      res=$(theirs "$work/$q.gguf" "$t") || exit 1
      read -r a b <<<"$res"; lpp+=("$a"); ltg+=("$b")
    done
    mo=$(median "${opp[@]}") ml=$(median "${lpp[@]}") go=$(median "${otg[@]}") gl=$(median "${ltg[@]}")
    echo "| $q | $t | $mo | $ml | $($py -c "print('%.2fx' % ($mo / $ml))") | $go | $gl | $($py -c "print('%.2fx' % ($go / $gl))") |"
  done
done
