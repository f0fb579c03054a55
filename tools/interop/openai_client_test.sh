#!/usr/bin/env bash
# Interoperability test (ctest label `server`): the official `openai` npm client (pinned in
# openai_npm.sh)
# lists models, completes, chats and streams against a real `tlr serve` on an ephemeral
# loopback port, and gets the right error classes for a wrong API key (401) and a bad
# request (400). The assertions are in openai_client_test.mjs.
# Usage: tools/interop/openai_client_test.sh TLR_BINARY BUILD_DIR
set -euo pipefail
tlr=${1:?usage: $0 TLR_BINARY BUILD_DIR}
build=${2:?usage: $0 TLR_BINARY BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/openai_npm.sh"  # the pinned client, in $prefix

log=$(mktemp -d)
server_pid=
cleanup() {
  local rc=$?
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [ "$rc" != 0 ] && [ -s "$log/err" ]; then echo "--- tlr serve stderr:" >&2; cat "$log/err" >&2; fi
  rm -rf "$log"
}
trap cleanup EXIT
"$tlr" serve --port 0 -t 1 --accept-key test-key >"$log/out" 2>"$log/err" &
server_pid=$!
url=
for _ in $(seq 200); do  # up to 20 s
  url=$(sed -n 's/^listening on \(http[^ ]*\)$/\1/p' "$log/out" 2>/dev/null || true)
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "openai_client_test: tlr serve did not print 'listening on URL' within 20 s" >&2
  cat "$log/out" "$log/err" >&2
  exit 1
fi
echo "tlr serve at $url"
# A copy beside node_modules, so that its `import ... from "openai"` resolves to the pinned one.
cp "$here/openai_client_test.mjs" "$prefix/"
node "$prefix/openai_client_test.mjs" "$url" test-key
