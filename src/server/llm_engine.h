// LlmEngine (server layer): the server's model runner. Sessions with their own KV cache,
// ingesting only the tokens they have not seen, and continuous batching: every call waiting
// when the model is free joins one Forward pass (delta prefills and decode steps mixed), so
// many devices share each pass over the weights.
//
// The parts: the session store (session_store.h: who holds which KV cache, the budget, the
// TTL) and the batch scheduler (batch_scheduler.h: the worker thread and its passes); this
// class checks each call, prepares its session and hands it to the scheduler.
//
// Threads: HTTP handlers call CreateSession / Next / Complete and block until their answer;
// one worker thread owns the model and runs the batches. A session serves one call at a time
// (later calls for it wait their turn); different sessions proceed together.
//
// Scheduling: each pass first takes one decode step of every generating call, then fills the
// rest of the token budget (max_batch_tokens) with prefill chunks in arrival order, so a long
// prompt neither blocks the decodes nor starves behind them.
//
// Memory: KV bytes are counted per session (positions ever written x bytes per position). A
// call that would pass the budget first evicts idle sessions' caches, least recently used
// first (the session stays; its next call gets a conflict saying it holds 0 tokens and the
// device resends). Idle sessions expire after the TTL.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"
#include "net/metrics.h"

namespace tlr {

class ThreadPool;
class SessionStore;
class BatchScheduler;
struct EngineSession;

struct EngineLimits {
  int64_t max_sessions = 1024;
  int64_t max_context = 4096;         // tokens a session can hold (its KV cache size)
  uint64_t kv_budget_bytes = 4ull << 30;
  int max_tokens_per_call = 256;      // n of one next-token call / max_tokens of a completion
  double session_ttl_s = 600;         // idle sessions are deleted after this
  int64_t max_batch_tokens = 512;     // tokens per forward pass
  int prompt_cache_slots = 0;         // most KV caches reused by the OpenAI endpoints (by prefix);
                                      // 0: bounded only by the KV budget (and max_sessions)
  int recent_replies = 16;            // per session, for request_id idempotency
  // A conversation whose context begins as another idle cache's of the same client does (an
  // app's system prompt sent by every device; a resync after eviction) starts from a copy of
  // that prefix's KV instead of prefilling it: native sessions from any session or prompt-cache
  // slot, new prompt-cache slots likewise. Off: each conversation prefills its own.
  bool share_prefixes = true;
  // Admission (admission.h): behind a queue, a new or resynced conversation's prefill must be
  // answered within this share of its time (the rest is left to warm sessions' routed tokens).
  double cold_share = 0.5;
  // While calls of conversations in progress are being refused, new or resynced conversations get
  // at most this share of the server's token rate (1: no bound; admission.h, ConversationPacer).
  double new_share = 0.1;
  bool calibrate = true;              // time two passes at start (admission's first pass time)
  double test_pass_delay_s = 0;       // tests only: every forward pass takes this much longer
};

// kBusy: refused at once because it could not be answered before its deadline (429 with
// Retry-After); kOverloaded: the server could not serve it (503).
enum class EngineCode { kOk, kBadRequest, kNotFound, kConflict, kBusy, kOverloaded, kInternal };

struct TopLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// What the model predicts at one position of a sequence it reads (teacher forcing): its argmax
// for the next token, the logprob of the sequence's actual next token (0 at the last position)
// and, when asked, the top k.
struct PromptPosition {
  int32_t argmax = 0;
  float logprob = 0;
  int32_t rank = 0;  // the next token's rank in the vocabulary (1: the argmax; 0 at the last)
  std::vector<TopLogprob> top;
};

// The LLM's work for one session since it was created: tokens prefilled from requests, tokens
// generated (answers, lookahead, and calls whose answer nobody read), and its share of
// forward-pass time (each pass's time split by the tokens each session had in it).
struct SessionWork {
  int64_t prefilled = 0, generated = 0;
  double forward_s = 0;
};

struct EngineReply {
  std::vector<int32_t> tokens;                 // the n asked for
  std::vector<int32_t> lookahead;              // generated after them when asked (Next only)
  int64_t version = 0;                         // the session's state counter after the call
  std::vector<float> logprobs;                 // of each returned token
  std::vector<std::vector<TopLogprob>> top;    // per token, when asked for
  int64_t position = 0;                        // tokens the session holds after the call
  int64_t prefilled = 0;                       // tokens the server ingested for this call
  double queue_s = 0, compute_s = 0;
  std::string finish = "length";               // "length", "eos" or "stop" (callback said so)
  int spelled = 0;                             // tokens that spelled NextRequest::heal (before the n)
  bool replayed = false;                       // a repeated request_id: the stored answer
  SessionWork session_work;                    // Next only: the session's, this call included
};

struct EngineResult {
  EngineCode code = EngineCode::kOk;
  std::string message;
  EngineReply reply;
  // On kConflict: what the session holds.
  int64_t held = 0;
  uint64_t held_hash = 0;
  int64_t version = 0;
  double retry_after_s = 0;  // kBusy, kOverloaded: when to come back (0: not known)
  std::string error_code;    // the HTTP error's code when not the one of `code` ("prefill_partial")
  bool ok() const { return code == EngineCode::kOk; }
};

// How long the caller of Complete waits, and what it learns while it does.
struct CallControl {
  double timeout_s = 0;                          // 0: no deadline
  bool first_token_only = false;                 // the timeout bounds the first token (streaming)
  std::function<bool()> client_gone;             // polled while the call waits (may be empty)
  std::function<void(bool admitted)> on_decided; // once admitted or refused (may be empty)
  std::string owner;                             // Complete: the client, as for CreateSession
};

struct NextRequest {
  std::string session, request_id;
  int64_t base = 0;              // tokens the device believes the session holds
  uint64_t prefix_hash = 0;      // TokenPrefixHash of those tokens
  std::vector<int32_t> append;   // new tokens (at least one)
  int n = 1;
  // Extra tokens of the LLM's continuation after the n, in the same passes (the device keeps
  // them as a draft). A hint: the server gives what fits its limits.
  int lookahead = 0;
  SamplerParams sampling;
  int top_logprobs = 0;
  // Token healing: bytes the reply spells first (the device held them back from its context,
  // device/llm/vocab_bridge.h); the tokens spelling them come before the n. At most 256.
  std::string heal;
  // The device gives up after this long (0: never). A call the server cannot answer in that
  // time is refused at once (kBusy); one still running when it passes is dropped (503).
  double timeout_s = 0;
  std::function<bool()> client_gone;  // polled while the call waits: true drops it (may be empty)
  // When not empty, a session of another owner is unknown to this call (the server sets it when
  // it has API keys: a session answers to the key that created it alone).
  std::string owner;
};

struct SessionInfo {
  std::string id;
  int64_t max_context = 0;
  int max_tokens_per_call = 0;
  double ttl_s = 0;
};

class LlmEngine {
 public:
  // `pool` runs the forward passes (may be null); `metrics` may be null.
  LlmEngine(const Model& model, ThreadPool* pool, const EngineLimits& limits, Metrics* metrics);
  ~LlmEngine();
  LlmEngine(const LlmEngine&) = delete;
  LlmEngine& operator=(const LlmEngine&) = delete;

