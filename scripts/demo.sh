#!/usr/bin/env bash
# `make demo`: what TLR can do at this stage of the project. Until the inference engine and
# the bundled model pair exist, it shows the CLI and the reference-exact tokenizer on the
# vocabulary files in ../shared.
set -euo pipefail
cd "$(dirname "$0")/.."
tlr=build/bin/tlr
shared=${TLR_SHARED_DIR:-../shared}
$tlr --help
echo
vocab="$shared/tokenizer-vectors/ggml-vocab-gpt-2.gguf"
if [ -f "$vocab" ]; then
  echo "== tlr info $vocab --no-tensors --max-items 4"
  $tlr info "$vocab" --no-tensors --max-items 4
  echo
  echo "== tlr tokenize -m $vocab \"Hello world, token-level routing!\""
  $tlr tokenize -m "$vocab" "Hello world, token-level routing!"
fi

# The inference engine on a tiny random-weight model (the bundled trained pair comes with the
# demo-pair issue): generation, then a speed measurement against the memory roofline.
model=build/demo/tiny-qwen2-q8_0.gguf
mkdir -p build/demo
[ -f "$model" ] || $tlr make-random --preset tiny --type q8_0 -o "$model"
echo
echo "== tlr run -m $model -p \"The answer is\" -n 24 --temp 0.7 (random weights: expect noise)"
$tlr run -m "$model" -p "The answer is" -n 24 --temp 0.7
echo
echo "== tlr bench -m $model --pp 64 --tg 32 -r 3"
$tlr bench -m "$model" --pp 64 --tg 32 -r 3
