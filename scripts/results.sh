#!/usr/bin/env bash
# `make results`: evaluates the bundled demo pair and writes docs/RESULTS.md with its plots.
#   1. in process, all 607 test questions, thresholds 0..0.99 -> docs/results/
#   2. over a local `tlr serve` with a simulated 170 ms round trip (the paper's assumption),
#      the first 50 questions, default thresholds and both baselines, blocking on every routed
#      token as the paper's system does -> docs/results-network/
#   3. the asynchronous pipeline off, on (default options) and auto (on with `--llm-budget auto`:
#      no limit on the LLM's work) over the same server and round trip, the first 200 questions,
#      at the bundled SLM's own pace and at a simulated 20 ms per SLM step
#      -> docs/results-pipeline/{off,on,auto}-{own,20ms}/ (with every answer's tokens, compared),
#      and the LLM alone on the same 200 questions over the same server (no simulated round trip:
#      only its work is used, for the LLM cost against the LLM alone) -> docs/results-pipeline/llm-alone/
#   4. the cross-vocabulary pair: the same SLM with models/demo/llm-bpe1024.gguf (its own
#      1024-token vocabulary, bridged) and its router, in process, all 607 test questions
#      -> docs/results-xvocab/, and that LLM alone in its own vocabulary -> docs/results-xvocab/native/
#   5. both routing policies (threshold, cost) against the LLM's cost, both pairs and the long-preamble variant
#      -> docs/results-cost/ (preamble/, xvocab/; signals.txt: what a question-level gate could gain)
set -euo pipefail
cd "$(dirname "$0")/.."
tlr=build/bin/tlr
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
$tlr eval --limit 0 --max-tokens 40 --thresholds 0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95,0.99 --out docs/results

log=$(mktemp)
$tlr serve --port 0 -t 1 > "$log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 100); do
  url=$(sed -n 's/^listening on //p' "$log" 2>/dev/null || true)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$log" >&2; echo "results: tlr serve did not start" >&2; exit 1; }
$tlr eval --limit 50 --max-tokens 40 -t 1 --server "$url" --sim-rtt 170 --pipeline off --out docs/results-network
for pace in own 20ms; do
  slm=()
  [ "$pace" = 20ms ] && slm=(--sim-slm-ms 20)
  for setting in off on auto; do
    dir=docs/results-pipeline/$setting-$pace
    pipe=(--pipeline "$setting")
    [ "$setting" = auto ] && pipe=(--pipeline on --llm-budget auto)
    $tlr eval --limit 200 --max-tokens 40 -t 1 --thresholds 0.4,0.8,0.99 --no-baselines --server "$url" \
      --sim-rtt 170 "${pipe[@]}" "${slm[@]}" --out "$dir" --answers "$dir/answers.jsonl"
  done
done
# The baselines alone (--thresholds ''): small_only and large_only rows.
$tlr eval --limit 200 --max-tokens 40 -t 1 --thresholds '' --server "$url" --pipeline off \
  --out docs/results-pipeline/llm-alone
$tlr eval --limit 0 --max-tokens 40 --llm models/demo/llm-bpe1024.gguf --router models/demo/router-bpe1024.gguf \
  --thresholds 0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95,0.99 --out docs/results-xvocab
# That LLM alone in its own vocabulary (no bridge: its large_only row is what it costs natively).
$tlr eval --limit 0 --max-tokens 40 --slm models/demo/llm-bpe1024.gguf --llm models/demo/llm-bpe1024.gguf \
  --router random --thresholds '' --out docs/results-xvocab/native
# 5. accuracy against the LLM's cost: both routing policies on the same questions, for both pairs, and what a
#    question-level gate could gain (scripts/route_signals.py) -> docs/results-cost/
cost_rows=(--thresholds 0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95,0.99
           --cost-thresholds 0.9,0.95,0.97,0.98,0.99,0.995,0.998,0.999)
#    The demo world again (worldgen is deterministic: the same test.jsonl) for the things the SLM was taught and
#    for the long-preamble variant (the same questions after ~105 tokens of other things' descriptions).
world=$(mktemp -d)
python3 tools/worldgen/worldgen.py --seed 7 --things 1000 --values 5 --partial 0.3 --out "$world" > /dev/null
cmp -s "$world/test.jsonl" models/demo/test.jsonl || { echo "results: worldgen no longer gives models/demo/test.jsonl" >&2; exit 1; }
python3 tools/worldgen/preamble.py --world "$world/world.json" --data models/demo/test.jsonl --out "$world/preamble.jsonl" > /dev/null
$tlr eval --limit 0 --max-tokens 40 "${cost_rows[@]}" --out docs/results-cost --answers "$log.answers"
$py scripts/route_signals.py "$log.answers" --threshold 0.8 --world "$world/world.json" --data models/demo/test.jsonl \
  > docs/results-cost/signals.txt
rm -f "$log.answers"
$tlr eval --limit 0 --max-tokens 40 --data "$world/preamble.jsonl" "${cost_rows[@]}" --out docs/results-cost/preamble
rm -rf "$world"
$tlr eval --limit 0 --max-tokens 40 --llm models/demo/llm-bpe1024.gguf --router models/demo/router-bpe1024.gguf \
  "${cost_rows[@]}" --out docs/results-cost/xvocab
$py scripts/results.py docs/results docs/RESULTS.md docs/results-network docs/results-pipeline docs/results-xvocab \
  docs/results-cost
