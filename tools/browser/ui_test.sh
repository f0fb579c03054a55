#!/usr/bin/env bash
# Browser test of `tlr ui` (ctest label `browser`): Debian's headless Chromium, driven by
# playwright-core from npm (pinned below; it never downloads a browser of its own), uses the page
# of two real `tlr ui` servers on ephemeral loopback ports — the bundled demo pair in process
# with a simulated 150 ms round trip per LLM call (so that Stop has time to act), and one whose
# --server is down (FALLBACK tokens, errors in the page). The checks are in ui_test.mjs; it saves
# screenshots to BUILD_DIR/test-artifacts/ (ui.png: a joint answer with its red LLM tokens).
# Usage: tools/browser/ui_test.sh TLR_BINARY BUILD_DIR
set -euo pipefail
playwright_version=1.65.1
tlr=${1:?usage: $0 TLR_BINARY BUILD_DIR}
build=${2:?usage: $0 TLR_BINARY BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
prefix=$build/npm-browser
artifacts=$build/test-artifacts
chromium=${TLR_CHROMIUM:-/usr/bin/chromium}

if [ ! -x "$chromium" ]; then
  echo "ui_browser_test: needs Debian's Chromium at $chromium; install it with" >&2
  echo "  apt-get install -y --no-install-recommends chromium chromium-driver" >&2
  echo "(as root, \`make test\` installs it through scripts/deps.sh)" >&2
  exit 1
fi
command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "ui_browser_test: needs node (>= 20, for playwright-core) and npm on PATH (Debian: apt-get install nodejs npm)" >&2; exit 1; }
installed=$(node -p "require('$prefix/node_modules/playwright-core/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$playwright_version" ]; then
  echo "installing playwright-core@$playwright_version into $prefix"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-save --no-audit --no-fund --loglevel=error \
    --prefix "$prefix" "playwright-core@$playwright_version"
fi
mkdir -p "$artifacts"

log=$(mktemp -d)
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ "$rc" != 0 ]; then
    for f in "$log"/*.err; do [ -s "$f" ] && { echo "--- $(basename "$f"):" >&2; cat "$f" >&2; }; done
  fi
  rm -rf "$log"
}
trap cleanup EXIT

# start_ui NAME ARGS...: starts `tlr ui --port 0 ARGS` and sets $url from its "listening on" line.
start_ui() {
  local name=$1
  shift
  "$tlr" ui --port 0 -t 1 "$@" >"$log/$name.out" 2>"$log/$name.err" &
  pids+=($!)
  url=
  for _ in $(seq 200); do  # up to 20 s
    # (the background shell may not have created the file yet: under set -e a failing sed would end the test)
    url=$(sed -n 's/^listening on \(http[^ ]*\)$/\1/p' "$log/$name.out" 2>/dev/null || true)
    [ -n "$url" ] && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "ui_browser_test: tlr ui ($name) did not print 'listening on URL' within 20 s" >&2
  cat "$log/$name.out" "$log/$name.err" >&2
  exit 1
}

results=$source_dir/docs/results/results.json
results_args=()
[ -f "$results" ] && results_args=(--results "$results")
start_ui main --sim-rtt 150 "${results_args[@]}"
main_url=$url
start_ui down --server http://127.0.0.1:1 --allow-unreachable --llm-retries 0
down_url=$url
echo "tlr ui at $main_url (in process, --sim-rtt 150) and $down_url (--server down)"
# A copy beside node_modules, so that its `import ... from "playwright-core"` resolves to the pinned one.
cp "$here/ui_test.mjs" "$prefix/"
node "$prefix/ui_test.mjs" "$main_url" "$down_url" "$artifacts" "$chromium" "${#results_args[@]}"