  // `owner`: the client (its API key, else its address); prefixes are shared only within one.
  EngineResult CreateSession(SessionInfo* info, const std::string& owner = "");
  // With `owner` not empty, only a session of that owner's (NextRequest::owner).
  bool DeleteSession(const std::string& id, const std::string& owner = "");
  // Whether a session is open (not deleted, not expired by the last sweep).
  bool HasSession(const std::string& id) const;
  EngineResult Next(const NextRequest& req);

  // Generation from a whole prompt (the OpenAI endpoints): uses the prompt-cache slot sharing
  // the longest prefix with it, so a device resending a growing context is cheap.
  // on_token(id, logprob, top) returns false to stop (stop string found, client gone).
  using TokenCallback = std::function<bool(int32_t, float, const std::vector<TopLogprob>&)>;
  // prompt_scores (may be null): the prompt read whole (no cached prefix), one PromptPosition
  // per prompt token with `prompt_top` alternatives (vLLM's prompt_logprobs).
  EngineResult Complete(std::span<const int32_t> prompt, int max_tokens, const SamplerParams& sampling,
                        int top_logprobs, const TokenCallback& on_token,
                        std::vector<PromptPosition>* prompt_scores = nullptr, int prompt_top = 0,
                        const CallControl& control = {});

  // Teacher-forced scoring of several sequences (router labels): each in a cache of its own,
  // sharing forward passes; out[i] has one PromptPosition per token of seqs[i].
  // `control`: its client_gone, and its timeout once passed (0: none), drop the sequences between
  // passes; admission does not see the timeout (owner, first_token_only, on_decided unused).
  EngineResult Score(const std::vector<std::vector<int32_t>>& seqs, int top_logprobs,
                     std::vector<std::vector<PromptPosition>>* out, const CallControl& control = {});

  const Model& model() const { return model_; }
  const EngineLimits& limits() const { return limits_; }
  int64_t session_count() const;
  uint64_t kv_bytes() const;
  uint64_t kv_bytes_per_token() const { return bytes_per_token_; }
  // Tokens ingested into KV caches since start: from requests, and generated tokens fed back.
  int64_t prefill_tokens() const;
  int64_t decode_tokens() const;

 private:
  // Runs one call on a locked session: its cache is first cut to `keep` tokens, once admitted
  // (or, with `copy_from`, another locked session holding the same first `keep` tokens, replaced
  // by a copy of those: made before the call is queued, then `copy_lock` is let go, and swapped
  // in at admission).
  EngineResult Run(EngineSession* s, int64_t keep, std::vector<int32_t> feed, int n, const SamplerParams& sampling,
                   int top_logprobs, const TokenCallback& on_token, const CallControl& control, int low_priority = 0,
                   std::vector<PromptPosition>* prompt_scores = nullptr, int prompt_top = 0, std::string heal = {},
                   bool* admitted = nullptr, EngineSession* copy_from = nullptr,
                   std::unique_lock<std::mutex>* copy_lock = nullptr);
  void PublishGauges();

  const Model& model_;
  EngineLimits limits_;
  Metrics* metrics_;
  uint64_t bytes_per_token_ = 0;
  // The store outlives the scheduler, whose worker sweeps it.
  std::unique_ptr<SessionStore> store_;
  std::unique_ptr<BatchScheduler> scheduler_;
};

// Status code for an engine result (200, 400, 404, 409, 429, 503, 500).
int HttpStatusOf(EngineCode code);
std::string_view EngineCodeName(EngineCode code);  // "ok", "bad_request", ...

}  // namespace tlr
