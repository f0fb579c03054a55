// Shared model options (apps layer). See model_args.h.
#include "apps/tlr/model_args.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "device/session/device_session.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace {

// Puts the options added since `before` (a count of the app's options) under a --help heading,
// so that each command's own options come first and the shared ones follow in groups.
void GroupSince(CLI::App* app, size_t before, const std::string& group) {
  auto opts = app->get_options();
  for (size_t i = before; i < opts.size(); ++i) opts[i]->group(group);
}

}  // namespace

void AddThreadArgs(CLI::App* app, RunArgs* a) {
  const size_t before = app->get_options().size();
  a->threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")
      ->check(CLI::Range(1, 256));
  app->add_option("-c,--ctx", a->ctx, "Context size in tokens (KV cache capacity)")
      ->default_val(4096)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  AddKvTypeArg(app, &a->kv_type);
  GroupSince(app, before, "Threads and memory");
}

void AddKvTypeArg(CLI::App* app, std::string* kv_type) {
  app->add_option("--kv-type", *kv_type,
                  "KV cache storage: f16 (default; half of f32's memory traffic at long contexts), f32 (exact), "
                  "q8_0 (a quarter of f32's; needs a head dimension that is a multiple of 32)")
      ->default_val("f16")->check(CLI::IsMember({"f32", "f16", "q8_0"}));
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

void AddThreadsOnly(CLI::App* app, int* threads) {
  *threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app->add_option("-t,--threads", *threads, "Worker threads (default: all cores)")->check(CLI::Range(1, 256));
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

void AddThinkArgs(CLI::App* app, CLI::Option* chat_flag, std::optional<bool>* enable_thinking) {
  auto* on = app->add_flag_callback("--think", [enable_thinking] { *enable_thinking = true; },
                                    "With --chat: enable_thinking=true for the chat template (Qwen3: the "
                                    "model thinks in a <think> block first)");
  auto* off = app->add_flag_callback("--no-think", [enable_thinking] { *enable_thinking = false; },
                                     "With --chat: enable_thinking=false (Qwen3's template closes an empty "
                                     "<think> block so the model answers directly)");
  on->excludes(off);
  off->excludes(on);
  if (chat_flag) {  // null: every prompt is a chat (tlr chat)
    on->needs(chat_flag);
    off->needs(chat_flag);
  }
}

void AddPairArgs(CLI::App* app, PairArgs* a) {
  app->add_option("--slm", a->slm, "Small model GGUF (default: the bundled demo SLM, " + DemoFile("slm.gguf") + ")");
  app->add_option("--llm", a->llm, "Large model GGUF, run in this process (default: the bundled demo LLM)");
  app->add_option("--router", a->router,
                  "Router GGUF from `tlr router train`, or a built-in kind: maxprob, entropy, random "
                  "(default: the bundled demo router)");
  app->add_option("--mode", a->mode, "joint (route), small_only (SLM alone), large_only (LLM alone)")
      ->default_val("joint")
      ->check(CLI::IsMember({"joint", "small_only", "large_only"}));
  app->add_option("--threshold", a->threshold,
                  "Route when the router's confidence is below this (default: the router's recommended one)")
      ->check(CLI::Range(0.0f, 1.0f));
}

void AddSamplingArgs(CLI::App* app, RunArgs* a) {
  const size_t before = app->get_options().size();
  app->add_option("--temp", a->sampling.temperature, "Temperature (0 = greedy)")->default_val(0.0f);
  app->add_option("--top-k", a->sampling.top_k, "Top-k (0 = off)")->default_val(40);
  app->add_option("--top-p", a->sampling.top_p, "Top-p / nucleus (1 = off)")->default_val(1.0f);
  app->add_option("--min-p", a->sampling.min_p, "Min-p (0 = off)")->default_val(0.0f);
  app->add_option("--repeat-penalty", a->sampling.repeat_penalty, "Repetition penalty (1 = off)")
      ->default_val(1.0f);
  app->add_option("--repeat-last-n", a->sampling.repeat_last_n, "Tokens the penalty looks back")
      ->default_val(64);
  app->add_option("--seed", a->sampling.seed, "Sampling seed")->default_val(42);
  GroupSince(app, before, "Sampling");
}

void AddLlmServerArgs(CLI::App* app, LlmArgs* a) {
  const size_t before = app->get_options().size();
  app->add_option("--server", a->server,
                  "Use the LLM behind this server (http[s]://host[:port][/path]) instead of --llm; it must be "
                  "reachable at start (see --allow-unreachable)");
  app->add_flag("--allow-unreachable", a->allow_unreachable,
                "--server: start even if the server cannot be reached; routed tokens come from the SLM (FALLBACK) "
                "until it can");
  app->add_option("--backend", a->backend, "Server protocol: tlr (`tlr serve` sessions, delta sync) or openai "
                                           "(any OpenAI-compatible engine: vLLM, SGLang, llama.cpp server)")
      ->default_val("tlr")->check(CLI::IsMember({"tlr", "openai"}));
  app->add_option("--server-key", a->api_key, "The key this device sends to the --server (also $TLR_SERVER_KEY)");
  AddDeprecatedOption(app, "--api-key", &a->api_key, "--server-key");
  app->add_option("--server-model", a->model, "openai backend: model name (default: the server's first)");
  app->add_option("--llm-timeout", a->timeout_s,
                  "Deadline of one LLM call, in seconds (connect, send and receive, retries included); past it the "
                  "SLM's own token is used (FALLBACK). The server is told it and refuses at once (429) what it cannot "
                  "answer in time; the device then answers with the SLM until the server's Retry-After")
      ->default_val(a->timeout_s)->check(CLI::Range(0.001, 3600.0));
  app->add_option("--llm-retries", a->retries, "Further attempts after a failed server call")->default_val(2)
      ->check(CLI::Range(0, 100));
  app->add_option("--llm-retry-after", a->retry_after_s,
                  "After the server failed: seconds of SLM-only answering before trying it again")
      ->default_val(1)->check(CLI::Range(0.0, 3600.0));
  app->add_option("--ca-file", a->ca_file, "https: CA certificates to verify the server with")->check(CLI::ExistingFile);
  app->add_flag("--no-verify-tls", a->no_verify_tls, "https: do not verify the server's certificate (testing only)");
  app->add_option("--sim-rtt", a->sim_rtt_ms, "Simulated network round trip per LLM call, in ms (the paper assumed 170)")
      ->default_val(0)->check(CLI::Range(0.0, 600000.0));
  app->add_option("--sim-jitter", a->sim_jitter_ms, "Uniform +- jitter on --sim-rtt, in ms")->default_val(0)
      ->check(CLI::Range(0.0, 600000.0));
  app->add_option("--llm-tokenizer", a->llm_tokenizer,
                  "--server: the LLM's tokenizer when its vocabulary differs from the SLM's: a GGUF (vocabulary-only "
                  "or the model), a tokenizer.json, or 'server' (`tlr serve` sends its own). Calls carry the context "
                  "in the LLM's tokens and its replies become SLM tokens (docs/guide.md#pairs-with-different-vocabularies)")
      ->check(CLI::ExistingFile | CLI::IsMember({"server"}));
  app->add_option("--llm-prompt", a->llm_prompt,
                  "--backend openai: how contexts are sent: ids (token ids; vLLM, SGLang, llama.cpp server, tlr serve) "
                  "or text (engines that take only text prompts; the engine tokenizes again, and an LLM of another "
                  "vocabulary has its held-back word checked and trimmed instead of constrained)")
      ->default_val("ids")->check(CLI::IsMember({"ids", "text"}));
  app->add_option("--llm-connections", a->connections,
                  "--server: LLM calls in flight at once (one keep-alive connection each)")
      ->default_val(4)->check(CLI::Range(1, 64));
  GroupSince(app, before, "LLM server (--server)");
}

namespace {

void SayDeprecated(const std::string& old_name, const std::string& now) {
  std::fprintf(stderr, "tlr: %s is deprecated: use %s (the old spelling goes in the next release)\n",
               old_name.c_str(), now.c_str());
}

template <typename T>
void AddDeprecated(CLI::App* app, const std::string& old_name, T* target, const std::string& now) {
  app->add_option(old_name, *target)->group("")->each([old_name, now](const std::string&) { SayDeprecated(old_name, now); });
}

}  // namespace

void AddDeprecatedOption(CLI::App* app, const std::string& old_name, std::string* target, const std::string& now) {
  AddDeprecated(app, old_name, target, now);
}

void AddDeprecatedOption(CLI::App* app, const std::string& old_name, std::vector<std::string>* target,
                         const std::string& now) {
  AddDeprecated(app, old_name, target, now);
}

void AddDeprecatedFlag(CLI::App* app, const std::string& old_name, bool* target, const std::string& now) {
  app->add_flag_callback(old_name, [target, old_name, now] {
       *target = true;
       SayDeprecated(old_name, now);
     })->group("");
}

std::string EnvWithFallback(const char* name, const char* deprecated) {
  if (const char* v = std::getenv(name); v && *v) return v;
  if (deprecated) {
    if (const char* v = std::getenv(deprecated); v && *v) {
      std::fprintf(stderr, "tlr: $%s is deprecated here: use $%s (the old name goes in the next release)\n",
                   deprecated, name);
      return v;
    }
  }
  return "";
}

void AddAcceptKeyArgs(CLI::App* app, AcceptKeyArgs* a, const std::string& what) {
  app->add_option("--accept-key", a->keys,
                  "Require 'Authorization: Bearer KEY' on " + what + " (repeat for several keys; also $TLR_ACCEPT_KEY)");
  app->add_option("--accept-key-file", a->file,
                  "File with keys to accept, one per line (blank lines and '#' comments skipped)");
}

Expected<std::vector<std::string>> ResolveAcceptKeys(const AcceptKeyArgs& a, const char* deprecated_env) {
  std::vector<std::string> keys = a.keys;
  if (std::string k = EnvWithFallback("TLR_ACCEPT_KEY", deprecated_env); !k.empty()) keys.push_back(k);
  if (!a.file.empty()) {
    auto text = ReadFileToString(a.file);
    if (!text.ok()) return Status::Error("--accept-key-file: " + text.status().message());
    size_t n = 0, start = 0;
    while (start <= text->size()) {
      const size_t end = std::min(text->find('\n', start), text->size());
      std::string line = text->substr(start, end - start);
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
      size_t lead = 0;
      while (lead < line.size() && (line[lead] == ' ' || line[lead] == '\t')) ++lead;
      line.erase(0, lead);
      if (!line.empty() && line[0] != '#') {
        keys.push_back(line);
        ++n;
      }
      start = end + 1;
    }
    if (n == 0) return Status::Error("--accept-key-file: " + a.file + " has no keys");
  }
  return keys;
}

Expected<LlmSpec> MakeLlmSpec(const LlmArgs& a, const Model* model, int threads, int64_t n_ctx, uint64_t seed) {
  LlmSpec spec;
  spec.model = model;
  spec.threads = threads;
  spec.n_ctx = n_ctx;
  spec.sim_rtt_s = a.sim_rtt_ms / 1e3;
  spec.sim_jitter_s = a.sim_jitter_ms / 1e3;
  spec.seed = seed;
  if (!a.server.empty()) {
    RemoteOptions& r = spec.remote;
    r.http.url = a.server;
    auto protocol = ParseRemoteProtocol(a.backend);
    if (!protocol.ok()) return protocol.status();
    r.protocol = *protocol;
    r.http.api_key = a.api_key;
    if (r.http.api_key.empty()) r.http.api_key = EnvWithFallback("TLR_SERVER_KEY", "TLR_API_KEY");
    r.model = a.model;
    r.http.ca_file = a.ca_file;
    r.http.verify_tls = !a.no_verify_tls;
    r.http.timeout_s = a.timeout_s;
    r.http.retries = a.retries;
    r.retry_after_s = a.retry_after_s;
    r.max_in_flight = a.connections;
    if (a.llm_prompt == "text" && r.protocol != RemoteProtocol::kOpenAi) {
      return Status::Error("--llm-prompt text needs --backend openai (tlr serve's protocol sends token ids)");
    }
    r.text_prompt = a.llm_prompt == "text";
    r.require_reachable = !a.allow_unreachable;
    spec.llm_tokenizer = a.llm_tokenizer;
  }
  return spec;
}

std::string BridgeSummary(const VocabBridgeStats& s) {
  const double calls = static_cast<double>(std::max<int64_t>(1, s.contexts));
  char b[320];
  std::snprintf(b, sizeof b,
                "vocabulary bridge: %lld routed calls; per call %.1f LLM tokens re-encoded, %.1f kept from the call "
                "before, %.1f bytes held back and spelled again; %lld contexts encoded from the start",
                static_cast<long long>(s.contexts), static_cast<double>(s.llm_tokens_encoded) / calls,
                static_cast<double>(s.llm_tokens_kept) / calls, static_cast<double>(s.pending_bytes) / calls,
                static_cast<long long>(s.full_encodes));
  return b;
}

Expected<std::unique_ptr<LlmStack>> MakeLlm(const LlmArgs& a, const Model* model, int threads, int64_t n_ctx,
                                            const Tokenizer& vocab, uint64_t seed) {
  TLR_ASSIGN_OR_RETURN(LlmSpec spec, MakeLlmSpec(a, model, threads, n_ctx, seed));
  auto stack = LlmStack::Create(spec, vocab);
  if (stack.ok() && !(*stack)->warning().empty()) std::fprintf(stderr, "warning: %s\n", (*stack)->warning().c_str());
  return stack;
}

Status PipelineArgs::Apply(DecodeOptions* d) const {
  d->pipeline = options;
  d->pipeline.enabled = pipeline == "on";
  if (llm_budget == "auto") {
    d->pipeline.llm_budget = 0;
  } else {
    char* end = nullptr;
    const double b = std::strtod(llm_budget.c_str(), &end);
    if (llm_budget.empty() || *end != '\0' || !(b >= 1 && b <= 1e6)) {
      return Status::Error("--llm-budget wants a number of LLM tokens per routed token (at least 1) or 'auto', got '" +
                           llm_budget + "'");
    }
    d->pipeline.llm_budget = b;
  }
  d->sim_slm_s = sim_slm_ms / 1e3;
  return d->pipeline.Validate();
}

void AddPipelineArgs(CLI::App* app, PipelineArgs* a) {
  const size_t before = app->get_options().size();
  const PipelineOptions def;
  app->add_option("--pipeline", a->pipeline,
                  "on: keep decoding while routed tokens are on the network (speculate, pipeline calls, "
                  "use LLM lookahead); off: block on every routed token. Outputs are identical either way")
      ->default_val("on")->check(CLI::IsMember({"on", "off"}));
  app->add_option("--spec-depth", a->options.depth,
                  "Pipeline: tokens the SLM may run ahead of the oldest unanswered routed token")
      ->default_val(def.depth)->check(CLI::Range(0, 4096));
  app->add_option("--spec-branches", a->options.branches,
                  "Pipeline: SLM candidates speculated on at once at a routed token (KV fork, one batched "
                  "SLM pass)")
      ->default_val(def.branches)->check(CLI::Range(1, 16));
  app->add_option("--lookahead", a->options.lookahead,
                  "Pipeline: most tokens of the LLM's own continuation asked for with a routed call (the ask "
                  "grows while such drafts stand and falls to 0 when they do not; within --llm-budget); a "
                  "later routed token whose context matches takes its token with no call")
      ->default_val(def.lookahead)->check(CLI::Range(0, 256));
  app->add_option("--llm-budget", a->llm_budget,
                  "Pipeline: LLM tokens it may cost per routed token (answers, lookahead, speculative calls "
                  "including cancelled ones; the units an LLM is paid in); 'auto': no limit, as fast as possible")
      ->default_val("1.25");
  app->add_option("--sim-slm-ms", a->sim_slm_ms,
                  "SIMULATED device pace: every SLM pass takes at least this many ms (e.g. 20 for a "
                  "0.5B-class SLM on a phone); outputs are unchanged")
      ->default_val(0)->check(CLI::Range(0.0, 60000.0));
  GroupSince(app, before, "Pipeline (routed tokens on the network)");
}

}  // namespace tlr::cli
