#!/usr/bin/env bash
# Interoperability check (not part of `make test`: it downloads llama.cpp's prebuilt binaries):
# the demo models' GGUF files under llama.cpp (npm node-llama-cpp@3.22.1, CPU) must tokenize
# the prompts exactly as TLR does and produce the same greedy answers.
# Usage: tools/interop/llamacpp_check.sh [N_QUESTIONS]     (run from the repository root)
set -euo pipefail
n=${1:-100}
tlr=build/bin/tlr
work=build/interop
mkdir -p "$work"
if [ ! -d "$work/node_modules/node-llama-cpp" ]; then
  (cd "$work" && npm install --silent --omit=optional --ignore-scripts node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1)
fi
cp tools/interop/llamacpp_greedy.mjs "$work/"
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
fail=0
for m in slm llm; do
  node "$work/llamacpp_greedy.mjs" "$PWD/models/demo/$m.gguf" models/demo/test.jsonl "$n" 40 > "$work/$m.llamacpp.jsonl"
  same=0; total=0
  while IFS= read -r line; do
    id=$($py -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$line")
    want=$($py -c 'import json,sys; print(json.loads(sys.argv[1])["text"])' "$line")
    prompt=$(grep -m1 "\"$id\"" models/demo/test.jsonl | $py -c 'import json,sys
r=json.loads(sys.stdin.read()); print("Question: "+r["question"]); [print(l+". "+t) for l,t in zip(r["choices"]["label"], r["choices"]["text"])]')
    mode=small_only; [ "$m" = llm ] && mode=large_only
    got=$(printf '%s\n' "$prompt" | $tlr generate -f - --mode "$mode" -n 40 -t 1 -q --no-color --temp 0 2>/dev/null | head -1)
    ids=$(printf '%s\n' "$prompt" | $tlr tokenize -m models/demo/$m.gguf --ids-only -f - | tr ' ' ',')
    want_ids=$($py -c 'import json,sys; print(",".join(map(str, json.loads(sys.argv[1])["prompt_ids"])))' "$line")
    total=$((total + 1))
    if [ "$got" = "$want" ] && [ "$ids" = "$want_ids" ]; then same=$((same + 1)); else
      echo "differs ($m, $id): llama.cpp '$want' vs TLR '$got'"; fail=1; fi
  done < "$work/$m.llamacpp.jsonl"
  echo "$m: $same of $total answers and prompt tokenizations identical to llama.cpp's"
done
exit $fail
