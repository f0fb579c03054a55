# Sourced by the tests that drive TLR with the official `openai` npm client
# (openai_client_test.sh, device_openai_test.sh): installs the pinned client into
# $build/npm-openai unless it is there, and sets $prefix to that directory. Needs $build.
openai_version=4.104.0
prefix=$build/npm-openai
command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "$(basename "$0"): needs node (>= 20) and npm on PATH (Debian: apt-get install nodejs npm)" >&2; exit 1; }
installed=$(node -p "require('$prefix/node_modules/openai/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$openai_version" ]; then
  echo "installing openai@$openai_version into $prefix"
  npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$prefix" "openai@$openai_version"
fi
