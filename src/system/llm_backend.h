// The decoder's view of the large model (system layer): "given everything so far, the next
// token(s)". Each backend keeps what the LLM has already ingested and sends or computes only
// the new tokens: the in-process backend keeps a KV cache and prefills the difference; remote
// backends (the server issue) keep the server's session in sync the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"
#include "util/status.h"

namespace tlr {

class ThreadPool;

struct LlmReply {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each returned token under the LLM
  int64_t ingested = 0;         // context tokens the LLM had to read for this call
};

class LlmBackend {
 public:
  virtual ~LlmBackend() = default;
  // The next n tokens after `context` (prompt and everything generated so far).
  virtual Expected<LlmReply> Next(std::span<const int32_t> context, int n,
                                  const SamplerParams& sampling) = 0;
  // Forget the conversation (the next call starts from scratch).
  virtual void Reset() = 0;
  // The tokenizer's fingerprint (the device refuses an LLM whose vocabulary differs).
  virtual uint64_t vocab_fingerprint() const = 0;
  virtual std::string name() const = 0;
};

// The LLM in this process: its own KV cache, delta prefill by longest common prefix.
class InProcessLlm : public LlmBackend {
 public:
  // `n_ctx`: the cache size (prompt + generated tokens must fit).
  InProcessLlm(const Model& llm, ThreadPool* pool, int64_t n_ctx);
  Expected<LlmReply> Next(std::span<const int32_t> context, int n, const SamplerParams& sampling) override;
  void Reset() override;
  uint64_t vocab_fingerprint() const override { return llm_.tokenizer().Fingerprint(); }
  std::string name() const override { return "in-process"; }
  // Tokens ingested over the backend's life (for tests of the delta behaviour).
  int64_t total_ingested() const { return total_ingested_; }

 private:
  const Model& llm_;
  ThreadPool* pool_;
  int64_t n_ctx_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> held_;  // the tokens in cache_
  std::vector<float> logits_;
  std::unique_ptr<Sampler> sampler_;
  uint64_t sampler_seed_ = 0;
  int64_t total_ingested_ = 0;
};

// Adds a simulated network round trip (rtt +- uniform jitter) to every call of another
// backend: evaluating an in-process LLM as if it were remote (--sim-rtt without --server).
class DelayedLlm : public LlmBackend {
 public:
  DelayedLlm(LlmBackend* inner, double rtt_s, double jitter_s, uint64_t seed);
  Expected<LlmReply> Next(std::span<const int32_t> context, int n, const SamplerParams& sampling) override;
  void Reset() override { inner_->Reset(); }
  uint64_t vocab_fingerprint() const override { return inner_->vocab_fingerprint(); }
  std::string name() const override { return inner_->name() + " (simulated network)"; }

 private:
  LlmBackend* inner_;
  double rtt_s_, jitter_s_;
  uint64_t state_;
};

}  // namespace tlr
