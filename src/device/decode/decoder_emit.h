// What the decoder's loops share (device layer, internal to decoder*.cc): emitting a confirmed
// token (text, statistics, the stop rules), the simulated SLM pace, and waiting for an LLM call
// without busy polling while watching the caller's cancel flag.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "device/decode/decoder.h"
#include "util/clock.h"

namespace tlr::decoder_internal {

using Clock = std::chrono::steady_clock;

inline bool Cancelled(const DecodeOptions& o) { return o.cancel && o.cancel->load(std::memory_order_relaxed); }

// Sleeps out the rest of a simulated SLM pass that started at `start` (--sim-slm-ms).
inline void PadSlmPass(Clock::time_point start, double min_s) {
  if (min_s <= 0) return;
  std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(min_s * 1e9)));
}

class Emitter {
 public:
  Emitter(const Tokenizer& tok, const DecodeOptions& opts, const std::function<bool(const TokenEvent&)>& on_token,
          int64_t prompt_tokens)
      : tok_(tok), opts_(opts), on_token_(on_token), text_(tok), t0_(Clock::now()) {
    st_.prompt_tokens = prompt_tokens;
    st_.stop = "max_tokens";
  }
  DecodeStats& stats() { return st_; }
  const StreamDecoder& text() const { return text_; }

  // Emits one confirmed token; returns whether generation goes on.
  bool Emit(TokenEvent ev) {
    ev.end = tok_.IsEndOfGeneration(ev.id);
    ++st_.generated;
    if (!ev.end) ev.text = text_.Push(ev.id);
    if (ev.end || st_.generated >= opts_.max_tokens) ev.text += text_.Flush();
    ev.at_s = SecondsSince(t0_);
    if (first_at_ < 0) first_at_ = ev.at_s;
    last_at_ = ev.at_s;
    if (ev.source == TokenSource::kLlm) ++st_.routed;
    if (ev.source == TokenSource::kFallback) ++st_.fallbacks;
    if ((on_token_ && !on_token_(ev)) || Cancelled(opts_)) {
      st_.stop = "stopped";
      return false;
    }
    if (ev.end) {
      st_.stop = "eos";
      return false;
    }
    return st_.generated < opts_.max_tokens;
  }

  DecodeStats Finish() {
    st_.total_s = SecondsSince(t0_);
    st_.ttft_s = first_at_ < 0 ? 0 : first_at_;
    st_.tbt_s = st_.generated > 1 ? (last_at_ - first_at_) / static_cast<double>(st_.generated - 1) : 0;
    return st_;
  }

 private:
  const Tokenizer& tok_;
  const DecodeOptions& opts_;
  const std::function<bool(const TokenEvent&)>& on_token_;
  StreamDecoder text_;
  Clock::time_point t0_;
  DecodeStats st_;
  double first_at_ = -1, last_at_ = 0;
};

// The SLM cache a generation runs in: the context's (cut to the prefix it shares with the
// prompt, at most all but the prompt's last token; moved into a larger cache when the
// generation needs more room) or a new one of `need` positions. Returns the number of prompt
// tokens already in it; the context is left empty until ReturnSlmCache.
inline Expected<int64_t> TakeSlmCache(const Model& slm, SlmContext* context, std::span<const int32_t> prompt,
                                      int64_t need, KvCache* out) {
  if (context && context->has_cache()) {
    int64_t common = 0;
    const int64_t held = std::min<int64_t>(context->cache.size(), static_cast<int64_t>(context->tokens.size()));
    const int64_t limit = std::min<int64_t>(held, static_cast<int64_t>(prompt.size()) - 1);
    while (common < limit && context->tokens[static_cast<size_t>(common)] == prompt[static_cast<size_t>(common)]) ++common;
    if (context->cache.n_ctx() >= need) {
      *out = std::move(context->cache);
      out->Truncate(common);
    } else {
      *out = context->cache.Fork(common, std::max({need, 2 * context->cache.n_ctx(), context->n_ctx}));
    }
    context->Clear();
    return common;
  }
  const int64_t n_ctx = context ? std::max(need, context->n_ctx) : need;
  if (context) context->Clear();
  auto c = context ? slm.NewCache(n_ctx, KvMemory::kOnDemand) : slm.NewCache(n_ctx);
  if (!c.ok()) return c.status();
  *out = std::move(c).value();
  return 0;
}

// Reads `feed` into `cache` (the logits and hidden state of its last token into the buffers) in
// pieces, the cancel flag checked between them: a prompt of thousands of tokens takes seconds, and
// a cancel must be seen within a piece. Pieces are sized to take about 0.1 s at the pace of the
// last one, 64..512 tokens (the engine is batch-invariant: the same bits as one pass). False
// when cancelled part way; the cache then holds the pieces read.
inline Expected<bool> PrefillSlm(const Model& slm, KvCache* cache, std::span<const int32_t> feed, float* logits,
                                 float* hidden, ForwardContext* ctx, const DecodeOptions& opts) {
  constexpr size_t kMin = 64, kMax = 512;
  constexpr double kPieceS = 0.1;
  size_t piece = kMin;
  while (!feed.empty()) {
    if (Cancelled(opts)) return false;
    const size_t n = std::min(feed.size(), piece);
    const auto t = Clock::now();
    SequenceInput in{cache, feed.first(n), OutputRows::kLast, logits, hidden};
    TLR_RETURN_IF_ERROR(slm.Forward({&in, 1}, ctx));
    feed = feed.subspan(n);
    const double rate = static_cast<double>(n) / std::max(1e-6, SecondsSince(t));
    piece = static_cast<size_t>(std::clamp(rate * kPieceS, static_cast<double>(kMin), static_cast<double>(kMax)));
  }
  return true;
}

// Gives a generation's SLM cache back to the context: it holds tokens[0, valid).
inline void ReturnSlmCache(SlmContext* context, KvCache&& cache, std::span<const int32_t> tokens, int64_t valid) {
  if (!context) return;
  valid = std::clamp<int64_t>(valid, 0, std::min<int64_t>(cache.size(), static_cast<int64_t>(tokens.size())));
  cache.Truncate(valid);
  context->cache = std::move(cache);
  context->tokens.assign(tokens.begin(), tokens.begin() + valid);
}

}  // namespace tlr::decoder_internal
