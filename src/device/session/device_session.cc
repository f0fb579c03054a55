// The device session shared by `tlr generate` and the C API (see device_session.h).
#include "device/session/device_session.h"

#include <chrono>

#include <atomic>
#include <cmath>

#include "model/chat_template.h"

namespace tlr {

Expected<Model::Options> ModelOptionsForKvType(std::string_view kv_type) {
  Model::Options o;
  if (kv_type.empty() || kv_type == "f16") {
    o.kv_type = GgmlType::kF16;
  } else if (kv_type == "f32") {
    o.kv_type = GgmlType::kF32;
  } else if (kv_type == "q8_0") {
    o.kv_type = GgmlType::kQ8_0;
  } else {
    return Status::Error("unknown KV cache type '" + std::string(kv_type) + "' (f16, f32 or q8_0)");
  }
  return o;
}

Expected<std::unique_ptr<Model>> LoadModelAs(std::string_view role, const std::string& path,
                                             const Model::Options& opts) {
  if (path.empty()) return Status::Error(std::string(role) + ": no model file given");
  auto m = Model::Load(path, opts);
  if (!m.ok()) return m.status().WithPrefix(std::string(role));
  return m;
}

Expected<DeviceModels> DeviceModels::Load(const std::string& slm_path, const std::string& router,
                                          const Model::Options& opts, uint64_t seed, Step* failed) {
  Step step_sink;
  Step& step = failed ? *failed : step_sink;
  DeviceModels d;
  step = Step::kSlm;
  TLR_ASSIGN_OR_RETURN(d.slm, LoadModelAs("SLM", slm_path, opts));
  step = Step::kRouter;
  if (router.empty()) return Status::Error("router: give a router file or a built-in kind (maxprob, entropy, random)");
  auto r = Router::LoadOrBuiltin(router, seed);
  if (!r.ok()) return r.status();
  d.router = std::make_unique<Router>(std::move(r).value());
  step = Step::kCompatibility;
  TLR_RETURN_IF_ERROR(d.router->CheckCompatible(*d.slm));
  return d;
}

Status ValidateDecodeOptions(const DecodeOptions& d) {
  if (!(d.threshold >= 0.0f && d.threshold <= 1.0f)) {
    return Status::Error("threshold " + std::to_string(d.threshold) + " is outside [0, 1]");
  }
  if (d.route_span < 1 || d.route_span > 64) {
    return Status::Error("route span " + std::to_string(d.route_span) + " is outside [1, 64]");
  }
  if (d.max_tokens < 0 || d.max_tokens > kMaxGenerateTokens) {
    return Status::Error("max tokens " + std::to_string(d.max_tokens) + " is outside [0, " +
                         std::to_string(kMaxGenerateTokens) + "]");
  }
  if (!(d.sim_slm_s >= 0) || d.sim_slm_s > 60) return Status::Error("the simulated SLM step must be in [0, 60] s");
  // (The decoder checks these again; here they are the caller's argument errors, before any work.)
  if (!(d.price_ratio >= 0 && d.price_ratio <= 1e6)) {
    return Status::Error("the price ratio (an LLM output token in input tokens) must be in 0..1e6");
  }
  if (!(d.cost_budget >= 0 && d.cost_budget <= 1e12)) return Status::Error("the cost budget must be 0 (none) or positive");
  TLR_RETURN_IF_ERROR(d.sampling.Validate());
  return d.pipeline.Validate();
}

Expected<std::vector<int32_t>> EncodePrompt(const Model& model, std::string_view text, bool chat,
                                            std::optional<bool> enable_thinking) {
  const Tokenizer& tok = model.tokenizer();
  std::vector<int32_t> ids;
  if (chat) {
    ChatTemplateOptions co;
    co.enable_thinking = enable_thinking;
    TLR_ASSIGN_OR_RETURN(std::string rendered, ApplyChatTemplate(model, {{"user", std::string(text)}}, co));
    ids = tok.Encode(rendered, false, true);
  } else {
    ids = tok.Encode(text, true, false);
  }
  if (ids.empty()) return Status::Error("the prompt is empty");
  return ids;
}

uint64_t LlmTarget::NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

Expected<std::vector<int32_t>> EncodeMessages(const Model& model, const std::vector<ChatMessage>& messages,
                                              std::optional<bool> enable_thinking) {
  if (messages.empty()) return Status::Error("the conversation has no messages");
  ChatTemplateOptions co;
  co.enable_thinking = enable_thinking;
  TLR_ASSIGN_OR_RETURN(std::string rendered, ApplyChatTemplate(model, messages, co));
  std::vector<int32_t> ids = model.tokenizer().Encode(rendered, false, true);
  if (ids.empty()) return Status::Error("the conversation renders to an empty prompt");
  return ids;
}

Expected<DeviceRunResult> RunDeviceGeneration(const Model& main, Router* router, const LlmTarget* llm,
                                              ThreadPool* pool, std::span<const int32_t> prompt,
                                              const DecodeOptions& opts,
                                              const std::function<bool(const TokenEvent&)>& on_token,
                                              const std::function<void(const std::string&)>& on_warning,
                                              DeviceRunStep* failed, DeviceContext* context) {
  DeviceRunStep step_sink;
  DeviceRunStep& step = failed ? *failed : step_sink;
  step = DeviceRunStep::kOptions;
  TLR_RETURN_IF_ERROR(ValidateDecodeOptions(opts));
  DeviceRunResult result;
  std::unique_ptr<LlmStack> own;  // this generation's backend, when no context keeps one
  LlmStack* stack = nullptr;
  RemoteStats before;  // of a reused remote backend: this generation's share is the difference
  if (opts.mode != DecodeMode::kSmallOnly) {
    step = DeviceRunStep::kLlmSetup;
    if (!llm) return Status::Error(std::string(DecodeModeName(opts.mode)) + " mode needs an LLM");
    const int64_t need = static_cast<int64_t>(prompt.size()) + opts.max_tokens + opts.route_span + 1;
    if (context && context->llm && context->llm_owner == llm->id &&
        (context->llm->remote() || context->llm_n_ctx >= need)) {
      stack = context->llm.get();
      if (stack->remote()) before = stack->remote()->stats();
    } else {
      const int64_t n_ctx = context ? std::max(need, context->slm.n_ctx) : need;
      const auto t0 = std::chrono::steady_clock::now();
      auto s = LlmStack::Create(llm->config, llm->model.get(), n_ctx, main.tokenizer(), opts.cancel);
      if (!s.ok()) {
        if (opts.cancel && opts.cancel->load()) {  // cancelled while the server was checked
          result.stats.prompt_tokens = static_cast<int64_t>(prompt.size());
          result.stats.stop = "stopped";
          return result;
        }
        return s.status();
      }
      own = std::move(s).value();
      stack = own.get();
      result.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      result.sim_delay_s = stack->sim_delay_s();
      result.warning = stack->warning();
      if (!result.warning.empty() && on_warning) on_warning(result.warning);
      if (context) {
        context->llm = std::move(own);
        context->llm_owner = llm->id;
        context->llm_model = llm->model;  // the backend reads it: it lives as long as the backend
        context->llm_n_ctx = n_ctx;
      }
    }
  }
  step = DeviceRunStep::kDecode;
  const double sim_before = stack ? stack->sim_delay_s() : 0;
  CollabDecoder dec(main, router, stack ? stack->backend() : nullptr, pool);
  // large_only in process runs without an SLM: `main` is then the LLM, whose cache is not the
  // SLM's context.
  SlmContext* slm_context = context && opts.mode != DecodeMode::kLargeOnly ? &context->slm : nullptr;
  auto stats = dec.Generate(prompt, opts, on_token, slm_context);
  if (!stats.ok()) return stats.status();
  result.stats = std::move(stats).value();
  if (stack) result.sim_delay_s += stack->sim_delay_s() - sim_before;
  if (stack && stack->remote()) {
    result.remote = true;
    result.remote_stats = stack->remote()->stats() - before;
  }
  return result;
}

}  // namespace tlr
