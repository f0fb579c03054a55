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
void AddSamplingArgs(CLI::App* app, RunArgs* args);

}  // namespace tlr::cli
