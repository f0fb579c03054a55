#!/usr/bin/env bash
# Builds llama.cpp from source as a yardstick (not part of `make test`): the source is the git
# bundle npm's node-llama-cpp@3.22.1 ships (llama.cpp release v0.5.0 as that package pins it;
# this machine reaches npm but not GitHub), built Release for this CPU (GGML_NATIVE) into
# build/llamacpp/, with llama-bench, llama-quantize and llama-simple, plus TLR's cold-start
# harness tools/interop/llamacpp_coldstart.cc linked against its libllama.
# Prints the build directory on stdout. Idempotent: a finished build is reused.
# Usage: tools/interop/llamacpp_source.sh   (from the repository root)
set -euo pipefail
work=build/interop
src=build/llamacpp/src
out=build/llamacpp/build
if [ ! -f "$work/node_modules/node-llama-cpp/llama/gitRelease.bundle" ]; then
  mkdir -p "$work"
  (cd "$work" && npm install --silent --omit=optional --ignore-scripts node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1) >&2
fi
if [ ! -d "$src/.git" ]; then
  rm -rf "$src"
  git clone -q "$work/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src" >&2
fi
if [ ! -x "$out/bin/llama-bench" ] || [ ! -x "$out/bin/llama-quantize" ]; then
  cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF > "$out.cmake.log" 2>&1 ||
    { cat "$out.cmake.log" >&2; exit 1; }
  echo "llamacpp_source: building llama.cpp (several minutes on 2 cores; log in $out.build.log)" >&2
  cmake --build "$out" -j"$(nproc)" --target llama-simple llama-bench llama-quantize \
    > "$out.build.log" 2>&1 || { tail -n 30 "$out.build.log" >&2; exit 1; }
fi
harness=$out/bin/tlr-llamacpp-coldstart
if [ ! -x "$harness" ] || [ tools/interop/llamacpp_coldstart.cc -nt "$harness" ]; then
  g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" tools/interop/llamacpp_coldstart.cc \
    -o "$harness" -L"$out/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$(cd "$out/bin" && pwd)"
fi
cd "$out" && pwd
