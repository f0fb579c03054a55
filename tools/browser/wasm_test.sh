#!/usr/bin/env bash
# Browser test of TLR in the tab (`make wasm-test`): the WebAssembly build (build-wasm/web, from
# `cmake --preset wasm`) in Debian's headless Chromium through playwright-core, the bundled demo
# pair, a real `tlr serve` on loopback that allows the test page's origin (--cors-origin) and a
# second one that does not. The page is served from another port (another origin) by the test
# itself. Checks in wasm_test.mjs: the tokens (ids and sources) of 20 test questions equal
# `tlr generate --server URL` with the same settings, blocking and pipelined; a conversation
# reuses the tab's KV cache; a second page load takes the models from the browser's storage;
# the failure cases (a model URL that fails, a file that is not GGUF, a refused origin).
# Usage: tools/browser/wasm_test.sh TLR_BINARY WASM_WEB_DIR BUILD_DIR
set -euo pipefail
playwright_version=1.65.1
tlr=${1:?usage: $0 TLR_BINARY WASM_WEB_DIR BUILD_DIR}
web=${2:?usage: $0 TLR_BINARY WASM_WEB_DIR BUILD_DIR}
build=${3:?usage: $0 TLR_BINARY WASM_WEB_DIR BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
prefix=$build/npm-browser
chromium=${TLR_CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || { echo "wasm_test: needs Debian's Chromium at $chromium (scripts/deps.sh test)" >&2; exit 1; }
[ -f "$web/tlr.wasm" ] || { echo "wasm_test: $web/tlr.wasm is missing: cmake --preset wasm && cmake --build build-wasm" >&2; exit 1; }
installed=$(node -p "require('$prefix/node_modules/playwright-core/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$playwright_version" ]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-save --no-audit --no-fund --loglevel=error \
    --prefix "$prefix" "playwright-core@$playwright_version"
fi
cp "$here/wasm_test.mjs" "$prefix/"
node "$prefix/wasm_test.mjs" "$tlr" "$web" "$source_dir/models/demo" "$chromium" "$source_dir/web"
