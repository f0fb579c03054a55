#!/usr/bin/env bash
# Installs the Debian packages TLR needs, or says exactly how to.
#   scripts/deps.sh build        what `make` needs
#   scripts/deps.sh build test   plus what `make test` needs (clang/libFuzzer, npm, headless Chromium)
# As root: apt-get update + apt-get install of whatever is missing. Otherwise: prints the
# exact apt-get line and exits 1. The README says why each package is there.
set -euo pipefail

build_pkgs=(cmake make g++ pkg-config python3 libicu-dev nlohmann-json3-dev libcli11-dev libgtest-dev libhwy-dev libcpp-httplib-dev libssl-dev)
test_pkgs=(clang libclang-rt-14-dev openssl chromium chromium-driver python3-jinja2)

want=()
for profile in "$@"; do
  case "$profile" in
    build) want+=("${build_pkgs[@]}") ;;
    test) want+=("${test_pkgs[@]}")
          command -v npm >/dev/null 2>&1 || want+=(npm) ;;
    *) echo "deps.sh: unknown profile '$profile' (build, test)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "Missing Debian packages: ${missing[*]}" >&2
  echo "Install them with:" >&2
  echo "  sudo apt-get update && sudo $line" >&2
  exit 1
fi
echo "Installing missing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
$line </dev/null
