#!/usr/bin/env bash
# `make demo`: token-level routing on the bundled demo pair (models/demo: a 0.35M-parameter
# SLM that knows the facts of 30% of a fictional world, a ~3M-parameter LLM that knows all of
# it, and a CITER router trained for them). Starts `tlr serve` with the demo LLM on a free
# loopback port, then on the device side generates answers to test questions jointly over HTTP
# (LLM tokens in red on a terminal), compares with each model alone, and evaluates a sample.
set -euo pipefail
cd "$(dirname "$0")/.."
tlr=build/bin/tlr
demo=models/demo
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3

question() {  # the prompt of test question N (1-based), as the models were trained to read it
  sed -n "${1}p" $demo/test.jsonl | $py -c '
import json, sys
r = json.loads(sys.stdin.read())
print("Question: " + r["question"])
for l, t in zip(r["choices"]["label"], r["choices"]["text"]):
    print("%s. %s" % (l, t))' 
}
answer_key() {
  sed -n "${1}p" $demo/test.jsonl | $py -c 'import json,sys; r=json.loads(sys.stdin.read()); print(r["answerKey"], r["choices"]["text"]["ABCDE".index(r["answerKey"])])'
}

echo "== the LLM server: tlr serve (demo LLM, free loopback port)"
log=build/demo-serve.log
$tlr serve -m $demo/llm.gguf --port 0 -t 1 > $log 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true' EXIT
url=""
for _ in $(seq 1 100); do
  url=$(sed -n 's/^listening on //p' $log 2>/dev/null || true)
  [ -n "$url" ] && break
  kill -0 $server_pid 2>/dev/null || { cat $log >&2; echo "demo: tlr serve failed" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat $log >&2; echo "demo: tlr serve did not start" >&2; exit 1; }
head -1 $log
echo "listening on $url"

echo
echo "== the demo pair"
$tlr router info $demo/router.gguf | sed -n '1,7p'
for n in 1 2 3; do
  echo
  echo "== question $n of the test split (right answer: $(answer_key $n))"
  question $n
  echo "-- joint (SLM here + router + LLM on the server; LLM tokens in red on a terminal)"
  question $n > build/demo-prompt.txt
  $tlr generate -f build/demo-prompt.txt -n 40 -t 1 --server "$url"
done
echo
echo "== question 1 with each model alone"
question 1 > build/demo-prompt.txt
echo "-- small_only"; $tlr generate -f build/demo-prompt.txt -n 40 -t 2 --mode small_only -q
echo "-- large_only"; $tlr generate -f build/demo-prompt.txt -n 40 -t 1 --mode large_only -q --server "$url"
echo
echo "== question 2 over a simulated 170 ms round trip: blocking on every routed token, then the"
echo "   asynchronous pipeline (the SLM keeps decoding while routed tokens are on the network;"
echo "   the same tokens, less waiting)"
question 2 > build/demo-prompt.txt
for p in off on; do
  echo "-- --pipeline $p"
  $tlr generate -f build/demo-prompt.txt -n 40 -t 1 --server "$url" --sim-rtt 170 --pipeline $p --no-color
done
echo
echo "== tlr eval --limit 100 over the server (accuracy, routed share and time per threshold; Table 1 of the paper)"
$tlr eval --limit 100 --max-tokens 40 -t 1 --server "$url"
echo
echo "== the server's own counters (delta sync: each token is ingested once)"
if command -v curl >/dev/null 2>&1; then
  curl -s "$url/metrics" | grep -E '^tlr_(prefill_tokens_total|decode_tokens_total|generated_tokens_total|forward_passes_total|sessions|evictions_total) ' || true
fi
echo
echo "== next: the web UI (tokens streaming in, LLM tokens red, threshold slider)"
echo "   build/bin/tlr ui --results docs/results/results.json    # then open http://127.0.0.1:8090/"
