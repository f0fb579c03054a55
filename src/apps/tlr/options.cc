// The options layer (apps layer). See options.h. The table in SharedOptions() is the one place a
// shared option is declared: names, the commands that take it, help, checks, environment
// variable, old spellings and an example value for the options test.
#include "apps/tlr/options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <thread>
#include <type_traits>

#include "apps/tlr/commands.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace {

constexpr uint32_t kPairCmds = kCmdGenerate | kCmdChat | kCmdEval | kCmdUi | kCmdRouterCalibrate;
constexpr uint32_t kDecodeCmds = kCmdGenerate | kCmdChat | kCmdEval | kCmdUi;
constexpr uint32_t kSamplingCmds = kCmdRun | kPairCmds;
constexpr uint32_t kServerCmds = kPairCmds | kCmdRouterTrain;
constexpr uint32_t kCtxCmds = kCmdRun | kPairCmds | kCmdServe;
constexpr uint32_t kKvCmds = kCtxCmds | kCmdBench | kCmdRouterTrain;
constexpr uint32_t kThreadCmds = kKvCmds;
constexpr uint32_t kListenCmds = kCmdServe | kCmdUi;

struct OptionDef {
  std::string names;
  uint32_t commands = 0;
  std::string help;
  std::vector<std::pair<uint32_t, std::string>> help_for;  // commands with their own help text
  std::string group;
  std::vector<CLI::Validator> checks;
  uint32_t required = 0;       // commands that require it
  bool show_default = true;
  std::string env;             // read when the option is not given
  std::vector<std::pair<uint32_t, std::string>> old_env;    // older variable names, per command
  std::vector<std::pair<uint32_t, std::string>> old_names;  // older spellings, per command
  std::string example, example_with;
  uint32_t needs_chat = 0;     // commands where it needs --chat
  uint32_t needs_server = 0;   // commands where it needs --server (it does nothing without)
  uint32_t example_server = 0; // commands where its example needs --server, though the option does not
  std::function<CLI::Option*(CLI::App*, Params*, const std::string& names, const std::string& help)> add;

  OptionDef& For(uint32_t cmds, std::string text) { help_for.emplace_back(cmds, std::move(text)); return *this; }
  OptionDef& Check(CLI::Validator v) { checks.push_back(std::move(v)); return *this; }
  OptionDef& Required(uint32_t cmds) { required |= cmds; return *this; }
  OptionDef& NoDefault() { show_default = false; return *this; }
  OptionDef& Env(std::string name) { env = std::move(name); return *this; }
  OptionDef& OldEnv(uint32_t cmds, std::string name) { old_env.emplace_back(cmds, std::move(name)); return *this; }
  OptionDef& Old(uint32_t cmds, std::string name) { old_names.emplace_back(cmds, std::move(name)); return *this; }
  OptionDef& Ex(std::string value, std::string with = "") {
    example = std::move(value);
    example_with = std::move(with);
    return *this;
  }
  OptionDef& NeedsChat(uint32_t cmds) { needs_chat |= cmds; return *this; }
  OptionDef& NeedsServer(uint32_t cmds) { needs_server |= cmds; return *this; }
  OptionDef& ExampleWithServer(uint32_t cmds) { example_server |= cmds; return *this; }
};

template <typename T>
CLI::Option* AddTyped(CLI::App* app, const std::string& names, T* target, const std::string& help) {
  if constexpr (std::is_same_v<T, bool>) {
    return app->add_flag(names, *target, help);
  } else {
    return app->add_option(names, *target, help)->capture_default_str();
  }
}

// An option bound to the field `get` returns.
template <typename Get>
OptionDef Opt(uint32_t cmds, std::string names, Get get, std::string help) {
  OptionDef d;
  d.names = std::move(names);
  d.commands = cmds;
  d.help = std::move(help);
  d.add = [get](CLI::App* app, Params* p, const std::string& n, const std::string& h) {
    return AddTyped(app, n, &get(*p), h);
  };
  return d;
}

#define TLR_FIELD(f) [](Params& p) -> auto& { return p.f; }

