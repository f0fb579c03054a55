#!/usr/bin/env bash
# Interoperability test (ctest label `server`): the official `openai` npm client (pinned in
# openai_npm.sh)
# against the device's routed OpenAI-compatible API: `tlr ui --no-page --accept-key` on an
# ephemeral loopback port, its LLM behind a `tlr serve` (the bundled demo pair). A 6-turn streamed
# chat (tlr.tokens, usage, prompt-cache reuse, and token for token what `tlr generate --messages
# --trace` produces for the same conversation), models, error classes (401, 400, 400
# context_length_exceeded), non-streamed chat, and two clients streaming at once. The assertions
# are in device_openai_test.mjs.
# Usage: tools/interop/device_openai_test.sh TLR_BINARY BUILD_DIR
set -euo pipefail
tlr=${1:?usage: $0 TLR_BINARY BUILD_DIR}
build=${2:?usage: $0 TLR_BINARY BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/openai_npm.sh"  # the pinned client, in $prefix

log=$(mktemp -d)
serve_pid= ui_pid=
cleanup() {
  local rc=$?
  for pid in $ui_pid $serve_pid; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  if [ "$rc" != 0 ]; then
    for f in serve ui; do
      if [ -s "$log/$f.err" ]; then echo "--- tlr $f stderr:" >&2; cat "$log/$f.err" >&2; fi
    done
  fi
  rm -rf "$log"
}
trap cleanup EXIT

# wait_url NAME PID: the URL that `tlr NAME` prints as 'listening on URL' (up to 20 s).
wait_url() {
  local url=
  for _ in $(seq 200); do
    url=$(sed -n 's/^listening on \(http[^ ]*\)$/\1/p' "$log/$1.out" 2>/dev/null || true)
    [ -n "$url" ] && break
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$url" ]; then
    echo "device_openai_test: tlr $1 did not print 'listening on URL' within 20 s" >&2
    cat "$log/$1.out" "$log/$1.err" >&2
    return 1
  fi
  echo "$url"
}

"$tlr" serve --port 0 -t 1 >"$log/serve.out" 2>"$log/serve.err" &
serve_pid=$!
serve_url=$(wait_url serve "$serve_pid")
echo "tlr serve at $serve_url"
"$tlr" ui --port 0 -t 1 --no-page --accept-key test-key --server "$serve_url" >"$log/ui.out" 2>"$log/ui.err" &
ui_pid=$!
ui_url=$(wait_url ui "$ui_pid")
grep -qxF "OpenAI-compatible API at $ui_url/v1 (model \"tlr\")" "$log/ui.out" ||
  { echo "device_openai_test: tlr ui did not print 'OpenAI-compatible API at $ui_url/v1'" >&2; cat "$log/ui.out" >&2; exit 1; }
echo "tlr ui at $ui_url"
# A copy beside node_modules, so that its `import ... from "openai"` resolves to the pinned one.
cp "$here/device_openai_test.mjs" "$prefix/"
mkdir "$log/work"
node "$prefix/device_openai_test.mjs" "$ui_url" test-key "$tlr" "$serve_url" "$log/work"
