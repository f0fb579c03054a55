// Shared command-line options for commands that run a model (apps layer): threads, context,
// sampling. Each command adds them to its CLI11 subcommand.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "system/llm_backend.h"
#include "system/remote_llm.h"

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

// Where the LLM runs for generate / eval / ui: in this process (--llm) or behind a server.
struct LlmArgs {
  std::string server, backend = "tlr", api_key, model, ca_file;
  double timeout_s = 10, retry_after_s = 1, sim_rtt_ms = 0, sim_jitter_ms = 0;
  int retries = 2;
  bool no_verify_tls = false;
};
void AddLlmServerArgs(CLI::App* app, LlmArgs* args);
// Connects to --server (prints the backend's warning, if any, to stderr).
Expected<std::unique_ptr<RemoteLlm>> ConnectLlmServer(const LlmArgs& args, const Tokenizer& vocab, uint64_t seed);

}  // namespace tlr::cli