std::vector<OptionDef> MakeSharedOptions() {
  std::vector<OptionDef> t;
  auto add = [&](OptionDef d, const std::string& group) -> OptionDef& {
    d.group = group;
    t.push_back(std::move(d));
    return t.back();
  };
  const std::string models = "Models and data";
  add(Opt(kPairCmds | kCmdRouterTrain | kCmdRouterImport, "--slm", TLR_FIELD(slm),
          "Small model GGUF (default: the bundled demo SLM, " + DemoFile("slm.gguf") + ")"), models)
      .For(kCmdRouterTrain, "Small model GGUF the router is for")
      .For(kCmdRouterImport, "The SLM the router reads (its hidden size and fingerprint go into the file)")
      .Required(kCmdRouterTrain | kCmdRouterImport).Ex("@demo/llm.gguf");
  add(Opt(kPairCmds | kCmdRouterTrain, "--llm", TLR_FIELD(llm),
          "Large model GGUF, run in this process (default: the bundled demo LLM); or --server"), models)
      .For(kCmdRouterTrain, "Large model GGUF, run in this process (another vocabulary is bridged: labels come from "
                            "the LLM's own tokens); or --server")
      .Ex("@demo/slm.gguf");
  add(Opt(kCmdRun | kCmdBench | kCmdServe, "-m,--model", TLR_FIELD(model), "GGUF model"), models)
      .For(kCmdRun, "GGUF model (qwen2, llama, qwen3 or gemma3; default: the bundled demo SLM)")
      .For(kCmdServe, "LLM GGUF (default: the bundled demo LLM)")
      .Required(kCmdBench).Ex("m.gguf");
  add(Opt(kPairCmds, "--router", TLR_FIELD(router),
          "Router GGUF from `tlr router train`, or a built-in kind: maxprob, entropy, random (default: the bundled "
          "demo router)"), models)
      .For(kCmdUi, "Router GGUF from `tlr router train`, or a built-in kind: maxprob, entropy, random (default: the "
                   "bundled demo router); the built-in kinds are always offered too")
      .For(kCmdRouterCalibrate, "Router GGUF to calibrate (default: the bundled demo router)")
      .Ex("maxprob");
  add(Opt(kCmdEval | kCmdUi | kCmdRouterCalibrate | kCmdRouterTrain, "--data", TLR_FIELD(data),
          "Questions, CommonsenseQA JSONL, flattened or nested schema (default: the bundled test split)"), models)
      .For(kCmdUi, "Question set (JSONL) whose first questions the page offers as examples (default: the bundled "
                   "test split)")
      .For(kCmdRouterCalibrate, "Questions, CommonsenseQA JSONL (default: the bundled dev split, not the test split "
                                "tlr eval reports on); use questions like the ones the router will see")
      .For(kCmdRouterTrain, "Training rows: CommonsenseQA JSONL (questions) or chat JSONL ({\"messages\": [...]}); "
                            "reference answers come from --reference or the LLM")
      .Required(kCmdRouterTrain).Ex("q.jsonl");
  add(Opt(kCmdEval | kCmdRouterCalibrate | kCmdRouterTrain, "--limit", TLR_FIELD(limit),
          "Use only the first N questions (0 = all)"), models)
      .Check(CLI::Range(0, 1 << 30)).Ex("7");

  const std::string gen = "Generation";
  add(Opt(kCmdGenerate | kCmdChat, "--mode", TLR_FIELD(mode),
          "joint (route), small_only (SLM alone), large_only (LLM alone)"), gen)
      .Check(CLI::IsMember({"joint", "small_only", "large_only"})).Ex("small_only");
  add(Opt(kCmdGenerate | kCmdChat | kCmdUi, "--threshold", TLR_FIELD(threshold),
          "Route when the router's confidence is below this (default: the router's recommended one)"), gen)
      .For(kCmdUi, "The --router's threshold on the page and for API requests that give none (default: its "
                   "recommended one)")
      .Check(CLI::Range(0.0f, 1.0f)).NoDefault().Ex("0.9");
  add(Opt(kCmdGenerate | kCmdChat | kCmdUi, "--policy", TLR_FIELD(policy),
          "threshold: route when the confidence is below --threshold; cost: the bar falls as a call's price "
          "rises, so a cold first call (the whole prompt to read) needs far less confidence than a warm one "
          "(thresholds 0.95-0.999; docs/routing.md)"), gen)
      .For(kCmdUi, "The routing policy of the page and of API requests that do not name one (threshold, cost)")
      .Check(CLI::IsMember({"threshold", "cost"})).Ex("cost");
  add(Opt(kDecodeCmds, "--price-ratio", TLR_FIELD(price_ratio),
          "The price model: an LLM output token costs this many input tokens (API price lists: 3-5); prices "
          "the cost policy's calls, --cost-budget and the cost columns"), gen)
      .Check(CLI::Range(0.0, 1000.0)).Ex("3");
  add(Opt(kDecodeCmds, "--cost-budget", TLR_FIELD(cost_budget),
          "Most the LLM's calls may cost per answer, in input tokens under the price model (a call that would "
          "pass it is not made; 0: no limit)"), gen)
      .For(kCmdEval, "Most the LLM's calls may cost per question in the joint rows, in input tokens under the "
                     "price model (0: no limit)")
      .Check(CLI::Range(0.0, 1e12)).Ex("60");
  add(Opt(kCmdRun | kPairCmds, "-n,--max-tokens", TLR_FIELD(max_tokens), "Most tokens to generate"), gen)
      .For(kCmdChat, "Most tokens per reply")
      .For(kCmdEval | kCmdRouterCalibrate, "Most tokens per answer")
      .For(kCmdUi, "The page's initial max tokens")
      .Check(CLI::Range(0, kMaxGenerateTokens)).Ex("9");
  add(Opt(kCmdGenerate | kCmdEval, "--span", TLR_FIELD(span), "Tokens the LLM produces per routed call"), gen)
      .Check(CLI::Range(1, 64)).Ex("2");
  add(Opt(kCmdRun | kCmdGenerate | kCmdEval | kCmdRouterCalibrate, "--chat", TLR_FIELD(chat),
          "Wrap the prompt as a user message in the model's chat template (instruct models)"), gen)
      .For(kCmdEval, "Instruct models: ask in the SLM's chat template (question, choices, \"Answer with the letter "
                     "of the correct choice, then explain briefly.\"); default: the plain \"Question: ...\\nA. ...\" "
                     "prompt the demo pair was trained on")
      .For(kCmdRouterCalibrate, "Ask through the SLM's chat template (instruct models), as tlr eval --chat")
      .Ex("");
  {
    OptionDef think;
    think.names = "--think";
    think.commands = kCmdRun | kCmdGenerate | kCmdChat | kCmdEval;
    think.help = "enable_thinking=true for the chat template (Qwen3: the model thinks in a <think> block first)";
    think.add = [](CLI::App* app, Params* p, const std::string& n, const std::string& h) {
      return app->add_flag_callback(n, [p] { p->think = true; }, h);
    };
    // (generate: --chat or --messages, checked by the command: a conversation is always templated)
    think.NeedsChat(kCmdRun | kCmdEval).Ex("");
    OptionDef no_think = think;  // the same commands, example and --chat rule
    add(think, gen);
    no_think.names = "--no-think";
    no_think.help = "enable_thinking=false (Qwen3's template closes an empty <think> block so the model answers "
                    "directly)";
    no_think.add = [](CLI::App* app, Params* p, const std::string& n, const std::string& h) {
      return app->add_flag_callback(n, [p] { p->think = false; }, h);
    };
    add(no_think, gen);
  }
  add(Opt(kCmdRun | kCmdChat, "--system", TLR_FIELD(system), "A system message to start the conversation with"), gen)
      .NeedsChat(kCmdRun).Ex("be brief");
  add(Opt(kCmdGenerate | kCmdChat, "--no-color", TLR_FIELD(no_color),
          "Plain text even on a terminal (LLM tokens are red otherwise)"), gen).Ex("");

  const std::string mem = "Threads and memory";
  add(Opt(kThreadCmds, "-t,--threads", TLR_FIELD(threads), "Worker threads (default: all cores)"), mem)
      .Check(CLI::Range(1, 256)).NoDefault().Ex("3");
  add(Opt(kCtxCmds, "-c,--ctx", TLR_FIELD(ctx),
          "Context size in tokens: the most a prompt and its answer may hold (the KV caches are sized within it)"), mem)
      .For(kCmdServe, "Tokens one session can hold (its KV cache size)")
      .Check(CLI::Range(int64_t{1}, int64_t{1} << 24)).Ex("999");
  add(Opt(kKvCmds, "--kv-type", TLR_FIELD(kv_type),
          "KV cache storage: f16 (half of f32's memory traffic at long contexts), f32 (exact), q8_0 (a quarter of "
          "f32's; needs a head dimension that is a multiple of 32)"), mem)
      .Check(CLI::IsMember({"f32", "f16", "q8_0"})).Ex("f32");

  const std::string smp = "Sampling";
  add(Opt(kSamplingCmds, "--temp", TLR_FIELD(sampling.temperature), "Temperature (0 = greedy)"), smp).Ex("0.7");
  add(Opt(kSamplingCmds, "--top-k", TLR_FIELD(sampling.top_k), "Top-k (0 = off)"), smp)
      .Check(CLI::Range(0, std::numeric_limits<int>::max())).Ex("5");
  add(Opt(kSamplingCmds, "--top-p", TLR_FIELD(sampling.top_p), "Top-p / nucleus (1 = off)"), smp).Ex("0.9");
  add(Opt(kSamplingCmds, "--min-p", TLR_FIELD(sampling.min_p), "Min-p (0 = off)"), smp).Ex("0.05");
  add(Opt(kSamplingCmds, "--repeat-penalty", TLR_FIELD(sampling.repeat_penalty), "Repetition penalty (1 = off)"), smp)
      .Ex("1.1");
  add(Opt(kSamplingCmds, "--repeat-last-n", TLR_FIELD(sampling.repeat_last_n), "Tokens the penalty looks back"), smp)
      .Ex("32");
  add(Opt(kSamplingCmds, "--seed", TLR_FIELD(sampling.seed), "Sampling seed (and the random router's)"), smp)
      .For(kCmdRun, "Sampling seed").Check(WholeNumberU64()).Ex("7");

  const std::string srv = "LLM server (--server)";
  add(Opt(kServerCmds | kCmdLoadtest, "--server", TLR_FIELD(server.url),
          "Use the LLM behind this server (http[s]://host[:port][/path]) instead of --llm; it must be reachable at "
          "start (see --allow-unreachable)"), srv)
      .For(kCmdLoadtest, "The server (http[s]://host[:port][/path])")
      .For(kCmdRouterTrain | kCmdRouterCalibrate,
           "Use the LLM behind this server (http[s]://host[:port][/path]) instead of --llm; it must be reachable at "
           "start and answer every call (training and calibration measure its answers)")
      .Required(kCmdLoadtest).Ex("http://[::1]:9");
  // Not for router training or calibration: FALLBACK tokens would be labels and curve points.
  add(Opt(kServerCmds & ~(kCmdRouterTrain | kCmdRouterCalibrate), "--allow-unreachable", TLR_FIELD(server.allow_unreachable),
          "--server: start even if the server cannot be reached; routed tokens come from the SLM (FALLBACK) until "
          "it can"), srv).Ex("").NeedsServer(kServerCmds);
  add(Opt(kServerCmds | kCmdLoadtest, "--backend", TLR_FIELD(server.backend),
          "Server protocol: tlr (`tlr serve` sessions, delta sync) or openai (any OpenAI-compatible engine: vLLM, "
          "SGLang, llama.cpp server)"), srv)
      .For(kCmdLoadtest, "tlr: the native session protocol (each call sends only new tokens); openai: /v1/completions "
                         "with the whole context as token ids (what devices on the openai backend and OpenAI clients "
                         "send)")
      .Check(CLI::IsMember({"tlr", "openai"})).Ex("openai").NeedsServer(kServerCmds);
  add(Opt(kServerCmds | kCmdLoadtest, "--server-key", TLR_FIELD(server.key),
          "The key this device sends to the --server (also $TLR_SERVER_KEY)"), srv)
      .Env("TLR_SERVER_KEY").OldEnv(kServerCmds | kCmdLoadtest, "TLR_API_KEY")
      .Old(kServerCmds | kCmdLoadtest, "--api-key").NoDefault().Ex("k1").ExampleWithServer(kServerCmds);
  add(Opt(kServerCmds, "--server-model", TLR_FIELD(server.model),
          "openai backend: model name (default: the server's first)"), srv).Ex("m", "--backend openai")
      .NeedsServer(kServerCmds);
  add(Opt(kServerCmds | kCmdLoadtest, "--llm-timeout", TLR_FIELD(server.timeout_s),
          "Deadline of one LLM call, in seconds (connect, send and receive, retries included); past it the SLM's own "
          "token is used (FALLBACK). The server is told it and refuses at once (429) what it cannot answer in time; "
          "the device then answers with the SLM until the server's Retry-After"), srv)
      .For(kCmdLoadtest, "Seconds a device waits for one call (a device's --llm-timeout; the server refuses at once "
                         "what it cannot answer in that time)")
      .For(kCmdRouterTrain | kCmdRouterCalibrate,
           "Deadline of one LLM call, in seconds (connect, send and receive, retries included); training and "
           "calibration need every answer, so a run whose calls miss it ends with an error (router train's "
           "--work-dir keeps the answers that came)")
      .Old(kCmdLoadtest, "--timeout").Check(CLI::Range(0.001, 3600.0)).Ex("3.5").NeedsServer(kServerCmds);
  add(Opt(kServerCmds, "--llm-retries", TLR_FIELD(server.retries), "Further attempts after a failed server call"), srv)
      .Check(CLI::Range(0, 100)).Ex("5").NeedsServer(kServerCmds);
  // (Not for training or calibration: a failed call ends those.)
  add(Opt(kServerCmds & ~(kCmdRouterTrain | kCmdRouterCalibrate), "--llm-retry-after", TLR_FIELD(server.retry_after_s),
          "After the server failed: seconds of SLM-only answering before trying it again"), srv)
      .Check(CLI::Range(0.0, 3600.0)).Ex("4").NeedsServer(kServerCmds);
  add(Opt(kServerCmds, "--ca-file", TLR_FIELD(server.ca_file), "https: CA certificates to verify the server with"), srv)
      .Check(CLI::ExistingFile).Ex("@demo/test.jsonl", "--server https://[::1]:9").NeedsServer(kServerCmds);
  add(Opt(kServerCmds, "--no-verify-tls", TLR_FIELD(server.no_verify_tls),
          "https: do not verify the server's certificate (testing only)"), srv)
      .Ex("", "--server https://[::1]:9").NeedsServer(kServerCmds);
  add(Opt(kServerCmds | kCmdLoadtest, "--sim-rtt", TLR_FIELD(server.sim_rtt_ms),
          "Simulated network round trip per LLM call, in ms (the paper assumed 170); it adds to each call's time but "
          "not to what --llm-timeout counts (the deadline is the server's and the real network's)"), srv)
      .For(kCmdLoadtest, "Simulated network round trip per HTTP request, in ms (in the latency)")
      .Check(CLI::Range(0.0, 600000.0)).Ex("170");
  add(Opt(kServerCmds, "--sim-jitter", TLR_FIELD(server.sim_jitter_ms), "Uniform +- jitter on --sim-rtt, in ms"), srv)
      .Check(CLI::Range(0.0, 600000.0)).Ex("10");
  add(Opt(kServerCmds, "--llm-tokenizer", TLR_FIELD(server.llm_tokenizer),
          "--server: the LLM's tokenizer when its vocabulary differs from the SLM's: a GGUF (vocabulary-only or the "
          "model), a tokenizer.json, or 'server' (`tlr serve` sends its own). Calls carry the context in the LLM's "
          "tokens and its replies become SLM tokens (docs/guide.md#pairs-with-different-vocabularies)"), srv)
      .Check(CLI::ExistingFile | CLI::IsMember({"server"})).Ex("server").NeedsServer(kServerCmds);
  add(Opt(kServerCmds, "--llm-prompt", TLR_FIELD(server.llm_prompt),
          "--backend openai: how contexts are sent: ids (token ids; vLLM, SGLang, llama.cpp server, tlr serve) or "
          "text (engines that take only text prompts; the engine tokenizes again, and an LLM of another vocabulary "
          "has its held-back word checked and trimmed instead of constrained)"), srv)
      .Check(CLI::IsMember({"ids", "text"})).Ex("text", "--backend openai").NeedsServer(kServerCmds);
  add(Opt(kServerCmds, "--llm-connections", TLR_FIELD(server.connections),
          "--server: LLM calls in flight at once (one keep-alive connection each)"), srv)
      .Check(CLI::Range(1, 64)).Ex("2").NeedsServer(kServerCmds);

  const std::string pipe = "Pipeline (routed tokens on the network)";
  add(Opt(kDecodeCmds, "--pipeline", TLR_FIELD(pipeline),
          "on: keep decoding while routed tokens are on the network (speculate, pipeline calls, use LLM lookahead); "
          "off: block on every routed token. Outputs are identical either way"), pipe)
      .Check(CLI::IsMember({"on", "off"})).Ex("off");
  add(Opt(kDecodeCmds, "--spec-depth", TLR_FIELD(pipeline_options.depth),
          "Tokens the SLM may run ahead of the oldest unanswered routed token"), pipe)
      .Check(CLI::Range(0, 4096)).Ex("5");
  add(Opt(kDecodeCmds, "--spec-branches", TLR_FIELD(pipeline_options.branches),
          "SLM candidates speculated on at once at a routed token (KV fork, one batched SLM pass)"), pipe)
      .Check(CLI::Range(1, 16)).Ex("2");
  add(Opt(kDecodeCmds, "--lookahead", TLR_FIELD(pipeline_options.lookahead),
          "Most tokens of the LLM's own continuation asked for with a routed call (the ask grows while such drafts "
          "stand and falls to 0 when they do not; within --llm-budget); a later routed token whose context matches "
          "takes its token with no call"), pipe)
      .Check(CLI::Range(0, 256)).Ex("3");
  add(Opt(kDecodeCmds, "--llm-budget", TLR_FIELD(llm_budget),
          "LLM tokens the pipeline may cost per routed token (answers, lookahead, speculative calls including "
          "cancelled ones; the units an LLM is paid in); 'auto': no limit, as fast as possible"), pipe)
      .Ex("auto");
  add(Opt(kDecodeCmds, "--sim-slm-ms", TLR_FIELD(sim_slm_ms),
          "SIMULATED device pace: every SLM pass takes at least this many ms (e.g. 20 for a 0.5B-class SLM on a "
          "phone); outputs are unchanged"), pipe)
      .Check(CLI::Range(0.0, 60000.0)).Ex("20");

  const std::string listen = "Listening";
  add(Opt(kListenCmds, "--host", TLR_FIELD(host),
          "Address to listen on (loopback only, unless --public, or --no-page with --accept-key)"), listen)
      .For(kCmdServe, "Address to listen on (non-loopback needs --accept-key or --public)").Ex("::1");
  add(Opt(kListenCmds, "--port", TLR_FIELD(port), "Port (0: any free port; the chosen one is printed)"), listen)
      .Check(CLI::Range(0, 65535)).Ex("0");
  add(Opt(kListenCmds, "--public", TLR_FIELD(public_bind),
          "Allow a non-loopback --host without --accept-key: anyone who reaches the port can use the LLM"), listen)
      .For(kCmdUi, "Allow a non-loopback --host. The page has no login: whoever reaches the port can run generations "
                   "on this machine and use your LLM server (and its --server-key)")
      .Old(kCmdServe, "--insecure").Ex("");
  add(Opt(kListenCmds, "--accept-key", TLR_FIELD(accept_keys),
          "Require 'Authorization: Bearer KEY' on every endpoint but /health (repeat for several keys; also "
          "$TLR_ACCEPT_KEY)"), listen)
      .For(kCmdUi, "Require 'Authorization: Bearer KEY' on the OpenAI API (repeat for several keys; also "
                   "$TLR_ACCEPT_KEY); with --no-page it guards everything, and a non-loopback --host is allowed "
                   "without --public (--server-key is the key this device sends to the LLM server)")
      .Env("TLR_ACCEPT_KEY").OldEnv(kCmdServe, "TLR_API_KEY").OldEnv(kCmdUi, "TLR_CLIENT_KEY")
      .Old(kCmdServe, "--api-key").Old(kCmdUi, "--client-key").NoDefault().Ex("k2");
  add(Opt(kListenCmds, "--accept-key-file", TLR_FIELD(accept_key_file),
          "File with keys to accept, one per line (blank lines and '#' comments skipped)"), listen)
      .Old(kCmdServe, "--api-key-file").Old(kCmdUi, "--client-key-file").Ex("@demo/README.md");
  add(Opt(kListenCmds, "--kv-budget", TLR_FIELD(kv_budget),
          "KV memory the kept SLM contexts may hold (sizes: K, M, G)"), listen)
      .For(kCmdServe, "KV cache memory for all sessions (e.g. 512M, 4G); least recently used idle sessions are "
                      "evicted past it")
      .Ex("256M");
  return t;
}

