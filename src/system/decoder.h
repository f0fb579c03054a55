// The collaborative decoder (system layer): the SLM decodes; per token a router decides
// whether the SLM's token stands or the LLM produces it (confidence < threshold -> LLM).
//
// The SLM's KV cache lives for the whole request: an LLM token is fed to the SLM as its next
// input like any other token, so nothing is ever prefilled twice. With route span k, one
// LLM call returns k tokens, which the SLM then ingests in one step. When the LLM backend
// fails (server down, timeout), the SLM's own token is used (source FALLBACK) and decoding
// goes on; the backend resyncs on its next call.
//
// Modes: joint (routing), small_only (the SLM alone; the router still runs, for the trace),
// large_only (the LLM alone; the SLM does not run).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"
#include "routing/router.h"
#include "system/llm_backend.h"
#include "util/status.h"

namespace tlr {

class ThreadPool;

enum class DecodeMode { kJoint, kSmallOnly, kLargeOnly };
std::string_view DecodeModeName(DecodeMode m);
Expected<DecodeMode> ParseDecodeMode(std::string_view name);  // joint, small_only, large_only

enum class TokenSource { kSlm, kLlm, kFallback };
std::string_view TokenSourceName(TokenSource s);  // "SLM", "LLM", "FALLBACK"

struct DecodeOptions {
  DecodeMode mode = DecodeMode::kJoint;
  float threshold = 0.5f;    // route when confidence < threshold
  int route_span = 1;        // tokens per LLM call
  int max_tokens = 128;
  SamplerParams sampling;    // for both models (greedy by default)
};

// One generated token, as it is emitted.
struct TokenEvent {
  int32_t id = 0;
  std::string text;          // complete UTF-8 (may be empty while a character is split)
  TokenSource source = TokenSource::kSlm;
  float confidence = -1.0f;  // the router's; -1 when the router did not run (large_only, or
                             // later tokens of a routed span)
  bool end = false;          // the end-of-generation token (text empty)
  double slm_s = 0, router_s = 0, llm_s = 0;  // time spent on this token
  double at_s = 0;           // since the start of Generate
};

struct DecodeStats {
  int64_t prompt_tokens = 0;
  int64_t generated = 0;     // tokens emitted, including an end-of-generation token
  int64_t routed = 0;        // tokens produced by the LLM
  int64_t llm_calls = 0;
  int64_t fallbacks = 0;     // tokens the SLM produced because the LLM call failed
  int64_t slm_steps = 0;     // SLM decode steps (after the prefill)
  double ttft_s = 0;         // start -> first token
  double tbt_s = 0;          // mean time between tokens after the first
  double slm_prefill_s = 0, slm_decode_s = 0, router_s = 0, llm_s = 0, total_s = 0;
  std::string stop;          // "eos", "max_tokens", "stopped"
  double routed_pct() const { return generated ? 100.0 * routed / generated : 0.0; }
  double tbt_slm_s() const { return slm_steps ? slm_decode_s / slm_steps : 0.0; }
};

class CollabDecoder {
 public:
  // `router` may be null only for large_only; `llm` may be null for small_only. Neither is
  // owned. Fails at Generate when the router does not fit the SLM or the vocabularies differ.
  CollabDecoder(const Model& slm, Router* router, LlmBackend* llm, ThreadPool* pool);

  // Generates after `prompt`, calling on_token for every token (return false to stop).
  Expected<DecodeStats> Generate(std::span<const int32_t> prompt, const DecodeOptions& opts,
                                 const std::function<bool(const TokenEvent&)>& on_token);

 private:
  const Model& slm_;
  Router* router_;
  LlmBackend* llm_;
  ThreadPool* pool_;
};

}  // namespace tlr
