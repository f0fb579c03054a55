#!/usr/bin/env bash
# Router training with the LLM behind a server (apps layer, label server): on the bundled pair,
# `tlr router train --server` through a real `tlr serve` (native scoring and the OpenAI backend's
# vLLM-style prompt_logprobs) writes the same router as the LLM in process (the same weights
# fingerprint, the same training summary apart from its wall time); a run whose server is killed
# half way continues with the same --work-dir against a restarted server, asks the new server
# only for what the first did not answer (its counters show it), and writes the same router
# again; a server with another vocabulary and a damaged work directory are clear errors.
# Usage: router_server_test.sh path/to/tlr
set -euo pipefail
tlr=${1:?usage: $0 TLR_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
demo=$here/../../../models/demo
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL $*" >&2
  exit 1
}

# start_serve NAME ARGS...: a `tlr serve` on an ephemeral port; sets $url and $pid.
start_serve() {
  local name=$1
  shift
  "$tlr" serve --port 0 -t 1 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  pids+=("$pid")
  url=
  for _ in $(seq 200); do
    url=$(sed -n 's/^listening on \(http[^ ]*\)$/\1/p' "$tmp/$name.out" 2>/dev/null || true)
    [ -n "$url" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$tmp/$name.out" "$tmp/$name.err" >&2
  fail "tlr serve ($name) did not start"
}
metric() {  # metric URL NAME_REGEX: the sum of the matching counters
  python3 -c 'import sys, urllib.request as u; print(u.build_opener(u.ProxyHandler({})).open(sys.argv[1]).read().decode())' \
    "$1/metrics" | awk -v re="$2" '$1 ~ re {s += $2} END {print s + 0}'
}
# The router's identity: its info without the training's wall time.
identity() {
  "$tlr" router info --json "$1" | sed -E 's/"(label_)?seconds": *[0-9.e+-]+,?//'
}

# Training rows: the first 150 dev questions (~150 LLM answers a run), every other one with a
# written reference (so the LLM is asked for its predictions along a given text, and both-wrong
# positions get rollouts).
head -n 150 "$demo/dev.jsonl" | awk '{
  if (NR % 2 == 1) {
    match($0, /"answerKey": *"[A-E]"/); key = substr($0, RSTART + RLENGTH - 2, 1);
    match($0, /"label": *\[[^]]*\]/); labels = substr($0, RSTART, RLENGTH);
    match($0, /"text": *\[[^]]*\]/); texts = substr($0, RSTART, RLENGTH);
    gsub(/"label": *\[|\]|"| /, "", labels); gsub(/"text": *\[|\]/, "", texts);
    nl = split(labels, L, ","); split(texts, T, "\", *\"");
    for (i = 1; i <= nl; i++) if (L[i] == key) { t = T[i]; gsub(/"/, "", t) }
    sub(/}$/, ", \"reference\": \"Answer: " t ". So the answer is " t ".\"}")
  }
  print
}' >"$tmp/rows.jsonl"
grep -q '"reference": "Answer: [a-z]' "$tmp/rows.jsonl" || fail "could not write references into the rows"

train=("$tlr" router train --slm "$demo/slm.gguf" --data "$tmp/rows.jsonl" --seed 3)
"${train[@]}" --llm "$demo/llm.gguf" --out "$tmp/inproc.gguf" 2>"$tmp/inproc.log" || { cat "$tmp/inproc.log" >&2; fail "in-process training"; }
grep -q "both wrong [1-9]" "$tmp/inproc.log" || fail "no both-wrong positions: the references did not exercise the LLM's predictions"
want=$(identity "$tmp/inproc.gguf")

start_serve serve1
for backend in tlr openai; do
  "${train[@]}" --server "$url" --backend "$backend" --out "$tmp/$backend.gguf" 2>"$tmp/$backend.log" ||
    { cat "$tmp/$backend.log" >&2; fail "training through tlr serve ($backend)"; }
  [ "$(identity "$tmp/$backend.gguf")" = "$want" ] || fail "the router trained through the $backend backend differs from the in-process one"
  echo "ok   $backend backend: the same router as in process"
done
[ "$(metric "$url" '^tlr_scored_sequences_total')" -gt 0 ] || fail "the native backend did not use /tlr/v1/score"