#undef TLR_FIELD

const std::vector<OptionDef>& SharedOptions() {
  static const std::vector<OptionDef> t = MakeSharedOptions();
  return t;
}

// The examples of a command's options (shared and own), keyed by option.
struct Examples {
  std::map<const CLI::Option*, std::pair<std::string, std::string>> by_option;
  std::map<const CLI::App*, std::string> args;
};
Examples& ExampleTable() {
  static Examples e;
  return e;
}

void SayDeprecated(const std::string& old_name, const std::string& now) {
  std::fprintf(stderr, "tlr: %s is deprecated: use %s (the old spelling goes in the next release)\n",
               old_name.c_str(), now.c_str());
}

std::string LongName(const std::string& names) {
  const size_t at = names.rfind("--");
  return at == std::string::npos ? names : names.substr(at);
}

std::string HelpFor(const OptionDef& d, CommandId cmd) {
  for (const auto& [cmds, text] : d.help_for) {
    if (cmds & cmd) return text;
  }
  return d.help;
}

void ListOptions(CLI::App* app) {
  const auto& table = ExampleTable();
  nlohmann::json head = {{"args", table.args.count(app) ? table.args.at(app) : ""}};
  std::printf("%s\n", head.dump().c_str());
  for (const CLI::Option* o : app->get_options()) {
    if (o->get_group().empty() || o->get_name() == "--help") continue;  // hidden or help
    auto it = table.by_option.find(o);
    nlohmann::json j = {{"name", o->get_name()}, {"flag", o->get_type_name().empty()}};
    if (it != table.by_option.end()) {
      j["example"] = it->second.first;
      j["with"] = it->second.second;
    }
    std::printf("%s\n", j.dump().c_str());
  }
}

}  // namespace

