// Shared command-line options for commands that run a model (apps layer): threads, context,
// sampling. Each command adds them to its CLI11 subcommand.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "device/decode/decoder.h"
#include "device/llm/llm_backend.h"
#include "device/session/llm_factory.h"
#include "device/remote/remote_llm.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace tlr::cli {

struct RunArgs {
  int threads = 2;
  int64_t ctx = 4096;
  std::string kv_type = "f16";
  SamplerParams sampling;
};

// --threads, --ctx and --kv-type.
void AddThreadArgs(CLI::App* app, RunArgs* args);
// Threads only (commands without a context option).
void AddThreadsOnly(CLI::App* app, int* threads);
// --kv-type: how the KV caches of the models a command loads store keys and values.
void AddKvTypeArg(CLI::App* app, std::string* kv_type);
// Model::Load options for a --kv-type value (one AddKvTypeArg accepted).
Model::Options ModelOptions(const std::string& kv_type);

// A file of the bundled demo pair (slm.gguf, llm.gguf, router.gguf, test.jsonl, ...): from
// $TLR_DEMO_DIR if set, else models/demo found from the binary's location (build/bin/tlr in a
// build tree) or the source tree it was built from.
std::string DemoFile(const std::string& name);
void AddSamplingArgs(CLI::App* app, RunArgs* args);

// The routed pair's files and routing flags of generate and chat: --slm, --llm, --router,
// --mode, --threshold (-1: the router's recommended one). Empty files: the demo pair's.
struct PairArgs {
  std::string slm, llm, router, mode = "joint";
  float threshold = -1;
};
void AddPairArgs(CLI::App* app, PairArgs* args);

// --think / --no-think: passed to the chat template as enable_thinking (Qwen3's templates turn
// the model's <think> block on or off); neither: the template's own default. Only with --chat.
void AddThinkArgs(CLI::App* app, CLI::Option* chat_flag, std::optional<bool>* enable_thinking);

// Where the LLM runs for generate / eval / ui: in this process (--llm) or behind a server.
struct LlmArgs {
  std::string server, backend = "tlr", api_key, model, ca_file, llm_tokenizer, llm_prompt = "ids";
  // 2 s: a routed token is worth waiting for about as long as the SLM takes to write a sentence
  // (docs/performance.md#overload); router training's long scoring calls set more.
  double timeout_s = 2, retry_after_s = 1, sim_rtt_ms = 0, sim_jitter_ms = 0;
  int retries = 2, connections = 4;
  bool no_verify_tls = false;
  bool allow_unreachable = false;  // --server down at start: FALLBACK tokens instead of an error
};
// --llm-timeout defaults to args->timeout_s as set before the call.
void AddLlmServerArgs(CLI::App* app, LlmArgs* args);
// What the arguments describe, for LlmStack::Create (n_ctx: the in-process KV cache).
Expected<LlmSpec> MakeLlmSpec(const LlmArgs& args, const Model* model, int threads, int64_t n_ctx, uint64_t seed);
// The LLM the arguments describe: `model` in process (threads, n_ctx), or --server. Prints the
// backend's warning, if any, to stderr.
// "vocabulary bridge: 174 routed calls; LLM tokens re-encoded 6.1 per call (...)" (stderr lines).
std::string BridgeSummary(const VocabBridgeStats& s);
Expected<std::unique_ptr<LlmStack>> MakeLlm(const LlmArgs& args, const Model* model, int threads, int64_t n_ctx,
                                            const Tokenizer& vocab, uint64_t seed);

// An old spelling of an option, kept for one release: hidden from --help, same target, and a
// line on stderr naming the new one when used.
void AddDeprecatedOption(CLI::App* app, const std::string& old_name, std::string* target, const std::string& now);
void AddDeprecatedOption(CLI::App* app, const std::string& old_name, std::vector<std::string>* target,
                         const std::string& now);
void AddDeprecatedFlag(CLI::App* app, const std::string& old_name, bool* target, const std::string& now);
// An environment variable: `name`, else the old `deprecated` one (with a line naming the new).
std::string EnvWithFallback(const char* name, const char* deprecated);

// The keys a listening endpoint accepts (serve and ui alike): --accept-key (repeat for several),
// --accept-key-file (one per line; blank lines and '#' comments skipped), $TLR_ACCEPT_KEY.
struct AcceptKeyArgs {
  std::vector<std::string> keys;
  std::string file;
};
void AddAcceptKeyArgs(CLI::App* app, AcceptKeyArgs* a, const std::string& what);
// Every key given; a file that cannot be read or holds none is an error.
Expected<std::vector<std::string>> ResolveAcceptKeys(const AcceptKeyArgs& a, const char* deprecated_env);

// The asynchronous pipeline and the simulated device pace (generate, eval, ui).
struct PipelineArgs {
  std::string pipeline = "on";
  PipelineOptions options;
  std::string llm_budget = "1.25";  // a number, or "auto"
  double sim_slm_ms = 0;
  // Into decode options; fails on inconsistent values.
  Status Apply(DecodeOptions* d) const;
};
void AddPipelineArgs(CLI::App* app, PipelineArgs* args);

}  // namespace tlr::cli
