#!/usr/bin/env bash
# Installs the Debian packages TLR needs, or says exactly how to.
#   scripts/deps.sh build        what `make` needs
#   scripts/deps.sh build test   plus what `make test` needs (npm, headless Chromium, iproute2/iptables/
#                                haproxy for the network-fault and failover tests, curl for the README test)
#   scripts/deps.sh clang        clang with libFuzzer and the sanitizer runtimes (`make fuzz-test`,
#                                `make fuzz`, `make tsan-test`)
#   scripts/deps.sh aarch64      the ARM cross-build and qemu-user (`make aarch64-test`); adds
#                                Debian's arm64 architecture for the :arm64 libraries
#   scripts/deps.sh wasm         the browser build (`make wasm`): emscripten, and the header-only
#                                Highway and nlohmann-json it compiles against
# As root: apt-get update + apt-get install of whatever is missing. Otherwise: prints the
# exact apt-get line and exits 1. The README says why each package is there.
set -euo pipefail

build_pkgs=(cmake make ninja-build g++ pkg-config python3 nlohmann-json3-dev libcli11-dev libgtest-dev libhwy-dev libcpp-httplib-dev libssl-dev)
test_pkgs=(libicu-dev unicode-data openssl chromium chromium-driver python3-jinja2 python3-torch iproute2 iptables haproxy curl)
clang_pkgs=(clang libclang-rt-14-dev)
# Header-only and architecture-independent packages serve both; compiled libraries come as :arm64.
aarch64_pkgs=(ninja-build g++-aarch64-linux-gnu qemu-user pkg-config nlohmann-json3-dev libcli11-dev
              libhwy-dev:arm64 libgtest-dev:arm64 libssl-dev:arm64 libicu-dev:arm64 libcpp-httplib-dev:arm64)

# emscripten brings clang/LLVM 14 and binaryen; node (its tools' runtime) comes with it.
wasm_pkgs=(emscripten ninja-build cmake libhwy-dev nlohmann-json3-dev)

want=()
for profile in "$@"; do
  case "$profile" in
    build) want+=("${build_pkgs[@]}") ;;
    test) want+=("${test_pkgs[@]}")
          command -v npm >/dev/null 2>&1 || want+=(npm) ;;
    clang) want+=("${clang_pkgs[@]}") ;;
    aarch64) want+=("${aarch64_pkgs[@]}") ;;
    wasm) want+=("${wasm_pkgs[@]}") ;;
    *) echo "deps.sh: unknown profile '$profile' (build, test, clang, aarch64, wasm)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

arm64=0
for p in "${missing[@]}"; do [[ "$p" == *:arm64 ]] && arm64=1; done
add_arch=""
if [ "$arm64" -eq 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  add_arch="dpkg --add-architecture arm64"
fi
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "Missing Debian packages: ${missing[*]}" >&2
  echo "Install them with:" >&2
  echo "  ${add_arch:+sudo $add_arch && }sudo apt-get update && sudo $line" >&2
  exit 1
fi
echo "Installing missing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
[ -n "$add_arch" ] && $add_arch
apt-get update -q
# shellcheck disable=SC2086
$line </dev/null