CLI::Option* Example(CLI::Option* opt, std::string value, std::string with) {
  ExampleTable().by_option[opt] = {std::move(value), std::move(with)};
  return opt;
}

void AddOptions(CLI::App* app, CommandId command, Params* p, std::string example_args) {
  p->command = command;
  ExampleTable().args[app] = std::move(example_args);
  if (command & kThreadCmds) p->threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::pair<CLI::Option*, const OptionDef*>> added;
  for (const OptionDef& d : SharedOptions()) {
    if (!(d.commands & command)) continue;
    CLI::Option* o = d.add(app, p, d.names, HelpFor(d, command));
    o->group(d.group);
    for (const CLI::Validator& v : d.checks) o->check(v);
    if (!d.show_default) o->default_str("");
    if (d.required & command) o->required();
    if (!d.env.empty()) o->envname(d.env);
    Example(o, d.example, d.example_with);
    for (const auto& [cmds, old] : d.old_names) {
      if (!(cmds & command)) continue;
      const std::string now = LongName(d.names);
      d.add(app, p, old, "")->group("")->each([old = old, now](const std::string&) { SayDeprecated(old, now); });
    }
    added.emplace_back(o, &d);
  }
  // --think and --no-think exclude each other and need --chat where it is an option.
  CLI::Option* chat = app->get_option_no_throw("--chat");
  CLI::Option* think = app->get_option_no_throw("--think");
  CLI::Option* no_think = app->get_option_no_throw("--no-think");
  if (think && no_think) {
    think->excludes(no_think);
    no_think->excludes(think);
  }
  // The LLM server's options need --server where it is an option (in process they do nothing).
  CLI::Option* server = app->get_option_no_throw("--server");
  for (auto& [o, d] : added) {
    if ((d->needs_chat & command) && chat) {
      o->needs(chat);
      Example(o, d->example, "--chat");
    }
    if ((d->example_server & command) && server) Example(o, d->example, "--server http://[::1]:9");
    if ((d->needs_server & command) && server && !(d->required & command)) {
      o->needs(server);
      Example(o, d->example,
              d->example_with.find("--server ") != std::string::npos ? d->example_with
              : "--server http://[::1]:9" + (d->example_with.empty() ? "" : " " + d->example_with));
    }
  }
  app->add_flag("--print-params", p->print_params)->group("");
  app->add_flag_callback("--list-options", [app] {
       ListOptions(app);
       throw CLI::Success();
     })->group("")->trigger_on_parse();
}

