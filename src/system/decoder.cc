// The collaborative decoding loop (see decoder.h).
#include "system/decoder.h"

#include <algorithm>
#include <chrono>

namespace tlr {

namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
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

CollabDecoder::CollabDecoder(const Model& slm, Router* router, LlmBackend* llm, ThreadPool* pool)
    : slm_(slm), router_(router), llm_(llm), pool_(pool) {}

Expected<DecodeStats> CollabDecoder::Generate(std::span<const int32_t> prompt, const DecodeOptions& opts,
                                              const std::function<bool(const TokenEvent&)>& on_token) {
  if (prompt.empty()) return Status::Error("the prompt is empty");
  if (opts.route_span < 1) return Status::Error("the route span must be at least 1");
  if (opts.max_tokens < 0) return Status::Error("max tokens must not be negative");
  TLR_RETURN_IF_ERROR(opts.sampling.Validate());
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
  const Tokenizer& tok = slm_.tokenizer();
  const int64_t V = slm_.config().n_vocab;
  const auto t0 = Clock::now();
  DecodeStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  st.stop = "max_tokens";
  StreamDecoder text(tok);
  double first_at = -1, last_at = 0;
  // Emits one token; returns whether generation goes on.
  auto emit = [&](TokenEvent ev) {
    ev.end = tok.IsEndOfGeneration(ev.id);
    ++st.generated;
    if (!ev.end) ev.text = text.Push(ev.id);
    if (ev.end || st.generated >= opts.max_tokens) ev.text += text.Flush();
    ev.at_s = Since(t0);
    if (first_at < 0) first_at = ev.at_s;
    last_at = ev.at_s;
    if (ev.source == TokenSource::kLlm) ++st.routed;
    if (ev.source == TokenSource::kFallback) ++st.fallbacks;
    if (on_token && !on_token(ev)) {
      st.stop = "stopped";
      return false;
    }
    if (ev.end) {
      st.stop = "eos";
      return false;
    }
    return st.generated < opts.max_tokens;
  };
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  auto finish = [&]() {
    st.total_s = Since(t0);
    st.ttft_s = first_at < 0 ? 0 : first_at;
    st.tbt_s = st.generated > 1 ? (last_at - first_at) / (st.generated - 1) : 0;
    return st;
  };
  if (opts.max_tokens == 0) return finish();

  if (opts.mode == DecodeMode::kLargeOnly) {
    for (bool more = true; more;) {
      const int n = std::min<int64_t>(opts.route_span, opts.max_tokens - st.generated);
      const auto t = Clock::now();
      auto reply = llm_->Next(seq, n, opts.sampling);
      const double llm_s = Since(t);
      st.llm_s += llm_s;
      ++st.llm_calls;
      if (!reply.ok()) return reply.status().WithPrefix("LLM");
      for (size_t k = 0; k < reply->tokens.size() && more; ++k) {
        TokenEvent ev;
        ev.id = reply->tokens[k];
        ev.source = TokenSource::kLlm;
        ev.llm_s = k == 0 ? llm_s : 0;
        seq.push_back(ev.id);
        more = emit(std::move(ev));
      }
      if (reply->tokens.empty()) return Status::Error("the LLM returned no tokens");
    }
    return finish();
  }

  TLR_ASSIGN_OR_RETURN(KvCache cache, slm_.NewCache(static_cast<int64_t>(prompt.size()) +
                                                    opts.max_tokens + opts.route_span + 1));
  ForwardContext ctx(pool_);
  std::vector<float> logits(V), hidden(slm_.config().n_embd);
  Sampler sampler(opts.sampling, static_cast<int32_t>(V));
  {
    const auto t = Clock::now();
    SequenceInput in{&cache, prompt, OutputRows::kLast, logits.data(), hidden.data()};
    TLR_RETURN_IF_ERROR(slm_.Forward({&in, 1}, &ctx));
    st.slm_prefill_s = Since(t);
  }
  double slm_s = st.slm_prefill_s;  // charged to the next emitted token
  for (bool more = true; more;) {
    TokenEvent first;
    if (router_) {
      const auto t = Clock::now();
      first.confidence = router_->Confidence(hidden.data(), logits.data(), V, pool_);
      first.router_s = Since(t);
      st.router_s += first.router_s;
    }
    first.slm_s = slm_s;
    std::vector<int32_t> toks;
    TokenSource source = TokenSource::kSlm;
    if (joint && first.confidence < opts.threshold) {
      const int n = std::min<int64_t>(opts.route_span, opts.max_tokens - st.generated);
      const auto t = Clock::now();
      auto reply = llm_->Next(seq, n, opts.sampling);
      first.llm_s = Since(t);
      st.llm_s += first.llm_s;
      ++st.llm_calls;
      if (reply.ok() && !reply->tokens.empty()) {
        toks = reply->tokens;
        source = TokenSource::kLlm;
      } else {
        source = TokenSource::kFallback;
      }
    }
    if (toks.empty()) toks.push_back(sampler.Sample(logits.data(), seq));
    size_t fed = 0;
    for (size_t k = 0; k < toks.size() && more; ++k) {
      TokenEvent ev = k == 0 ? first : TokenEvent{};
      ev.id = toks[k];
      ev.source = source;
      seq.push_back(ev.id);
      ++fed;
      more = emit(std::move(ev));
    }
    if (!more) break;
    const auto t = Clock::now();
    SequenceInput in{&cache, std::span<const int32_t>(seq).last(fed), OutputRows::kLast, logits.data(),
                     hidden.data()};
    TLR_RETURN_IF_ERROR(slm_.Forward({&in, 1}, &ctx));
    slm_s = Since(t);
    st.slm_decode_s += slm_s;
    ++st.slm_steps;
  }
  return finish();
}

}  // namespace tlr
