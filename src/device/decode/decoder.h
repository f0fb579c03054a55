// The collaborative decoder (device layer): the SLM decodes; per token a router decides
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
//
// The asynchronous pipeline (PipelineOptions, on by default; decoder_pipeline.cc): at a routed
// position the decoder submits the LLM call and goes on decoding from the SLM's own candidate
// (and, with branches, from its next candidates too, batched in one SLM pass); routed positions
// inside that speculation submit their own calls. A reply equal to the assumed token confirms
// the work; any other token cuts the speculation there and decoding continues from the LLM's
// token. A call may bring `lookahead` tokens of the LLM's own continuation: a later routed
// position whose context is exactly that draft's takes its token with no call. Only confirmed
// tokens reach on_token, and they are exactly those of the blocking loop (pipeline off): the
// SLM, the router and sampling are functions of the context (draws keyed by seed and
// position), and so are the LLM's replies. The pipeline changes when tokens arrive, never which.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "device/decode/route_policy.h"
#include "device/llm/llm_backend.h"
#include "model/model.h"
#include "model/sampler.h"
#include "routing/router.h"
#include "util/status.h"

namespace tlr {

class ThreadPool;

enum class DecodeMode { kJoint, kSmallOnly, kLargeOnly };
std::string_view DecodeModeName(DecodeMode m);
Expected<DecodeMode> ParseDecodeMode(std::string_view name);  // joint, small_only, large_only

enum class TokenSource { kSlm, kLlm, kFallback };
std::string_view TokenSourceName(TokenSource s);  // "SLM", "LLM", "FALLBACK"

// What became of a routed position (TokenEvent::spec).
enum class SpecOutcome {
  kNone,      // not routed (or a later token of a routed span)
  kHit,       // the LLM's token was the SLM's own candidate: the speculation after it stood
  kBranch,    // the LLM's token was one of the other speculated candidates (that branch stood)
  kMiss,      // the LLM's token was none of them: the speculation after it was discarded
  kDraft,     // taken from an LLM lookahead draft, no call
  kFallback,  // the call failed: the SLM's own token (FALLBACK)
  kBlocking,  // pipeline off: the decoder waited for the call
};
std::string_view SpecOutcomeName(SpecOutcome o);  // "none", "hit", "branch", "miss", "draft", ...

struct PipelineOptions {
  bool enabled = true;       // off: every routed token blocks until the LLM answers
  int depth = 32;            // speculative tokens a line may run ahead of its oldest unanswered
                             // routed position
  int branches = 4;          // SLM candidates speculated on at the oldest unanswered position
  int lookahead = 8;         // most LLM continuation tokens asked for with a routed call (the
                             // ask adapts to how much of earlier drafts stood)
  // LLM tokens the pipeline may ask for per routed token: answers, lookahead and speculative
  // calls, cancelled ones included (LlmSpend in speculation.h). 0: no limit ("auto", as fast
  // as possible). At least 1 otherwise.
  double llm_budget = 1.25;
  Status Validate() const;
};

// The speculative tail of the main line while it waits for the LLM (for a UI's provisional
// text): everything after the confirmed tokens.
struct ProvisionalEvent {
  std::vector<int32_t> ids;
  std::vector<bool> pending;  // per token: a routed position whose call has not answered
  std::string text;           // the tail as text (after what was emitted)
};

struct DecodeOptions {
  DecodeMode mode = DecodeMode::kJoint;
  float threshold = 0.5f;    // route when confidence < threshold (the cost policy: that bar
                             // for the cheapest call; route_policy.h)
  RoutePolicy policy = RoutePolicy::kThreshold;
  double price_ratio = 4;    // the cost policy's price of an LLM output token, in input tokens
  double cost_budget = 0;    // most the calls of one generation may cost, in input-token units
                             // under that price (route_policy.h); 0: no limit
  int route_span = 1;        // tokens per LLM call
  int max_tokens = 128;
  SamplerParams sampling;    // for both models (greedy by default)
  PipelineOptions pipeline;
  // Simulated device pace: every SLM forward pass (prefill, decode step) takes at least this
  // long (0: off). Shows a 0.5B-class device's timing with a tiny SLM; outputs are unchanged.
  double sim_slm_s = 0;
  // Set from another thread to stop (checked at least every 50 ms, also while waiting).
  const std::atomic<bool>* cancel = nullptr;
  // Called when the provisional tail changes (pipeline on; may be empty).
  std::function<void(const ProvisionalEvent&)> on_provisional;
};

// One generated token, as it is emitted.
struct TokenEvent {
  int32_t id = 0;
  std::string text;          // complete UTF-8 (may be empty while a character is split)
  TokenSource source = TokenSource::kSlm;
  float confidence = -1.0f;  // the router's; -1 when the router did not run (large_only, or
                             // later tokens of a routed span)
  bool end = false;          // the end-of-generation token (text empty)
  SpecOutcome spec = SpecOutcome::kNone;  // for the first token of a routed call or draft
  double slm_s = 0, router_s = 0, llm_s = 0;  // time spent on this token (llm_s: its call's
                                              // round trip, overlapping other work when pipelined)
  double stall_s = 0;        // time the decoder had nothing to do but wait for the LLM, since
                             // the token before
  int64_t wasted = 0;        // SLM token steps discarded when this token was decided
  double at_s = 0;           // since the start of Generate
  std::string llm_error;     // FALLBACK: why the LLM call failed
};

struct DecodeStats {
  int64_t prompt_tokens = 0;
  int64_t prompt_reused = 0;   // prompt tokens already in the SLM's cache (SlmContext), not prefilled
  int64_t generated = 0;     // tokens emitted, including an end-of-generation token
  int64_t routed = 0;        // tokens produced by the LLM
  int64_t llm_calls = 0;     // calls submitted (including ones cancelled by the pipeline)
  int64_t cancelled_calls = 0;  // calls whose positions the pipeline discarded
  int64_t fallbacks = 0;     // tokens the SLM produced because the LLM call failed
  int64_t slm_steps = 0;     // SLM decode passes (after the prefill; one pass may batch lines)
  int64_t slm_rows = 0;      // token rows those passes computed
  // Pipeline: routed positions answered by a call, and how many of those kept speculative work
  // (the LLM's token was the SLM's own candidate, or another candidate's branch).
  int64_t spec_resolved = 0, spec_hits = 0, spec_branch_hits = 0;
  int64_t lookahead_used = 0;     // routed tokens taken from lookahead drafts (no call)
  int64_t wasted_slm_steps = 0;   // SLM token rows computed and then discarded
  int64_t max_in_flight = 0;      // most calls outstanding at once
  double ttft_s = 0;         // start -> first token
  double tbt_s = 0;          // mean time between tokens after the first
  double slm_prefill_s = 0, slm_decode_s = 0, router_s = 0, llm_s = 0, total_s = 0;
  double stall_s = 0;        // time spent waiting for the LLM with nothing else to do
  // The LLM's work for this generation: tokens it prefilled and generated (routed ones,
  // lookahead, and calls cancelled or missed) and its forward time (-1: not reported).
  LlmWork llm_work;
  std::string stop;          // "eos", "max_tokens", "stopped"
  double routed_pct() const { return generated ? 100.0 * routed / generated : 0.0; }
  // LLM tokens generated per routed token (0 when none was routed).
  double llm_generated_per_routed() const { return routed ? static_cast<double>(llm_work.generated) / routed : 0.0; }
  double tbt_slm_s() const { return slm_steps ? slm_decode_s / slm_steps : 0.0; }
  // Routed positions whose speculation stood, of those answered by a call (0 when none).
  double spec_hit_pct() const {
    return spec_resolved ? 100.0 * (spec_hits + spec_branch_hits) / spec_resolved : 0.0;
  }
};

// The SLM's state carried from one generation to the next (a conversation, a prompt cache
// slot): its KV cache and the tokens the cache holds. A generation given one reuses the
// longest prefix the prompt shares with it (only the rest is prefilled; at least the prompt's
// last token is read again, for its outputs) and leaves it holding the prompt and the emitted
// tokens that were fed to the SLM. A context without a cache gets one on first use, of `n_ctx`
// positions (at least what the generation needs) paged in as used; one whose cache is too small
// for the generation moves what it holds into a larger one (no recomputation). A generation
// that fails leaves it empty.
struct SlmContext {
  KvCache cache;                 // KvCache() until first used
  std::vector<int32_t> tokens;   // what `cache` holds
  int64_t n_ctx = 0;             // positions of a cache made here (0: what the generation needs)
  bool has_cache() const { return cache.n_ctx() > 0; }
  void Clear() {
    cache = KvCache();
    tokens.clear();
  }
};

class CollabDecoder {
 public:
  // `router` may be null only for large_only; `llm` may be null for small_only. Neither is
  // owned. Fails at Generate when the router does not fit the SLM or the vocabularies differ.
  CollabDecoder(const Model& slm, Router* router, LlmBackend* llm, ThreadPool* pool);

  // Generates after `prompt`, calling on_token for every token (return false to stop). With
  // `context`, the SLM's cache comes from it and goes back to it (see SlmContext).
  Expected<DecodeStats> Generate(std::span<const int32_t> prompt, const DecodeOptions& opts,
                                 const std::function<bool(const TokenEvent&)>& on_token,
                                 SlmContext* context = nullptr);

 private:
  // The loops behind Generate, after the checks (decoder.cc: large_only and the blocking joint
  // loop; decoder_pipeline.cc: the pipelined joint loop).
  Expected<DecodeStats> GenerateBlocking(std::span<const int32_t> prompt, const DecodeOptions& opts,
                                         const std::function<bool(const TokenEvent&)>& on_token,
                                         SlmContext* context);
  Expected<DecodeStats> GeneratePipelined(std::span<const int32_t> prompt, const DecodeOptions& opts,
                                          const std::function<bool(const TokenEvent&)>& on_token,
                                          SlmContext* context);
  const Model& slm_;
  Router* router_;
  LlmBackend* llm_;
  ThreadPool* pool_;
};

}  // namespace tlr
