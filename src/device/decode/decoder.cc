// The collaborative decoder's checks and its blocking loops: large_only, small_only and joint
// with the pipeline off (see decoder.h; the pipelined joint loop is decoder_pipeline.cc).
#include "device/decode/decoder.h"

#include <algorithm>

#include "device/decode/decoder_emit.h"

namespace tlr {

using decoder_internal::Cancelled;
using decoder_internal::Clock;
using decoder_internal::Emitter;
using decoder_internal::PadSlmPass;
using decoder_internal::PrefillSlm;
using decoder_internal::ReturnSlmCache;
using decoder_internal::TakeSlmCache;

namespace {

// Waits for a call, watching the cancel flag: a cancelled wait cancels the call and returns at
// once (a call held by an app's HTTP hook may end only when the hook returns; its reply is not
// used, as for a call the pipeline cancels).
const Expected<LlmReply>& WaitFor(LlmCall& call, const DecodeOptions& opts) {
  static const Expected<LlmReply> kCancelled = Status::Error("cancelled");
  while (!call.WaitFor(0.05)) {
    if (Cancelled(opts)) {
      call.Cancel();
      return kCancelled;
    }
  }
  return call.Wait();
}

}  // namespace

std::string_view DecodeModeName(DecodeMode m) {
  switch (m) {
    case DecodeMode::kJoint: return "joint";
    case DecodeMode::kSmallOnly: return "small_only";
    case DecodeMode::kLargeOnly: return "large_only";
  }
  return "?";
}

Expected<DecodeMode> ParseDecodeMode(std::string_view name) {
  for (DecodeMode m : {DecodeMode::kJoint, DecodeMode::kSmallOnly, DecodeMode::kLargeOnly}) {
    if (name == DecodeModeName(m)) return m;
  }
  return Status::Error("unknown mode '" + std::string(name) + "' (joint, small_only, large_only)");
}

std::string_view TokenSourceName(TokenSource s) {
  switch (s) {
    case TokenSource::kSlm: return "SLM";
    case TokenSource::kLlm: return "LLM";
    case TokenSource::kFallback: return "FALLBACK";
  }
  return "?";
}

Status PipelineOptions::Validate() const {
  if (depth < 0 || depth > 4096) return Status::Error("the speculation depth must be in 0..4096");
  if (branches < 1 || branches > 16) return Status::Error("speculation branches must be in 1..16");
  if (lookahead < 0 || lookahead > 256) return Status::Error("lookahead must be in 0..256");
  if (!(llm_budget == 0 || (llm_budget >= 1 && llm_budget <= 1e6))) {
    return Status::Error("the LLM budget must be 0 (auto: no limit) or at least 1 LLM token per routed token");
  }
  return Status::Ok();
}

CollabDecoder::CollabDecoder(const Model& slm, Router* router, LlmBackend* llm, ThreadPool* pool)
    : slm_(slm), router_(router), llm_(llm), pool_(pool) {}

Expected<DecodeStats> CollabDecoder::Generate(std::span<const int32_t> prompt, const DecodeOptions& opts,
                                              const std::function<bool(const TokenEvent&)>& on_token,
                                              SlmContext* context) {
  if (prompt.empty()) return Status::Error("the prompt is empty");
  if (opts.route_span < 1) return Status::Error("the route span must be at least 1");
  if (opts.max_tokens < 0) return Status::Error("max tokens must not be negative");
  if (!(opts.sim_slm_s >= 0) || opts.sim_slm_s > 60) return Status::Error("the simulated SLM step must be in [0, 60] s");
  TLR_RETURN_IF_ERROR(opts.sampling.Validate());
  TLR_RETURN_IF_ERROR(opts.pipeline.Validate());
  if (!(opts.price_ratio >= 0 && opts.price_ratio <= 1e6)) {
    return Status::Error("the price ratio (an LLM output token in input tokens) must be in 0..1e6");
  }
  if (!(opts.cost_budget >= 0 && opts.cost_budget <= 1e12)) return Status::Error("the cost budget must be 0 (none) or positive");
  const bool joint = opts.mode == DecodeMode::kJoint;
  if (opts.mode != DecodeMode::kSmallOnly && !llm_) {
    return Status::Error(std::string(DecodeModeName(opts.mode)) + " mode needs an LLM");
  }
  if (joint && !router_) return Status::Error("joint mode needs a router");
  if (router_ && opts.mode != DecodeMode::kLargeOnly) TLR_RETURN_IF_ERROR(router_->CheckCompatible(slm_));
  if (llm_ && llm_->vocab_fingerprint() != slm_.tokenizer().Fingerprint()) {
    return Status::Error("the LLM's vocabulary differs from the SLM's: token routing needs one tokenizer");
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= slm_.config().n_vocab) return Status::Error("prompt token " + std::to_string(t) + " is out of range");
  }
  const LlmWork before = llm_ ? llm_->work() : LlmWork{};
  Expected<DecodeStats> st = joint && opts.pipeline.enabled ? GeneratePipelined(prompt, opts, on_token, context)
                                                            : GenerateBlocking(prompt, opts, on_token, context);
  // What this generation cost the LLM (calls it cancelled included, as far as the backend
  // knows by now: see LlmBackend::work).
  if (st.ok() && llm_) st->llm_work = llm_->work() - before;
  return st;
}

