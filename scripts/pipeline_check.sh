#!/usr/bin/env bash
# `make pipeline-check`: the asynchronous pipeline changes when tokens arrive, never which. Runs
# `tlr eval` on all 607 test questions of the demo pair at thresholds 0.4, 0.8 and 0.99 with
# --pipeline off and on, in process and over a local `tlr serve`, both with a simulated
# 170 +- 50 ms round trip, greedy and with --temp 0.8 --seed 3, and compares every answer's
# token ids and sources (eval --answers). The eight runs go in parallel (mostly waiting on the
# simulated network): about 12 minutes. Writes build/pipeline-check/.
set -euo pipefail
cd "$(dirname "$0")/.."
tlr=build/bin/tlr
out=build/pipeline-check
rm -rf "$out"
mkdir -p "$out"
$tlr serve --port 0 -t 1 > "$out/serve.log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true' EXIT
url=""
for _ in $(seq 1 100); do
  url=$(sed -n 's/^listening on //p' "$out/serve.log" 2>/dev/null || true)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$out/serve.log" >&2; echo "pipeline-check: tlr serve did not start" >&2; exit 1; }
run() {  # NAME ARGS...
  local name=$1
  shift
  local start=$SECONDS
  $tlr eval --limit 0 --thresholds 0.4,0.8,0.99 --no-baselines -t 1 --sim-rtt 170 --sim-jitter 50 \
    --out "$out/$name" --answers "$out/$name/answers.jsonl" "$@" > "$out/$name.log" 2>&1
  echo "$name: $((SECONDS - start)) s"
}
pids=()
for p in off on; do
  run inproc-greedy-$p --pipeline $p & pids+=($!)
  run inproc-temp0.8-$p --pipeline $p --temp 0.8 --seed 3 & pids+=($!)
  run server-greedy-$p --server "$url" --pipeline $p & pids+=($!)
  run server-temp0.8-$p --server "$url" --pipeline $p --temp 0.8 --seed 3 & pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
status=0
for v in inproc-greedy inproc-temp0.8 server-greedy server-temp0.8; do
  n=$(wc -l < "$out/$v-on/answers.jsonl")
  if cmp -s "$out/$v-off/answers.jsonl" "$out/$v-on/answers.jsonl"; then
    echo "$v: identical ($n answers: ids and sources)"
  else
    echo "$v: DIFFERENT (see $out/$v-off/answers.jsonl and $out/$v-on/answers.jsonl)"
    status=1
  fi
done
exit $status
