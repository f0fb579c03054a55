#!/usr/bin/env bash
# `make aarch64-test`: the ARM64 cross-build (build-aarch64/, cmake/aarch64.cmake) and its unit,
# kernel and model tests under qemu-user. ctest runs everything with qemu's `max` CPU at a
# 128-bit SVE vector length (Highway targets NEON, SVE, SVE2, SVE2_128); the kernel tests then
# run again at 256 bits (adds SVE_256) and 512 bits (SVE and SVE2 on wider vectors), so every
# target Debian's Highway compiles for aarch64 runs, not only compiles. Prints the targets run.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD=build-aarch64
start=$(date +%s)

grep -qs "CMAKE_GENERATOR:INTERNAL=Ninja" "$BUILD/CMakeCache.txt" || { rm -rf "$BUILD"; cmake --preset aarch64; }
cmake --build "$BUILD" -j "$JOBS"

# Debian 12's qemu-user (7.2) on this machine's kernel (6.18) never returns from the guest's
# first pthread_create (a five-line C program that starts one thread hangs the same way), so
# every pool runs on the calling thread alone (TLR_MAX_THREADS=1, which qemu passes on to the
# guest), and the tests that start threads of their own (the pool's and the kernels'
# threaded-vs-single tests; the decoder, speculation, pipeline and eval tests, whose LLM calls
# run on a worker thread, and the C API and CLI tests that drive it; the session store's
# concurrency tests; the cross-vocabulary pair's pipelined run; the socket HTTP stack's tests,
# whose peer is a thread) are left to native runs (x86 here, TSan, native ARM). A test that
# still hangs fails at the timeout. router_torch_test trains routers with the emulated binary
# and outruns its 300 s there; the arithmetic it checks runs on the kernels tested here.
export TLR_MAX_THREADS=1
QEMU_THREADED='^router_torch_test$|^SocketHttp\.|^ThreadPool\.|ThreadedMatchesSingleThreaded|^Decoder[A-Za-z0-9]*Test\.|^Speculation\.|^PipelineTest\.|^Eval\.|^SessionStore\.|^CapiTest\.|^cli_test$|^BridgedLlmTest\.RoutesAcrossVocabulariesAndThePipelineChangesNothing$'
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 1200 -L '^(unit|kernel|model)$' \
  -E "$QEMU_THREADED" ${CTEST_ARGS:-}

qemu() { qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu "max,sve-default-vector-length=$1" "${@:2}"; }
ran=$(qemu 16 "$BUILD/bin/ops_test" --gtest_list_tests --gtest_filter='AllTargets/*' | grep -oE '/[A-Z0-9_]+  ' | tr -d '/ ')
for vl in 32 64; do
  echo "== kernel tests at an SVE vector length of $((vl * 8)) bits"
  qemu "$vl" "$BUILD/bin/ops_test" --gtest_filter='AllTargets/*:-*Threaded*' --gtest_brief=1
  ran+=$'\n'$(qemu "$vl" "$BUILD/bin/ops_test" --gtest_list_tests --gtest_filter='AllTargets/*' | grep -oE '/[A-Z0-9_]+  ' | tr -d '/ ')
done
echo "aarch64-test: Highway targets exercised by the kernel tests: $(sort -u <<<"$ran" | tr '\n' ' ')"
echo "aarch64-test: $(( $(date +%s) - start )) s"
