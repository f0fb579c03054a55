#!/usr/bin/env bash
# PyTorch in and out (apps layer, label unit): `tlr router train --dump-features` on the bundled
# pair, a CITER and a Co-LLM network trained on the dump in PyTorch (tools/train/router_torch.py,
# Debian's python3-torch), imported with `tlr router import --check`: the imported routers score
# 1,000 hidden states as PyTorch does (within 1e-5). Bad input: a truncated file, a network for
# another hidden size, a BatchNorm before any layer, scores that do not match: each a clear
# error and no router written. R2R's router (its layout from tools/train/r2r_torch.py) likewise.
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

# R2R's router (tools/train/r2r_torch.py: its layout, random weights): the import scores 1,000
# positions (hidden state, logits) as PyTorch does, with and without its input normalization; the
# router file decodes; without the embedding in the file the SLM's is taken; a position embedding
# or a network for another vocabulary is refused.
for norm in "" --normalize-input; do
  "$py" "$root/tools/train/r2r_torch.py" --random $norm --hidden 96 --vocab 512 --out "$tmp/r2r.safetensors" \
    --check "$tmp/r2r-scores.safetensors" >"$tmp/torch.log" 2>&1 || { cat "$tmp/torch.log" >&2; fail "r2r_torch.py $norm"; }
  out=$("$tlr" router import --slm "$demo/slm.gguf" --kind r2r --from "$tmp/r2r.safetensors" -o "$tmp/r2r.gguf" \
          --check "$tmp/r2r-scores.safetensors" 2>&1) || { echo "$out" >&2; fail "import (r2r $norm)"; }
  grep -q "checked 1000 scores against PyTorch's" <<<"$out" || fail "the r2r check did not run on 1000 scores: $out"
  "$tlr" router info --json "$tmp/r2r.gguf" | grep -q '"kind": "r2r"' || fail "the imported router is not r2r"
  echo "ok   r2r $norm: $(grep -o 'largest difference.*' <<<"$out")"
done
# Stored as f16 and q8_0 (the last network above, normalized): within quantization error of
# PyTorch's scores, and not within f32's 1e-5 (so the quantized weights are what scores).
for pair in "f16 0.002" "q8_0 0.02"; do
  read -r wt tol <<<"$pair"
  out=$("$tlr" router import --slm "$demo/slm.gguf" --from "$tmp/r2r.safetensors" -o "$tmp/r2r-$wt.gguf" --weight-type "$wt" \
          --check "$tmp/r2r-scores.safetensors" --tolerance "$tol" 2>&1) || { echo "$out" >&2; fail "import (r2r as $wt)"; }
  "$tlr" router info --json "$tmp/r2r-$wt.gguf" | grep -q "\"weight_type\": \"$wt\"" || fail "the r2r router is not stored as $wt"
  [ "$(stat -c %s "$tmp/r2r-$wt.gguf")" -lt "$(stat -c %s "$tmp/r2r.gguf")" ] || fail "the $wt file is not smaller than f32's"
  expect_error "r2r as $wt against f32's tolerance" "differ from PyTorch's" -- \
    router import --slm "$demo/slm.gguf" --from "$tmp/r2r.safetensors" -o "$tmp/bad.gguf" --weight-type "$wt" \
    --check "$tmp/r2r-scores.safetensors"
  echo "ok   r2r as $wt: $(grep -o 'largest difference.*' <<<"$out")"
done
"$tlr" generate --router "$tmp/r2r-q8_0.gguf" --threshold 0.5 -n 4 -p "Question: Where does a fexko live?" >/dev/null 2>&1 ||
  fail "generate with the q8_0 r2r router"
"$tlr" generate --router "$tmp/r2r.gguf" --threshold 0.5 -n 12 --trace "$tmp/trace.jsonl" \
  -p "$(printf 'Question: Where does a fexko live?\nA. marsh\nB. desert\nC. forest\nD. river\nE. cave\n')" >/dev/null 2>"$tmp/gen.log" || { cat "$tmp/gen.log" >&2; fail "generate with the r2r router"; }
[ "$(wc -l <"$tmp/trace.jsonl")" -ge 2 ] || fail "no tokens traced with the r2r router"
# Trained on the dump (its top logits, tokens and the SLM's embedding): the import checks its
# scores on the held-out positions (up to 1,000) of the SLM's real hidden states.
"$py" "$root/tools/train/r2r_torch.py" --train "$tmp/dump" --epochs 1 --dims 32,32 --out "$tmp/r2r-trained.safetensors" \
  --scores "$tmp/r2r-trained-scores.safetensors" >"$tmp/torch.log" 2>&1 || { cat "$tmp/torch.log" >&2; fail "r2r_torch.py --train"; }
out=$("$tlr" router import --slm "$demo/slm.gguf" --from "$tmp/r2r-trained.safetensors" -o "$tmp/r2r-trained.gguf" \
        --check "$tmp/r2r-trained-scores.safetensors" 2>&1) || { echo "$out" >&2; fail "import (r2r trained on the dump)"; }
grep -qE "checked [0-9]{3,} scores against PyTorch's" <<<"$out" || fail "the trained r2r check ran on too few scores: $out"
echo "ok   r2r trained on the dump: $(grep -o 'largest difference.*' <<<"$out")"
"$py" "$root/tools/train/r2r_torch.py" --random --no-embedding --out "$tmp/r2r-noemb.safetensors" >/dev/null
"$tlr" router import --slm "$demo/slm.gguf" --from "$tmp/r2r-noemb.safetensors" -o "$tmp/r2r-noemb.gguf" >/dev/null ||
  fail "import (r2r without its embedding: the SLM's)"
"$tlr" router info --json "$tmp/r2r-noemb.gguf" | grep -q '"kind": "r2r"' || fail "auto did not find the r2r layout"
echo "ok   r2r without its embedding, kind found by its tensors"
"$py" - "$tmp" "$root/tools/train" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import torch
from router_torch import read_safetensors, write_safetensors
d = sys.argv[1]
t = read_safetensors(d + "/r2r.safetensors")
write_safetensors(d + "/r2r_pos.safetensors", dict(t, **{"backbone.position_embedding": torch.zeros(1024, 64)}))
t["token_embeddings.weight"] = torch.zeros(300, 96)
write_safetensors(d + "/r2r_vocab.safetensors", t)
PY
expect_error "r2r with a position embedding" "position embeddings" -- \
  router import --slm "$demo/slm.gguf" --from "$tmp/r2r_pos.safetensors" -o "$tmp/bad.gguf"
expect_error "r2r for another vocabulary" "300 rows but the SLM's vocabulary 512" -- \
  router import --slm "$demo/slm.gguf" --from "$tmp/r2r_vocab.safetensors" -o "$tmp/bad.gguf"
echo "router_torch_test: passed"
