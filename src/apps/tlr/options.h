// The options layer of the `tlr` commands (apps layer), in the spirit of llama.cpp's
// common_params / common_arg: one parameters struct (Params), each shared option declared once
// in options.cc with the commands that take it (its environment variable, old spelling and an
// example value on the declaration), one resolve step (demo defaults, exclusive options,
// validation) and one load step (LoadPair: the SLM, its router and where the LLM runs).
// A command's file declares only its own options (Example() gives each one an example value)
// and writes its own output.
//
// Every command also takes two hidden options for the options test (options_test.sh):
// `--list-options` prints each option with its example as JSON lines and exits; `--print-params`
// resolves the command line and prints the parameters the command would run on (shared and
// own) as JSON instead of running. The test walks every command's --help and checks that each
// listed option changes what --print-params prints.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "device/decode/decoder.h"
#include "device/session/device_session.h"
#include "device/session/llm_factory.h"
#include "model/sampler.h"
#include "routing/router.h"

namespace tlr::cli {

// The commands, as bits: an option says which commands take it.
enum CommandId : uint32_t {
  kCmdInfo = 1u << 0,
  kCmdTokenize = 1u << 1,
  kCmdRun = 1u << 2,
  kCmdMakeRandom = 1u << 3,
  kCmdConvert = 1u << 4,
  kCmdBench = 1u << 5,
  kCmdGenerate = 1u << 6,
  kCmdChat = 1u << 7,
  kCmdEval = 1u << 8,
  kCmdServe = 1u << 9,
  kCmdLoadtest = 1u << 10,
  kCmdUi = 1u << 11,
  kCmdRouterTrain = 1u << 12,
  kCmdRouterInfo = 1u << 13,
  kCmdRouterCalibrate = 1u << 14,
  kCmdRouterImport = 1u << 15,
};

// The LLM behind a server (--server and its group).
struct ServerParams {
  std::string url, backend = "tlr", key, model, ca_file, llm_tokenizer, llm_prompt = "ids";
  // 2 s: a routed token is worth waiting for about as long as the SLM takes to write a sentence
  // (docs/performance.md#overload); router training's long scoring calls set more.
  double timeout_s = 2, retry_after_s = 1, sim_rtt_ms = 0, sim_jitter_ms = 0;
  int retries = 2, connections = 4;
  bool no_verify_tls = false;
  bool allow_unreachable = false;  // down at start: FALLBACK tokens instead of an error
};

// Every shared option's value. A command sets its own defaults in it before its options are
// added (they show in --help), e.g. max_tokens or port.
struct Params {
  uint32_t command = 0;  // the CommandId these parameters are for
  // Models and data; empty: the bundled demo pair's (Resolve fills in what the command uses).
  std::string slm, llm, router, model, data;
  std::string mode = "joint";
  float threshold = -1;  // -1: the router's recommended one
  std::string policy = "threshold";  // route_policy.h
  double price_ratio = 4, cost_budget = 0;
  int max_tokens = 128, span = 1, limit = 0;
  bool chat = false, no_color = false;
  std::optional<bool> think;  // --think / --no-think: the chat template's enable_thinking
  std::string system;
  // Threads and memory.
  int threads = 1;  // all cores unless given
  int64_t ctx = 4096;
  std::string kv_type = "f16";
  SamplerParams sampling;
  ServerParams server;
  // The pipeline (routed tokens on the network).
  std::string pipeline = "on", llm_budget = "1.25";
  PipelineOptions pipeline_options;
  double sim_slm_ms = 0;
  // Listening (serve, ui).
  std::string host = "127.0.0.1", kv_budget = "1G";
  int port = 8080;
  bool public_bind = false;
  std::vector<std::string> accept_keys;
  std::string accept_key_file;
  // Hidden: print the resolved parameters instead of running.
  bool print_params = false;

  // Set by Resolve.
  DecodeOptions decode;              // mode, threshold (-1 until a router is known), span, max tokens, sampling, pipeline
  uint64_t kv_budget_bytes = 0;
  bool remote() const { return !server.url.empty(); }
};

nlohmann::json ToJson(const Params& p);

// A new command: its subcommand of `parent`, the struct of its own options and its parameters.
// (`auto [app, o, p] = NewCommand<Own>(...)`; lambdas take the bindings by init-capture, `[o = o]`:
// clang before 16 cannot capture a structured binding itself.)
template <typename Own>
struct NewCommandParts {
  CLI::App* app;
  std::shared_ptr<Own> own;
  std::shared_ptr<Params> params;
};
template <typename Own>
NewCommandParts<Own> NewCommand(CLI::App* parent, const std::string& name, const std::string& about) {
  return {parent->add_subcommand(name, about), std::make_shared<Own>(), std::make_shared<Params>()};
}

// Adds every shared option `command` takes to `app`, bound to `p` (whose current values are the
// defaults shown), plus the hidden --list-options and --print-params. `example_args`: the
// arguments the command needs to parse at all (its required options and positionals), for
// --list-options; "@demo/NAME" stands for a file of the demo pair.
void AddOptions(CLI::App* app, CommandId command, Params* p, std::string example_args = "");

// An example value of a command's own option, for --list-options and the options test: `value`
// (empty for a flag) given with `with` (other arguments it needs, present in both runs).
CLI::Option* Example(CLI::Option* opt, std::string value, std::string with = "");

// The resolve step: environment variables under old names, the demo files the command uses
// where none were given, exclusive options, and the derived values (decode, kv_budget_bytes,
// accept_keys read from their file).
Status Resolve(CLI::App* app, Params* p);

// A file of the bundled demo pair (slm.gguf, llm.gguf, router.gguf, test.jsonl, ...): from
// $TLR_DEMO_DIR if set, else models/demo found from the binary's location (build/bin/tlr in a
// build tree) or the source tree it was built from.
std::string DemoFile(const std::string& name);
// Whether a --router value names a built-in router (maxprob, entropy, random), not a file.
bool IsBuiltinRouterName(const std::string& router);

// Model::Load options for the parameters (KV type, weight cache from $TLR_WEIGHT_CACHE,
// progress lines on stderr).
Model::Options ModelOptions(const std::string& kv_type);

// The load step: what a routed command runs on.
struct Pair {
  std::unique_ptr<Model> slm;      // null where not needed
  std::unique_ptr<Router> router;  // null where not needed
  LlmTarget llm;                   // in process (llm.model) or the server (llm.config.remote)
  DecodeOptions decode;            // Params::decode with the router's threshold where none was given
};
struct PairNeeds {
  bool slm = true, router = true, llm = true;  // llm: an in-process LLM unless --server
  bool router_file = false;                    // a router GGUF only (no built-in kind)
};
Expected<Pair> LoadPair(const Params& p, PairNeeds needs);
// The pair's needs for a decode mode: small_only loads no LLM, large_only no router.
PairNeeds NeedsForMode(DecodeMode mode);
// The chain of backends to the pair's LLM (n_ctx: the in-process LLM's KV cache); prints the
// server's warning, if any, on stderr.
Expected<std::unique_ptr<LlmStack>> MakeLlmStack(const Pair& pair, int64_t n_ctx, const Tokenizer& vocab);

// "vocabulary bridge: 174 routed calls; per call 6.1 LLM tokens re-encoded, ..." (stderr lines).
std::string BridgeSummary(const VocabBridgeStats& s);

}  // namespace tlr::cli
