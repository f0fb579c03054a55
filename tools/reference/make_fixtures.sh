#!/usr/bin/env bash
# Regenerates the reference-forward fixtures in src/model/testdata/ (committed):
#   tiny random qwen2, llama, qwen3 and gemma3 models (tlr make-random, fixed seeds) in f32 and f16,
#   run through tools/reference/forward.py (PyTorch, float64) on a fixed prompt.
# The C++ test (model_test) rebuilds the same models from the same seeds and compares.
# Usage: tools/reference/make_fixtures.sh [path/to/tlr]
set -euo pipefail
cd "$(dirname "$0")/../.."
tlr=${1:-build/bin/tlr}
out=src/model/testdata
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
tokens=5,17,260,300,42,99,7,311,12,400,77,256
for arch in qwen2 llama qwen3 gemma3; do
  preset=tiny
  case $arch in qwen3|gemma3) preset=tiny-$arch ;; esac
  for type in f32 f16; do
    "$tlr" make-random --preset "$preset" --arch "$arch" --type "$type" --seed 7 -o "$tmp/$arch-$type.gguf" >/dev/null
    /usr/bin/python3 tools/reference/forward.py "$tmp/$arch-$type.gguf" --tokens "$tokens" \
      --greedy 32 --out "$out/tiny-$arch-$type.golden.json"
  done
done