Status Resolve(CLI::App* app, Params* p) {
  const uint32_t cmd = p->command;
  // Environment variables under their old names.
  for (const OptionDef& d : SharedOptions()) {
    if (!(d.commands & cmd)) continue;
    CLI::Option* o = app->get_option_no_throw(LongName(d.names));
    if (!o || o->count() > 0 || (!d.env.empty() && std::getenv(d.env.c_str()) && *std::getenv(d.env.c_str()))) continue;
    for (const auto& [cmds, old] : d.old_env) {
      const char* v = (cmds & cmd) ? std::getenv(old.c_str()) : nullptr;
      if (!v || !*v) continue;
      std::fprintf(stderr, "tlr: $%s is deprecated here: use $%s (the old name goes in the next release)\n",
                   old.c_str(), d.env.c_str());
      o->add_result(std::string(v));
      o->run_callback();
      break;
    }
  }
  const CLI::Option* llm = app->get_option_no_throw("--llm");
  if (llm && llm->count() > 0 && p->remote()) return Status::Error("give either --llm or --server, not both");
  // An empty --server (an unset $URL) would otherwise mean the LLM in this process, without a word.
  if (const CLI::Option* s = app->get_option_no_throw("--server"); s && s->count() > 0 && p->server.url.empty()) {
    return Status::Error("--server: the URL is empty (an unset variable?); leave --server out to run the LLM in this "
                         "process");
  }
  // The demo pair's files where none were given.
  auto demo = [](std::string* path, const char* name) {
    if (path->empty()) *path = DemoFile(name);
  };
  if (cmd & (kPairCmds)) {
    demo(&p->slm, "slm.gguf");
    if (!p->remote()) demo(&p->llm, "llm.gguf");
    demo(&p->router, "router.gguf");
  }
  if (cmd & (kCmdEval | kCmdUi)) demo(&p->data, "test.jsonl");
  if (cmd & kCmdRouterCalibrate) demo(&p->data, "dev.jsonl");
  if (cmd & kCmdRun) demo(&p->model, "slm.gguf");
  if (cmd & kCmdServe) demo(&p->model, "llm.gguf");
  if ((cmd & kCmdServe) && p->ctx < 16) return Status::Error("--ctx: a session holds at least 16 tokens");
  // Derived values.
  if (cmd & kSamplingCmds) TLR_RETURN_IF_ERROR(p->sampling.Validate());
  if (cmd & kServerCmds) {
    if (p->server.llm_prompt == "text" && p->remote() && p->server.backend != "openai") {
      return Status::Error("--llm-prompt text needs --backend openai (tlr serve's protocol sends token ids)");
    }
    // --server-key may come from $TLR_SERVER_KEY (or the old $TLR_API_KEY), set for every
    // command: only the flag (or its old spelling --api-key) is refused.
    const CLI::Option* key = app->get_option_no_throw("--server-key");
    const CLI::Option* old_key = app->get_option_no_throw("--api-key");
    const char* env_key = std::getenv("TLR_SERVER_KEY");
    const char* old_env_key = std::getenv("TLR_API_KEY");
    const bool from_env = (env_key && p->server.key == env_key) || (old_env_key && p->server.key == old_env_key);
    if (!p->remote() && ((key && key->count() > 0 && !from_env) || (old_key && old_key->count() > 0))) {
      return Status::Error("--server-key needs --server (the LLM runs in this process: there is no server to send it to)");
    }
    if (const CLI::Option* m = app->get_option_no_throw("--server-model");
        m && m->count() > 0 && p->remote() && p->server.backend != "openai") {
      return Status::Error("--server-model is for --backend openai (a tlr serve server has one model)");
    }
    if (p->remote() && p->server.url.rfind("https://", 0) != 0) {
      for (const char* f : {"--ca-file", "--no-verify-tls"}) {
        const CLI::Option* o = app->get_option_no_throw(f);
        if (o && o->count() > 0) return Status::Error(std::string(f) + " is for an https:// --server; this one is " + p->server.url);
      }
    }
  }
  DecodeOptions& d = p->decode;
  if (cmd & (kCmdGenerate | kCmdChat)) {
    TLR_ASSIGN_OR_RETURN(d.mode, ParseDecodeMode(p->mode));
  }
  d.threshold = p->threshold;
  TLR_ASSIGN_OR_RETURN(d.policy, ParseRoutePolicy(p->policy));
  d.price_ratio = p->price_ratio;
  d.cost_budget = p->cost_budget;
  d.route_span = p->span;
  d.max_tokens = p->max_tokens;
  d.sampling = p->sampling;
  if (cmd & kDecodeCmds) {
    d.pipeline = p->pipeline_options;
    d.pipeline.enabled = p->pipeline == "on";
    if (p->llm_budget == "auto") {
      d.pipeline.llm_budget = 0;
    } else {
      char* end = nullptr;
      const double b = std::strtod(p->llm_budget.c_str(), &end);
      if (p->llm_budget.empty() || *end != '\0' || !(b >= 1 && b <= 1e6)) {
        return Status::Error("--llm-budget wants a number of LLM tokens per routed token (at least 1) or 'auto', got '" +
                             p->llm_budget + "'");
      }
      d.pipeline.llm_budget = b;
    }
    d.sim_slm_s = p->sim_slm_ms / 1e3;
    TLR_RETURN_IF_ERROR(d.pipeline.Validate());
    // Flags that do nothing in what was asked are refused rather than ignored.
    auto given = [&](const char* name) {
      const CLI::Option* o = app->get_option_no_throw(name);
      return o && o->count() > 0;
    };
    if (!d.pipeline.enabled) {
      for (const char* f : {"--spec-depth", "--spec-branches", "--lookahead", "--llm-budget"}) {
        if (given(f)) return Status::Error(std::string(f) + " does nothing with --pipeline off (it blocks on every routed token)");
      }
    }
    if ((cmd & kCmdGenerate) && d.mode != DecodeMode::kJoint) {  // (chat can switch modes: /mode)
      const std::string why = d.mode == DecodeMode::kSmallOnly ? "the SLM alone answers, nothing is routed"
                                                                : "the LLM alone answers, nothing is routed";
      // (The pair's files, --router among them, may stay: one command line for every mode.)
      for (const char* f : {"--threshold", "--policy", "--price-ratio", "--cost-budget", "--span", "--spec-depth",
                            "--spec-branches", "--lookahead", "--llm-budget"}) {
        if (given(f)) return Status::Error(std::string(f) + " does nothing with --mode " + p->mode + " (" + why + ")");
      }
      // A file this mode does not read is still checked: a wrong path would show only later.
      const bool small = d.mode == DecodeMode::kSmallOnly;
      const char* unused = small ? "--llm" : "--router";
      const std::string& path = small ? p->llm : p->router;
      const bool builtin = !small && IsBuiltinRouterName(path);
      std::error_code ec;
      if (given(unused) && !builtin && !std::filesystem::exists(path, ec)) {
        return Status::Error(std::string(unused) + " " + path + ": no such file (--mode " + p->mode +
                             " does not read it, but the path is wrong)");
      }
    }
  }
  if (cmd & kListenCmds) {
    // An address, not a URL or host:port ([::1] as in a URL is taken as ::1).
    if (p->host.size() > 2 && p->host.front() == '[' && p->host.back() == ']') p->host = p->host.substr(1, p->host.size() - 2);
    if (p->host.find('/') != std::string::npos || std::count(p->host.begin(), p->host.end(), ':') == 1) {
      return Status::Error("--host takes an address such as 127.0.0.1 or ::1, not a URL or host:port ('" + p->host +
                           "'); the port goes to --port");
    }
    if (!ParseBytes(p->kv_budget, &p->kv_budget_bytes)) {
      return Status::Error("--kv-budget: not a size: '" + p->kv_budget + "' (e.g. 1G)");
    }
    if (!p->accept_key_file.empty()) {
      auto text = ReadFileToString(p->accept_key_file);
      if (!text.ok()) return Status::Error("--accept-key-file: " + text.status().message());
      if (text->rfind("\xEF\xBB\xBF", 0) == 0) text->erase(0, 3);  // a UTF-8 BOM (Windows editors) is no part of a key
      size_t n = 0, start = 0;
      while (start <= text->size()) {
        const size_t end = std::min(text->find('\n', start), text->size());
        std::string line = text->substr(start, end - start);
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
        const size_t lead = line.find_first_not_of(" \t");
        line.erase(0, lead == std::string::npos ? line.size() : lead);
        if (!line.empty() && line[0] != '#') {
          p->accept_keys.push_back(line);
          ++n;
        }
        start = end + 1;
      }
      if (n == 0) return Status::Error("--accept-key-file: " + p->accept_key_file + " has no keys");
      p->accept_key_file.clear();  // read: resolving again adds nothing
    }
  }
  return Status::Ok();
}

