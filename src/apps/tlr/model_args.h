// Shared command-line options for commands that run a model (apps layer): threads, context,
// sampling. Each command adds them to its CLI11 subcommand.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "model/sampler.h"

namespace tlr::cli {

struct RunArgs {
  int threads = 2;
  int64_t ctx = 4096;
  SamplerParams sampling;
};

void AddThreadArgs(CLI::App* app, RunArgs* args);
// Threads only (commands without a context option).
void AddThreadsOnly(CLI::App* app, int* threads);

// A file of the bundled demo pair (slm.gguf, llm.gguf, router.gguf, test.jsonl, ...): from
// $TLR_DEMO_DIR if set, else models/demo found from the binary's location (build/bin/tlr in a
// build tree) or the source tree it was built from.
std::string DemoFile(const std::string& name);
void AddSamplingArgs(CLI::App* app, RunArgs* args);

}  // namespace tlr::cli
