// The device's prompt cache (device layer): a bounded set of conversation contexts, as
// llama.cpp's server keeps slots. A DeviceContext is the SLM's (SlmContext: a KV cache and the
// tokens it holds) and the LLM backend the conversation talks to (its server session, or the
// in-process LLM's own cache), so neither side prefills the conversation again. A generation
// takes the context that shares the longest prefix with its prompt out of the pool, runs in it
// (only the rest of the prompt is prefilled) and gives it back. Several conversations at once
// each keep their own; past `max_slots` contexts or `budget_bytes` of SLM KV memory, the least
// recently used are dropped.
//
// Memory: a context's cache is allocated for `n_ctx` positions but paged in as positions are
// written (KvMemory::kOnDemand), so what it costs is counted as positions held x bytes per
// position.
//
// Thread-safety: every method may be called from any thread; a taken context belongs to its
// caller until it is given back.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "device/decode/decoder.h"
#include "device/session/llm_factory.h"

namespace tlr {

struct ContextPoolOptions {
  int max_slots = 4;                     // contexts kept (0: none, every generation from scratch)
  uint64_t budget_bytes = 1ull << 30;    // KV memory of the kept contexts
  int64_t n_ctx = 4096;                  // positions of a context's cache (the longest conversation)
};

// One conversation's state on the device.
struct DeviceContext {
  SlmContext slm;
  // The LLM backend of the conversation (null until a generation needed one), and what it was
  // made for: a generation reuses it only for the same target (`llm_owner`, LlmTarget::id) and
  // when its in-process cache is large enough (`llm_n_ctx`). `llm_model` keeps an in-process
  // LLM alive as long as the backend that reads it (the caller may free its target first).
  // Declared before `llm`: destroyed after it.
  std::shared_ptr<const Model> llm_model;
  std::unique_ptr<LlmStack> llm;
  uint64_t llm_owner = 0;
  int64_t llm_n_ctx = 0;
};

class DeviceContextPool {
 public:
  // `bytes_per_position`: KV bytes one position takes (KvCache::BytesPerPosition).
  DeviceContextPool(const ContextPoolOptions& opts, uint64_t bytes_per_position);

  // The kept context sharing the longest prefix with `prompt` (ties: the most recently used),
  // or a new empty one (its cache is made on first use with opts.n_ctx positions). Never null.
  std::unique_ptr<DeviceContext> Take(std::span<const int32_t> prompt);
  // Keeps a context for later generations, then drops the least recently used ones past the
  // slot count and the budget. A context without a cache is dropped.
  void Give(std::unique_ptr<DeviceContext> context);
  // Drops every kept context.
  void Clear();

  int slots() const;          // contexts kept
  uint64_t bytes() const;     // their KV memory (positions held x bytes per position)
  const ContextPoolOptions& options() const { return opts_; }

 private:
  struct Slot {
    std::unique_ptr<DeviceContext> context;
    std::chrono::steady_clock::time_point last_used;
  };
  uint64_t BytesOf(const DeviceContext& c) const;

  const ContextPoolOptions opts_;
  const uint64_t bytes_per_position_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
};

}  // namespace tlr