bool IsBuiltinRouterName(const std::string& router) {
  const auto kind = ParseRouterKind(router);
  return kind.ok() && !RouterIsLearned(*kind);
}

std::string DemoFile(const std::string& name) {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("TLR_DEMO_DIR"); d && *d) return (fs::path(d) / name).string();
  std::vector<fs::path> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path() / ".." / ".." / "models" / "demo");
    dirs.push_back(exe.parent_path() / ".." / "share" / "tlr" / "models" / "demo");
  }
  dirs.push_back(fs::path(TLR_SOURCE_DIR) / "models" / "demo");
  for (const fs::path& d : dirs) {
    if (fs::exists(d / name, ec)) return (d / name).lexically_normal().string();
  }
  return (dirs.back() / name).string();
}

Model::Options ModelOptions(const std::string& kv_type) {
  auto o = ModelOptionsForKvType(kv_type);  // the flag's check admits only known names
  Model::Options m = o.ok() ? *o : Model::Options{};
  // The weight cache for every command: auto (default), off, or a directory.
  if (const char* e = std::getenv("TLR_WEIGHT_CACHE"); e && *e) m.weight_cache = e;
  // A first open that repacks says so (and how long it took): it happens once per model.
  m.on_progress = [](const std::string& what) { std::fprintf(stderr, "tlr: %s\n", what.c_str()); };
  return m;
}

}  // namespace tlr::cli
