// In-process LLM backend (see llm_backend.h).
#include "system/llm_backend.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace tlr {

namespace {

float LogProb(const float* logits, int64_t n, int32_t tok) { return logits[tok] - LogSumExp(logits, n); }

}  // namespace

InProcessLlm::InProcessLlm(const Model& llm, ThreadPool* pool, int64_t n_ctx)
    : llm_(llm), pool_(pool), n_ctx_(n_ctx) {}

void InProcessLlm::Reset() {
  held_.clear();
  if (cache_) cache_->Truncate(0);
  sampler_.reset();
}

Expected<LlmReply> InProcessLlm::Next(std::span<const int32_t> context, int n,
                                      const SamplerParams& sampling) {
  if (context.empty()) return Status::Error("the LLM needs at least one context token");
  if (n < 1) return Status::Error("ask the LLM for at least one token");
  if (static_cast<int64_t>(context.size()) + n > n_ctx_) {
    return Status::Error("context of " + std::to_string(context.size()) + " + " + std::to_string(n) +
                         " tokens exceeds the LLM cache of " + std::to_string(n_ctx_));
  }
  if (!cache_) {
    TLR_ASSIGN_OR_RETURN(KvCache c, llm_.NewCache(n_ctx_));
    cache_ = std::make_unique<KvCache>(std::move(c));
  }
  if (!sampler_ || sampling.seed != sampler_seed_ || sampling.temperature != sampler_->params().temperature) {
    sampler_ = std::make_unique<Sampler>(sampling, static_cast<int32_t>(llm_.config().n_vocab));
    sampler_seed_ = sampling.seed;
  }
  // Keep the longest common prefix; always re-read at least the last token (its logits are
  // not kept between calls).
  size_t common = 0;
  while (common < held_.size() && common < context.size() && held_[common] == context[common]) ++common;
  common = std::min(common, context.size() - 1);
  cache_->Truncate(static_cast<int64_t>(common));
  held_.assign(context.begin(), context.begin() + common);
  const int64_t V = llm_.config().n_vocab;
  logits_.resize(V);
  ForwardContext ctx(pool_);
  LlmReply reply;
  reply.ingested = static_cast<int64_t>(context.size() - common);
  SequenceInput in{cache_.get(), context.subspan(common), OutputRows::kLast, logits_.data(), nullptr};
  Status s = llm_.Forward({&in, 1}, &ctx);
  if (!s.ok()) {
    Reset();
    return s;
  }
  held_.assign(context.begin(), context.end());
  total_ingested_ += reply.ingested;
  std::vector<int32_t> history(context.begin(), context.end());
  for (int k = 0; k < n; ++k) {
    const int32_t tok = sampling.temperature <= 0 ? ArgMax(logits_.data(), V)
                                                  : sampler_->Sample(logits_.data(), history);
    reply.tokens.push_back(tok);
    reply.logprobs.push_back(LogProb(logits_.data(), V, tok));
    history.push_back(tok);
    if (k + 1 == n || llm_.tokenizer().IsEndOfGeneration(tok)) break;
    SequenceInput step{cache_.get(), {&reply.tokens.back(), 1}, OutputRows::kLast, logits_.data(), nullptr};
    s = llm_.Forward({&step, 1}, &ctx);
    if (!s.ok()) {
      Reset();
      return s;
    }
    held_.push_back(tok);
  }
  return reply;
}

DelayedLlm::DelayedLlm(LlmBackend* inner, double rtt_s, double jitter_s, uint64_t seed)
    : inner_(inner), rtt_s_(rtt_s), jitter_s_(jitter_s), state_(seed * 0x9e3779b97f4a7c15ull + 1) {}

Expected<LlmReply> DelayedLlm::Next(std::span<const int32_t> context, int n, const SamplerParams& sampling) {
  state_ ^= state_ << 13;
  state_ ^= state_ >> 7;
  state_ ^= state_ << 17;
  const double u = static_cast<double>(state_ >> 11) / 9007199254740992.0;  // [0, 1)
  const double d = std::max(0.0, rtt_s_ + jitter_s_ * (2 * u - 1));
  std::this_thread::sleep_for(std::chrono::duration<double>(d));
  return inner_->Next(context, n, sampling);
}

}  // namespace tlr