# How many answers a whole run asks for.
"${train[@]}" --server "$url" --out "$tmp/full.gguf" --work-dir "$tmp/full" 2>"$tmp/full.log"
total=$(sed -n 's/^LLM answers: \([0-9]*\) asked, 0 reused.*/\1/p' "$tmp/full.log")
[ -n "$total" ] && [ "$total" -gt 100 ] || { cat "$tmp/full.log" >&2; fail "no answer count in the log"; }

# Killed half way: each request 100 ms more, one at a time; the server dies after 3 s.
start_serve slow
slow_pid=$pid
( sleep 3; kill "$slow_pid" ) &
if "${train[@]}" --server "$url" --out "$tmp/resumed.gguf" --work-dir "$tmp/work" --sim-rtt 100 --llm-connections 1 \
     --llm-retries 0 2>"$tmp/killed.log"; then
  fail "the run finished although its server was killed"
fi
grep -q "did not answer" "$tmp/killed.log" || { cat "$tmp/killed.log" >&2; fail "no clear error when the server went away"; }
before=$(grep -c . "$tmp/work/llm_answers.jsonl")
[ "$before" -gt 0 ] && [ "$before" -lt "$total" ] || fail "$before answers kept before the kill (of $total)"
start_serve serve2
"${train[@]}" --server "$url" --out "$tmp/resumed.gguf" --work-dir "$tmp/work" 2>"$tmp/resumed.log" ||
  { cat "$tmp/resumed.log" >&2; fail "the resumed run"; }
grep -q "resuming: $before answers" "$tmp/resumed.log" || fail "the resumed run did not read the $before answers"
asked=$(sed -n 's/^LLM answers: \([0-9]*\) asked.*/\1/p' "$tmp/resumed.log")
[ "$((before + asked))" -eq "$total" ] || fail "$before before + $asked after the restart != $total"
served=$(($(metric "$url" '^tlr_scored_sequences_total') + $(metric "$url" '^tlr_http_requests_total\{endpoint="/v1/completions"')))
[ "$served" -eq "$asked" ] || fail "the restarted server answered $served questions, the run asked $asked"
[ "$(identity "$tmp/resumed.gguf")" = "$want" ] || fail "the resumed router differs from the in-process one"
echo "ok   killed after $before of $total answers, resumed: $asked asked of the new server, the same router"

# Bad input: a damaged work directory, a server with another vocabulary.
echo '{"key": "zz", "out": [1]}' >>"$tmp/work/llm_answers.jsonl"
echo '{"key": "00"}' >>"$tmp/work/llm_answers.jsonl"
if "${train[@]}" --server "$url" --out "$tmp/bad.gguf" --work-dir "$tmp/work" 2>"$tmp/bad.log"; then fail "a damaged work directory was read"; fi
grep -q "llm_answers.jsonl line .* is not an answer" "$tmp/bad.log" || { cat "$tmp/bad.log" >&2; fail "no clear error for a damaged work directory"; }
[ ! -e "$tmp/bad.gguf" ] || fail "a router was written from a damaged work directory"
if "${train[@]}" --server "$url" --backend openai --llm-prompt text --out "$tmp/text.gguf" 2>"$tmp/text.log"; then
  fail "--llm-prompt text was taken where training needs token-id prompts"
fi
grep -q "llm-prompt text: .*token-id prompts" "$tmp/text.log" || { cat "$tmp/text.log" >&2; fail "no clear error for --llm-prompt text"; }
"$tlr" make-random --preset tiny -o "$tmp/other.gguf" >/dev/null
start_serve other -m "$tmp/other.gguf"
for backend in tlr openai; do
  if "${train[@]}" --server "$url" --backend "$backend" --out "$tmp/other-$backend.gguf" 2>"$tmp/other.log"; then
    fail "trained against an LLM with another vocabulary ($backend)"
  fi
  grep -q "different vocabulary" "$tmp/other.log" || { cat "$tmp/other.log" >&2; fail "no clear error for another vocabulary ($backend)"; }
  [ ! -e "$tmp/other-$backend.gguf" ] || fail "a router was written for another vocabulary"
done
echo "ok   bad input: a damaged work directory, --llm-prompt text with one vocabulary, a server with another vocabulary"
echo "router_server_test: passed"
