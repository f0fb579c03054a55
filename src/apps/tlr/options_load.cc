// The options layer's load step and its JSON view of the parameters (apps layer). See options.h.
#include <cstdio>
#include <filesystem>

#include "apps/tlr/options.h"

namespace tlr::cli {

namespace {

nlohmann::json Optional(const std::optional<bool>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

}  // namespace

nlohmann::json ToJson(const Params& p) {
  const SamplerParams& s = p.sampling;
  const ServerParams& v = p.server;
  const DecodeOptions& d = p.decode;
  return {
      {"slm", p.slm}, {"llm", p.llm}, {"router", p.router}, {"model", p.model}, {"data", p.data},
      {"limit", p.limit}, {"chat", p.chat}, {"think", Optional(p.think)}, {"system", p.system},
      {"no_color", p.no_color}, {"threads", p.threads}, {"ctx", p.ctx}, {"kv_type", p.kv_type},
      {"server", {{"url", v.url}, {"backend", v.backend}, {"key", v.key.empty() ? "" : "(set)"}, {"model", v.model},
                  {"ca_file", v.ca_file}, {"llm_tokenizer", v.llm_tokenizer}, {"llm_prompt", v.llm_prompt},
                  {"timeout_s", v.timeout_s}, {"retry_after_s", v.retry_after_s}, {"sim_rtt_ms", v.sim_rtt_ms},
                  {"sim_jitter_ms", v.sim_jitter_ms}, {"retries", v.retries}, {"connections", v.connections},
                  {"no_verify_tls", v.no_verify_tls}, {"allow_unreachable", v.allow_unreachable}}},
      {"decode", {{"mode", DecodeModeName(d.mode)}, {"threshold", d.threshold}, {"policy", RoutePolicyName(d.policy)},
                  {"price_ratio", d.price_ratio}, {"cost_budget", d.cost_budget}, {"span", d.route_span},
                  {"max_tokens", d.max_tokens},
                  {"sampling", {{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p},
                                {"min_p", s.min_p}, {"repeat_penalty", s.repeat_penalty},
                                {"repeat_last_n", s.repeat_last_n}, {"seed", s.seed}}},
                  {"pipeline", {{"enabled", d.pipeline.enabled}, {"depth", d.pipeline.depth},
                                {"branches", d.pipeline.branches}, {"lookahead", d.pipeline.lookahead},
                                {"llm_budget", d.pipeline.llm_budget}}},
                  {"sim_slm_ms", d.sim_slm_s * 1e3}}},
      {"listen", {{"host", p.host}, {"port", p.port}, {"public", p.public_bind},
                  {"accept_keys", p.accept_keys.size()}, {"kv_budget_bytes", p.kv_budget_bytes}}},
  };
}

PairNeeds NeedsForMode(DecodeMode mode) {
  PairNeeds n;
  n.router = mode != DecodeMode::kLargeOnly;
  n.llm = mode != DecodeMode::kSmallOnly;
  return n;
}

Expected<Pair> LoadPair(const Params& p, PairNeeds needs) {
  Pair out;
  const Model::Options opts = ModelOptions(p.kv_type);
  if (needs.slm) {
    TLR_ASSIGN_OR_RETURN(out.slm, LoadModelAs("SLM", p.slm, opts));
  }
  if (needs.router) {
    if (p.router.empty()) return Status::Error("router: give a router file or a built-in kind (maxprob, entropy, random)");
    if (needs.router_file && IsBuiltinRouterName(p.router)) {
      return Status::Error("--router " + p.router + " is a built-in router, which has no file to write a threshold "
                           "into: give a trained router file (for a built-in one, compare thresholds with `tlr eval "
                           "--thresholds`)");
    }
    auto r = needs.router_file ? Router::Load(p.router) : Router::LoadOrBuiltin(p.router, p.sampling.seed);
    if (!r.ok()) return r.status();
    out.router = std::make_unique<Router>(std::move(r).value());
    if (out.slm) {
      const Status fits = out.router->CheckCompatible(*out.slm);
      if (!fits.ok() && p.router == DemoFile("router.gguf")) {
        return Status::Error("the bundled demo router (used when no --router is given) was trained for the demo SLM, "
                             "not " + std::filesystem::path(p.slm).filename().string() + ": give --router maxprob (or entropy) for a built-in one, or "
                             "train one for this SLM with `tlr router train` (" + fits.message() + ")");
      }
      TLR_RETURN_IF_ERROR(fits);
    }
  }
  if (needs.llm && !p.remote()) {
    TLR_ASSIGN_OR_RETURN(std::unique_ptr<Model> llm, LoadModelAs("LLM", p.llm, opts));
    out.llm.model = std::move(llm);
  }
  LlmConfig& config = out.llm.config;
  config.threads = p.threads;
  config.sim_rtt_s = p.server.sim_rtt_ms / 1e3;
  config.sim_jitter_s = p.server.sim_jitter_ms / 1e3;
  config.seed = p.sampling.seed;
  if (p.remote()) {
    const ServerParams& a = p.server;
    RemoteOptions& r = config.remote;
    r.http.url = a.url;
    TLR_ASSIGN_OR_RETURN(r.protocol, ParseRemoteProtocol(a.backend));
    r.http.api_key = a.key;
    r.model = a.model;
    r.http.ca_file = a.ca_file;
    r.http.verify_tls = !a.no_verify_tls;
    r.http.timeout_s = a.timeout_s;
    r.http.retries = a.retries;
    r.retry_after_s = a.retry_after_s;
    r.max_in_flight = a.connections;
    r.text_prompt = a.llm_prompt == "text";
    r.require_reachable = !a.allow_unreachable;
    config.llm_tokenizer = a.llm_tokenizer;
  }
  out.decode = p.decode;
  if (out.decode.threshold < 0) out.decode.threshold = out.router ? out.router->info().threshold : 0.5f;
  return out;
}

Expected<std::unique_ptr<LlmStack>> MakeLlmStack(const Pair& pair, int64_t n_ctx, const Tokenizer& vocab) {
  auto stack = LlmStack::Create(pair.llm.config, pair.llm.model.get(), n_ctx, vocab);
  if (stack.ok() && !(*stack)->warning().empty()) std::fprintf(stderr, "warning: %s\n", (*stack)->warning().c_str());
  return stack;
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

}  // namespace tlr::cli
