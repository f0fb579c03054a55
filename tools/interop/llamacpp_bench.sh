#!/usr/bin/env bash
# Prompt processing, TLR vs llama.cpp on the same GGUF files, alternated in one run (not part
# of `make test`: it downloads llama.cpp's prebuilt binaries through npm node-llama-cpp@3.22.1,
# as `make interop-check` does). For each file: `tlr bench --pp PP` and llama.cpp's time to
# evaluate a PP-token prompt in one batch (tools/interop/llamacpp_bench.mjs), ROUNDS times
# each, alternating; prints a Markdown table of medians and the ratio.
# Usage: tools/interop/llamacpp_bench.sh [-p PP] [-t THREADS] [-r ROUNDS] FILE.gguf...
# (run from the repository root; TLR=path/to/tlr overrides build/bin/tlr; WRAP="cmd" runs
# every measured command under cmd, e.g. a script that pauses other work on a shared machine)
set -euo pipefail
pp=128 threads=2 rounds=3
while getopts "p:t:r:" o; do
  case $o in p) pp=$OPTARG ;; t) threads=$OPTARG ;; r) rounds=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-p PP] [-t THREADS] [-r ROUNDS] FILE.gguf..." >&2; exit 2; }
tlr=${TLR:-build/bin/tlr}
work=build/interop
mkdir -p "$work"
if [ ! -d "$work/node_modules/node-llama-cpp" ]; then
  (cd "$work" && npm install --silent --omit=optional --ignore-scripts node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1)
fi
cp tools/interop/llamacpp_bench.mjs "$work/"
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
median() { $py -c 'import sys,statistics; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
echo "| file | TLR pp$pp tok/s | llama.cpp pp$pp tok/s | ratio |"
echo "|---|---|---|---|"
for f in "$@"; do
  ours=() theirs=()
  for ((i = 0; i < rounds; i++)); do
    # Each measured command runs alone (no parser beside it in a pipeline), then is parsed.
    out=$(${WRAP:-} "$tlr" bench -m "$f" --pp "$pp" --tg 1 -r 3 -t "$threads" --json 2>/dev/null)
    ours+=("$(printf '%s' "$out" | $py -c 'import json,sys; print(json.load(sys.stdin)["pp_tok_s"])')")
    out=$(${WRAP:-} node "$work/llamacpp_bench.mjs" "$f" "$pp" 3 "$threads")
    theirs+=("$(printf '%s' "$out" | $py -c 'import json,sys; print(json.load(sys.stdin)["pp_tok_s"])')")
  done
  a=$(median "${ours[@]}") b=$(median "${theirs[@]}")
  echo "| $(basename "$f") | $a | $b | $($py -c "print('%.2fx' % ($a / $b))") |"
done
