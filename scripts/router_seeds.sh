#!/usr/bin/env bash
# The learned routers on the cost curve (issue 47): CITER and Co-LLM routers trained for the bundled
# pair as tools/train/make_demo.sh trains the bundled one (variants of the dev questions and chat
# rows, gold references), and R2R's router trained in PyTorch on the same labelled positions, with
# 3 seeds each, evaluated on all 607 test questions and compared with the maxprob router at equal
# LLM cost (scripts/cost_compare.py). Needs PyTorch (python3-torch) for R2R's.
#   scripts/router_seeds.sh [OUT_DIR]   (default /tmp/tlr-router-seeds; ~10 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/tlr-router-seeds}
tlr=build/bin/tlr
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
mkdir -p "$out"
W=$out/world
python3 tools/worldgen/worldgen.py --seed 7 --things 1000 --values 5 --partial 0.3 --out "$W" > /dev/null
cmp -s "$W/test.jsonl" models/demo/test.jsonl || { echo "router_seeds: worldgen no longer gives the demo test set" >&2; exit 1; }
python3 tools/worldgen/variants.py --data "$W/dev.jsonl" --n 12 --seed 7 --reference --out "$W/router_train.jsonl" > /dev/null
python3 tools/worldgen/chat_corpus.py --data "$W" --conversations 0 --out /dev/null --router-rows "$W/router_chat.jsonl" > /dev/null
cat "$W/router_train.jsonl" "$W/router_chat.jsonl" > "$W/router_train_mixed.jsonl"
thresholds=0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95,0.99
# maxprob's confidences sit near 1: its thresholds reach further, to span the learned routers' costs.
$tlr eval --limit 0 --max-tokens 40 --router maxprob --thresholds "$thresholds,0.995,0.998,0.999,0.9995,0.9999,0.99999" --out "$out/maxprob" > "$out/maxprob.log" 2>&1
dirs=()
for kind in citer colm; do
  for seed in 1 2 3; do
    r=$out/$kind-$seed
    # The LLM's answers are kept in one work directory: the later runs label without asking again.
    # The first also dumps the labelled positions for R2R's router (below).
    dump=()
    [ "$kind$seed" = citer1 ] && dump=(--dump-features "$out/dump")
    $tlr router train --slm models/demo/slm.gguf --llm models/demo/llm.gguf --data "$W/router_train_mixed.jsonl" \
      --kind "$kind" --out "$r.gguf" --lr 1e-4 --seed "$seed" --work-dir "$out/labels" "${dump[@]}" > "$r.train.log" 2>&1
    $tlr eval --limit 0 --max-tokens 40 --router "$r.gguf" --thresholds "$thresholds" --out "$r" > "$r.log" 2>&1
    dirs+=("$r")
  done
done
# R2R's router, trained in PyTorch on the same positions (tools/train/r2r_torch.py; 3 blocks of
# width 96, the SLM's), imported with its scores checked.
for seed in 1 2 3; do
  r=$out/r2r-$seed
  $py tools/train/r2r_torch.py --train "$out/dump" --seed "$seed" --dims 96,96,96 --expansion 4 --epochs 4 \
    --out "$r.safetensors" --scores "$r-scores.safetensors" > "$r.train.log" 2>&1
  $tlr router import --slm models/demo/slm.gguf --from "$r.safetensors" -o "$r.gguf" --check "$r-scores.safetensors" \
    --threshold 0.5 >> "$r.train.log" 2>&1
  $tlr eval --limit 0 --max-tokens 40 --router "$r.gguf" --thresholds "$thresholds" --out "$r" > "$r.log" 2>&1
  dirs+=("$r")
done
$py scripts/cost_compare.py "$out/maxprob" "${dirs[@]}" | sed "s|$out/||"
