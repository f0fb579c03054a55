#!/usr/bin/env bash
# `make aarch64-device-test`: the device library alone for ARM64 (build-aarch64-device/, the
# aarch64-device preset: TLR_DEVICE_ONLY, TLS off), what it loads and weighs, and its tests under
# qemu-user: the C API tests, the weight cache written and then mapped, a model packed on x86
# (`tlr convert`) mapped there with the logits of the original, and a routed generation
# against an x86 `tlr serve` on loopback through the built-in client and through the app's hook
# (http_hook_test), token for token against the x86 build's.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD=build-aarch64-device
start=$(date +%s)

grep -qs "CMAKE_GENERATOR:INTERNAL=Ninja" "$BUILD/CMakeCache.txt" || { rm -rf "$BUILD"; cmake --preset aarch64-device; }
cmake --build "$BUILD" -j "$JOBS" --target tlr_shared tlr_static capi_test http_hook_test weight_cache_test \
  packed_gguf_test
# The x86 side: the server and the native program the tokens are compared with.
grep -qs "CMAKE_GENERATOR:INTERNAL=Ninja" build/CMakeCache.txt || cmake --preset release >/dev/null
cmake --build build -j "$JOBS" --target tlr http_hook_test

lib="$BUILD/lib/libtlr.so.1"
echo "== $lib: NEEDED"
aarch64-linux-gnu-readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/  \1/p'
aarch64-linux-gnu-strip -o "$BUILD/libtlr.stripped.so" "$lib"
echo "== stripped: $(stat -c %s "$BUILD/libtlr.stripped.so") bytes; libtlr.a: $(stat -c %s "$BUILD/lib/libtlr.a") bytes"

# qemu-user 7.2 on this kernel never returns from a guest's pthread_create: no threads at all
# (TLR_MAX_THREADS=1 runs the LLM calls inline), and the tests that start threads themselves are
# left to native runs.
export TLR_MAX_THREADS=1
QEMU="qemu-aarch64 -L /usr/aarch64-linux-gnu"
echo "== C API tests under qemu"
$QEMU "$BUILD/bin/capi_test" --gtest_brief=1 \
  --gtest_filter='-CapiTest.CancelAndBusyFromAnotherThread:CapiTest.ThreadEndingInsideTheCallbackReleasesTheDevice'
echo "== the weight cache written, then mapped (same logits), under qemu"
$QEMU "$BUILD/bin/weight_cache_test" --gtest_brief=1
echo "== a model packed on x86 (tlr convert), mapped under qemu: the logits of the original there"
foreign=$(mktemp -d)
trap 'rm -rf "$foreign"' EXIT
build/bin/tlr make-random --preset tiny256 --type q4_k_m -o "$foreign/src.gguf" >/dev/null
build/bin/tlr convert "$foreign/src.gguf" -o "$foreign/src.packed.gguf" >/dev/null
TLR_PACKED_FOREIGN="$foreign" $QEMU "$BUILD/bin/packed_gguf_test" --gtest_brief=1
echo "== a routed generation against x86 tlr serve: built-in client and the app's hook, vs x86"
python3 src/capi/http_hook_test.py --tlr build/bin/tlr --program "$BUILD/bin/http_hook_test" --demo models/demo \
  --run-prefix "$QEMU" --sync --expect-tokens-from build/bin/http_hook_test
echo "aarch64-device-test: $(( $(date +%s) - start )) s"