Expected<DecodeStats> CollabDecoder::GenerateBlocking(std::span<const int32_t> prompt, const DecodeOptions& opts,
                                                      const std::function<bool(const TokenEvent&)>& on_token,
                                                      SlmContext* context) {
  const bool joint = opts.mode == DecodeMode::kJoint;
  const int64_t V = slm_.config().n_vocab;
  Emitter out(slm_.tokenizer(), opts, on_token, static_cast<int64_t>(prompt.size()));
  DecodeStats& st = out.stats();
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  if (opts.max_tokens == 0) return out.Finish();
  // One blocking LLM call for the n tokens after seq.
  auto call_llm = [&](int n, double* llm_s) -> Expected<LlmReply> {
    LlmRequest req;
    req.context = seq;
    req.n = n;
    req.sampling = opts.sampling;
    const auto t = Clock::now();
    std::shared_ptr<LlmCall> call = llm_->Submit(std::move(req), nullptr);
    ++st.llm_calls;
    st.max_in_flight = 1;
    Expected<LlmReply> r = WaitFor(*call, opts);
    *llm_s = SecondsSince(t);
    st.llm_s += *llm_s;
    st.stall_s += *llm_s;
    return r;
  };

  if (opts.mode == DecodeMode::kLargeOnly) {
    for (bool more = true; more;) {
      const int n = static_cast<int>(std::min<int64_t>(opts.route_span, opts.max_tokens - st.generated));
      double llm_s = 0;
      auto reply = call_llm(n, &llm_s);
      if (!reply.ok()) {
        if (Cancelled(opts)) {
          st.stop = "stopped";
          break;
        }
        return reply.status().WithPrefix("LLM");
      }
      if (reply->tokens.empty()) return Status::Error("the LLM returned no tokens");
      for (size_t k = 0; k < reply->tokens.size() && more; ++k) {
        TokenEvent ev;
        ev.id = reply->tokens[k];
        ev.source = TokenSource::kLlm;
        ev.llm_s = k == 0 ? llm_s : 0;
        ev.stall_s = k == 0 ? llm_s : 0;
        seq.push_back(ev.id);
        more = out.Emit(std::move(ev));
      }
    }
    return out.Finish();
  }

  KvCache cache;
  TLR_ASSIGN_OR_RETURN(st.prompt_reused,
                       TakeSlmCache(slm_, context, prompt,
                                    static_cast<int64_t>(prompt.size()) + opts.max_tokens + opts.route_span + 1, &cache));
  ForwardContext ctx(pool_);
  std::vector<float> logits(V), hidden(slm_.config().n_embd);
  Sampler sampler(opts.sampling, static_cast<int32_t>(V));
  {
    const auto t = Clock::now();
    TLR_ASSIGN_OR_RETURN(const bool read, PrefillSlm(slm_, &cache, prompt.subspan(static_cast<size_t>(st.prompt_reused)),
                                                     logits.data(), hidden.data(), &ctx, opts));
    if (!read) {  // cancelled while reading the prompt: the context keeps what was read
      st.slm_prefill_s = SecondsSince(t);
      st.stop = "stopped";
      ReturnSlmCache(context, std::move(cache), prompt, cache.size());
      return out.Finish();
    }
    PadSlmPass(t, opts.sim_slm_s);
    st.slm_prefill_s = SecondsSince(t);
  }
  double slm_s = st.slm_prefill_s;  // charged to the next emitted token
  // The calls' account under the price model (route_policy.h): the LLM holds what it held of
  // the prompt, then everything before the last routed position.
  CallAccount account;
  if (joint && (opts.policy == RoutePolicy::kCost || opts.cost_budget > 0)) account.held = llm_->HeldPrefix(prompt);
  for (bool more = true; more;) {
    TokenEvent first;
    if (router_) {
      const auto t = Clock::now();
      first.confidence = router_->Confidence(hidden.data(), logits.data(), V, pool_);
      first.router_s = SecondsSince(t);
      st.router_s += first.router_s;
    }
    first.slm_s = slm_s;
    std::vector<int32_t> toks;
    TokenSource source = TokenSource::kSlm;
    const int n = static_cast<int>(std::min<int64_t>(opts.route_span, opts.max_tokens - st.generated));
    const int64_t at = static_cast<int64_t>(seq.size());
    if (joint && account.Routes(opts.policy, opts.threshold, opts.price_ratio, opts.cost_budget, first.confidence, at, n)) {
      account.Call(opts.price_ratio, at, n);
      auto reply = call_llm(n, &first.llm_s);
      if (!reply.ok() && Cancelled(opts)) {  // cancelled while the call ran: no token for it
        st.stop = "stopped";
        break;
      }
      first.stall_s = first.llm_s;
      first.spec = SpecOutcome::kBlocking;
      if (reply.ok() && !reply->tokens.empty()) {
        toks = reply->tokens;
        if (static_cast<int>(toks.size()) > n) toks.resize(static_cast<size_t>(n));
        source = TokenSource::kLlm;
      } else {
        source = TokenSource::kFallback;
        first.llm_error = reply.ok() ? "the LLM returned no tokens" : reply.status().message();
      }
    }
    if (toks.empty()) toks.push_back(sampler.Sample(logits.data(), seq));  // draw keyed by position
    size_t fed = 0;
    for (size_t k = 0; k < toks.size() && more; ++k) {
      TokenEvent ev = k == 0 ? first : TokenEvent{};
      ev.id = toks[k];
      ev.source = source;
      seq.push_back(ev.id);
      ++fed;
      more = out.Emit(std::move(ev));
    }
    if (!more) break;
    const auto t = Clock::now();
    SequenceInput in{&cache, std::span<const int32_t>(seq).last(fed), OutputRows::kLast, logits.data(),
                     hidden.data()};
    TLR_RETURN_IF_ERROR(slm_.Forward({&in, 1}, &ctx));
    PadSlmPass(t, opts.sim_slm_s);
    slm_s = SecondsSince(t);
    st.slm_decode_s += slm_s;
    ++st.slm_steps;
    st.slm_rows += static_cast<int64_t>(fed);
  }
  const int64_t held = cache.size();
  ReturnSlmCache(context, std::move(cache), seq, held);
  return out.Finish();
}

}  // namespace tlr
