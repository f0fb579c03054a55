// BatchScheduler (server layer, part of LlmEngine): continuous batching on one worker thread
// that owns the model's forward context. Every call waiting when the model is free joins one
// Forward pass: first one decode step of every generating call, then prefill chunks in the
// order of admission.h (warm calls before cold ones, then by deadline) up to the pass's token
// budget, so a long prompt neither blocks the decodes nor starves behind them.
//
// Deadlines and admission: a call with a deadline (the device's timeout) is admitted only when
// the scheduler projects it can answer in time (admission.h, from the pass times it measures);
// otherwise it is refused at once (BatchOutcome::refused, with a Retry-After) and nothing about
// its session changes. Each pass is sized so that it takes at most a quarter of the shortest
// timeout waiting. Calls still past their deadline (the model was wrong) or whose client went
// away are dropped: unrun if still waiting for their first pass, else between passes; what a
// dropped call computed stays in its session's cache (the session holds those tokens, so the
// device's next call is a plain delta).
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
#include "server/admission.h"
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
  double deadline_s = 0;             // seconds from now the caller waits (0: no deadline)
  bool deadline_first_token = false; // the deadline bounds the first token only (streaming)
  int64_t keep = -1;                 // once admitted, the session is cut to this many tokens first
  // With keep: once admitted, the session's cache and tokens are instead replaced by these (a
  // copy of another cache's first `keep` positions, holding the same tokens there).
  std::unique_ptr<KvCache> copy;
  std::vector<int32_t> copy_tokens;
  // Polled on the calling thread while the call waits: true when its client has gone (the call
  // is then dropped at the next pass boundary).
  std::function<bool()> client_gone;
  // Called on the calling thread once the call is admitted or refused (before it runs).
  std::function<void(bool admitted)> on_decided;
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
  bool overload = false; // failed because the server stops or the call ran past its deadline (503)
  bool bad_request = false;  // failed because of what the call asked (400)
  bool admitted = false; // passed admission (it may still have failed)
  bool refused = false;  // not admitted: it could not be answered in time (429); nothing ran
  bool too_long = false; // not admitted: it would not fit its time even on an idle server (400)
  bool partial = false;  // its prefill was taken in part before its deadline (503 prefill_partial)
  double retry_after_s = 0;  // refused or past its deadline: when to come back
  bool started = false;  // took part in a forward pass
  bool failed_pass = false;  // a forward pass failed: the session's cache may be partly written
};

struct SchedulerOptions {
  int64_t max_batch_tokens = 512;
  AdmissionPolicy admission;       // pass_tokens is set from max_batch_tokens
  bool calibrate = true;           // time two passes at start (admission needs a pass time)
  double test_pass_delay_s = 0;    // tests only: every pass takes this much longer
};

class BatchScheduler {
 public:
  // `pool` runs the forward passes (may be null); `metrics` may be null (the engine declares
  // the metrics it adds to).
  BatchScheduler(const Model& model, ThreadPool* pool, const SchedulerOptions& opts, Metrics* metrics,
                 std::function<void()> housekeeping);
  ~BatchScheduler();  // fails the calls still queued or running (overload) and joins the worker
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  BatchOutcome Run(BatchCall call);
  // Whether `call` would be admitted now (a dry run: nothing is queued). The engine asks before
  // it makes room in the KV budget, so that a call that will be refused evicts nobody.
  AdmissionVerdict Check(const BatchCall& call) const;
  // Several calls at once (they share passes); waits for all of them.
  std::vector<BatchOutcome> RunAll(std::vector<BatchCall> calls);

  int64_t prefill_tokens() const { return prefill_tokens_.load(); }
  int64_t decode_tokens() const { return decode_tokens_.load(); }
  // What one output row costs in tokens' work (the LM head over the layers), for PassTimeModel.
  static double HeadUnits(const ModelConfig& c);

 private:
  struct Job;
  void WorkerLoop();
  void Calibrate();
  void Step(std::vector<Job*>& active);
  // Ends a job (under no lock) and removes it from admitted_.
  void Finish(Job* j);
  double Now() const;
  // Tokens in the next pass: max_batch_tokens, fewer when a pass that size would take more
  // than a quarter of the shortest timeout waiting (under queue_mu_).
  int64_t PassTokens(double shortest_budget_s, size_t sequences, int64_t queued_tokens) const;
  AdmissionWork WorkOf(const Job& j) const;  // under queue_mu_
  AdmissionVerdict Decide(const Job& j, bool count_admission) const;  // under queue_mu_
  // Counts a decision; returns how much longer than its own wait a refusal asks for.
  double NoteDecision(bool admitted, double now) const;  // under queue_mu_

  // Made at the first call that heals (a piece per token).
  std::once_flag constraint_once_;
  std::unique_ptr<PrefixConstraint> constraint_;
  const Model& model_;
  ThreadPool* pool_;
  const SchedulerOptions opts_;
  Metrics* metrics_;
  std::function<void()> housekeeping_;

  mutable std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Job*> queue_;
  std::vector<Job*> admitted_;     // queued or running (admission sees their work)
  PassTimeModel pass_model_;       // under queue_mu_
  double pass_started_ = -1;       // the pass in flight (scheduler clock), -1: none
  double pass_expected_s_ = 0;
  uint64_t next_seq_ = 0;
  mutable double recent_admitted_ = 0, recent_refused_ = 0, last_decision_ = 0;  // NoteDecision
  mutable ConversationPacer pacer_;  // under queue_mu_
  bool calibrated_ = false;        // the constructor waits for it
  bool stop_ = false;
  std::atomic<int64_t> prefill_tokens_{0}, decode_tokens_{0};
  std::unique_ptr<ForwardContext> ctx_;  // the worker's
  std::thread worker_;
};

}  // namespace tlr
