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
