// BatchScheduler (server layer, part of LlmEngine): continuous batching on one worker thread
// that owns the model's forward context. Every call waiting when the model is free joins one
// Forward pass: first one decode step of every generating call, then prefill chunks in arrival
// order up to max_batch_tokens, so a long prompt neither blocks the decodes nor starves behind
// them. Calls past their deadline (the device's timeout) are dropped: unrun if still waiting
// for their first pass, else between passes.
//
// Priority: a call's low-priority tail (a device's lookahead, BatchCall::low_priority) is
// generated only while no other call is waiting or running; when another call arrives, the
// tail is cut where it stands and the call answers with what it has. On a CPU every sequence
// in a pass costs time, so lookahead that shared passes with routed calls would slow them.
//
// Threads: Run is called by request threads, each holding the lock of the session it runs
// on, and blocks until the call is done; the worker writes that session's cache and tokens
// while its caller waits (the hand-over goes through the queue's and the call's mutexes).
// Between calls the worker runs `housekeeping` about every 5 s (the engine's TTL sweep).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/prefix_constraint.h"
#include "server/llm_engine.h"
#include "server/session_store.h"

namespace tlr {

// One call for the scheduler: ingest `feed` into a session whose cache exists, then generate.
struct BatchCall {
  EngineSession* session = nullptr;  // locked by the caller for the whole call
  std::vector<int32_t> feed;         // tokens to ingest (at least one)
  int n = 1;                         // tokens to generate (0: only with prompt_scores)
  int low_priority = 0;              // the last this many of the n are a hint (lookahead): made
                                     // only while no other call is in the scheduler, else cut
  SamplerParams sampling;            // validated
  int top_logprobs = 0;
  const LlmEngine::TokenCallback* on_token = nullptr;  // may be null
  double deadline_s = 0;             // no pass starts after this (0: never); the device has gone
  // Teacher forcing: one PromptPosition per fed token, with this many alternatives. With n 0
  // the call only scores.
  std::vector<PromptPosition>* prompt_scores = nullptr;
  int prompt_top = 0;
  // Token healing (model/prefix_constraint.h): the reply spells these bytes first, with only
  // tokens that agree with them; the tokens spelling them come on top of the n
  // (EngineReply::spelled says how many).
  std::string heal;
};

struct BatchOutcome {
  EngineReply reply;
  std::string error;     // empty on success
  bool overload = false; // failed because the server stops or the call timed out (503)
  bool bad_request = false;  // failed because of what the call asked (400)
  bool started = false;  // took part in a forward pass (the cache may be partly written)
};

class BatchScheduler {
 public:
  // `pool` runs the forward passes (may be null); `metrics` may be null (the engine declares
  // the metrics it adds to).
  BatchScheduler(const Model& model, ThreadPool* pool, int64_t max_batch_tokens, Metrics* metrics,
                 std::function<void()> housekeeping);
  ~BatchScheduler();  // fails the calls still queued or running (overload) and joins the worker
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  BatchOutcome Run(BatchCall call);
  // Several calls at once (they share passes); waits for all of them.
  std::vector<BatchOutcome> RunAll(std::vector<BatchCall> calls);

  int64_t prefill_tokens() const { return prefill_tokens_.load(); }
  int64_t decode_tokens() const { return decode_tokens_.load(); }

 private:
  struct Job;
  void WorkerLoop();
  void Step(std::vector<Job*>& active);

  // Made at the first call that heals (a piece per token).
  std::once_flag constraint_once_;
  std::unique_ptr<PrefixConstraint> constraint_;
  const Model& model_;
  ThreadPool* pool_;
  const int64_t max_batch_tokens_;
  Metrics* metrics_;
  std::function<void()> housekeeping_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Job*> queue_;
  bool stop_ = false;
  std::atomic<int64_t> prefill_tokens_{0}, decode_tokens_{0};
  std::unique_ptr<ForwardContext> ctx_;  // the worker's
  std::thread worker_;
};

}  // namespace tlr
