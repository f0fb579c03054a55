#!/usr/bin/env bash
# PyTorch in and out (apps layer, label unit): `tlr router train --dump-features` on the bundled
# pair, a CITER and a Co-LLM network trained on the dump in PyTorch (tools/train/router_torch.py,
# Debian's python3-torch), imported with `tlr router import --check`: the imported routers score
# 1,000 hidden states as PyTorch does (within 1e-5). Bad input: a truncated file, a network for
# another hidden size, a BatchNorm before any layer, scores that do not match: each a clear
# error and no router written.
# Usage: router_torch_test.sh path/to/tlr
set -euo pipefail
tlr=${1:?usage: $0 TLR_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../../..
demo=$root/models/demo
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null ||
  { echo "router_torch_test: needs PyTorch for $py (Debian: apt-get install python3-torch; make test installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL $*" >&2
  exit 1
}

"$tlr" router train --slm "$demo/slm.gguf" --llm "$demo/llm.gguf" --data "$demo/dev.jsonl" --out "$tmp/native.gguf" \
  --epochs 2 --dump-features "$tmp/dump" 2>"$tmp/train.log" || { cat "$tmp/train.log" >&2; fail "training with --dump-features"; }
[ -s "$tmp/dump/manifest.json" ] && [ -s "$tmp/dump/features-00000.safetensors" ] || fail "no dump written"

for kind in citer colm; do
  "$py" "$root/tools/train/router_torch.py" --dump "$tmp/dump" --kind "$kind" --epochs 3 --out "$tmp/$kind.safetensors" \
    --scores "$tmp/$kind-scores.safetensors" >"$tmp/torch.log" 2>&1 || { cat "$tmp/torch.log" >&2; fail "PyTorch training ($kind)"; }
  out=$("$tlr" router import --slm "$demo/slm.gguf" --from "$tmp/$kind.safetensors" -o "$tmp/$kind.gguf" \
          --check "$tmp/$kind-scores.safetensors" 2>&1) || { echo "$out" >&2; fail "import ($kind)"; }
  grep -q "checked 1000 scores against PyTorch's" <<<"$out" || fail "the check did not run on 1000 scores: $out"
  "$tlr" router info --json "$tmp/$kind.gguf" | grep -q "\"kind\": \"$kind\"" || fail "the imported router is not $kind"
  echo "ok   $kind: $(grep -o 'largest difference.*' <<<"$out")"
done

# Bad input: each an error naming the problem, nothing written.
expect_error() {  # expect_error NAME REGEX -- tlr args...
  local name=$1 re=$2
  shift 3
  rm -f "$tmp/bad.gguf"
  local out status=0
  out=$("$tlr" "$@" 2>&1) || status=$?
  [ "$status" -eq 1 ] || fail "$name: exit status $status, output: $out"
  grep -qE -- "$re" <<<"$out" || fail "$name: no clear error: $out"
  [ ! -e "$tmp/bad.gguf" ] || fail "$name: a router was written"
  echo "ok   $name"
}
head -c 300 "$tmp/citer.safetensors" >"$tmp/truncated.safetensors"
expect_error "truncated safetensors" "does not fit the file|outside the data|truncated" -- \
  router import --slm "$demo/slm.gguf" --from "$tmp/truncated.safetensors" -o "$tmp/bad.gguf"
"$py" - "$tmp" "$root/tools/train" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import torch
from router_torch import write_safetensors
d = sys.argv[1]
h = 64  # the demo SLM's hidden size is 96
write_safetensors(d + "/wrong_hidden.safetensors", {"0.weight": torch.zeros(1, h), "0.bias": torch.zeros(1)})
write_safetensors(d + "/bn_first.safetensors", {"0.running_mean": torch.zeros(96), "0.running_var": torch.ones(96),
                                               "1.weight": torch.zeros(1, 96)})
write_safetensors(d + "/two_layers.safetensors", {"0.weight": torch.zeros(96, 96), "1.weight": torch.zeros(1, 96)})
PY
expect_error "a network for another hidden size" "reads 64 values; the SLM's hidden state has 96" -- \
  router import --slm "$demo/slm.gguf" --from "$tmp/wrong_hidden.safetensors" -o "$tmp/bad.gguf"
expect_error "BatchNorm before any layer" "BatchNorm '0.' comes before any linear layer" -- \
  router import --slm "$demo/slm.gguf" --from "$tmp/bn_first.safetensors" -o "$tmp/bad.gguf"
expect_error "neither citer nor colm" "2 linear layers" -- \
  router import --slm "$demo/slm.gguf" --from "$tmp/two_layers.safetensors" -o "$tmp/bad.gguf"
expect_error "scores that differ (--invert)" "differ from PyTorch's" -- \
  router import --slm "$demo/slm.gguf" --from "$tmp/citer.safetensors" -o "$tmp/bad.gguf" --invert \
  --check "$tmp/citer-scores.safetensors"
echo "router_torch_test: passed"
