// The decoder's view of the large model (device layer): "given everything so far, the next
// token(s)", asked without blocking. Each backend keeps what the LLM has already ingested and
// sends or computes only the new tokens: the in-process backend keeps a KV cache and prefills
// the difference; remote backends (remote_llm.h) keep the server's session in sync the same way.
//
// Calls are asynchronous: Submit returns an LlmCall handle at once and the backend works on it
// in its own threads, several calls in flight at a time; the caller polls done(), waits, or
// cancels. Replies are a function of the call's context and sampling parameters only (sampling
// draws are keyed by seed and position), so calls may complete in any order and a cancelled or
// repeated call never changes another call's answer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/prefix_constraint.h"
#include "model/sampler.h"
#include "ops/thread_pool.h"
#include "util/status.h"

namespace tlr {

struct LlmRequest {
  std::vector<int32_t> context;   // prompt and everything generated so far (at least one token)
  int n = 1;                      // tokens wanted (fewer come back when the LLM ends)
  int lookahead = 0;              // extra tokens of the LLM's own continuation after those n
  SamplerParams sampling;
  // Bytes the continuation must spell first (token healing, vocab_bridge.h): in process the
  // tokens are constrained to them (model/prefix_constraint.h); backends without a constraint
  // send the context as it is and the bridge checks the reply.
  std::string prefix;
};

struct LlmReply {
  std::vector<int32_t> tokens;     // the n asked for (fewer when the LLM ended)
  std::vector<float> logprobs;     // of each returned token under the LLM
  std::vector<int32_t> lookahead;  // what the LLM generates after `tokens` (up to the number
                                   // asked; none when `tokens` ended the text)
  int64_t ingested = 0;            // context tokens the LLM had to read for this call
  // The LLM stopped at the number asked, not on its own, even if `tokens` holds fewer (an
  // engine's reply text read back into tokens may give fewer than it generated).
  bool hit_limit = false;
};

// The LLM's work for a backend's calls, summed over the backend's life: tokens it prefilled
// (read from contexts), tokens it generated (answers, lookahead, and calls whose answers were
// never read: cancelled in flight, or missed), and its forward-pass time where known (-1 when
// the LLM does not report it). Differences of two readings give one generation's work.
struct LlmWork {
  int64_t prefilled = 0, generated = 0;
  double forward_s = 0;
  LlmWork operator-(const LlmWork& o) const {
    return {prefilled - o.prefilled, generated - o.generated, forward_s < 0 || o.forward_s < 0 ? -1 : forward_s - o.forward_s};
  }
  LlmWork operator+(const LlmWork& o) const {
    return {prefilled + o.prefilled, generated + o.generated, forward_s < 0 || o.forward_s < 0 ? -1 : forward_s + o.forward_s};
  }
};

// One submitted call. Thread-safe: the backend completes it from its threads while the caller
// polls, waits or cancels from its own.
class LlmCall {
 public:
  using Clock = std::chrono::steady_clock;
  // `flag` (may be null): the call counts as cancelled also once *flag is true (polled).
  explicit LlmCall(std::function<void()> on_done, const std::atomic<bool>* flag = nullptr)
      : on_done_(std::move(on_done)), flag_(flag), submitted_(Clock::now()) {}

  bool done() const;
  // Blocks until done; then the reply or the error (a cancelled call ends with an error).
  const Expected<LlmReply>& Wait();
  // Waits at most `seconds`; returns done().
  bool WaitFor(double seconds);
  // The caller will not read the result. A call that has not started is dropped; one in flight
  // finishes (its reply is ignored) or stops at its next wait.
  void Cancel();
  bool cancelled() const;
  // For backends that hand the work to another call: `f` runs once when this call is cancelled
  // (at once when it already is), e.g. to cancel that other call.
  void OnCancel(std::function<void()> f);
  // Submission to completion, in seconds (0 until done).
  double latency_s() const;

  // For backends: the result, once. Calls the submitter's on_done (outside any lock).
  void Complete(Expected<LlmReply> result);
  // For backends: sleeps `seconds` unless the call is cancelled first; returns !cancelled().
  bool SleepUnlessCancelled(double seconds);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, cancelled_ = false;
  Expected<LlmReply> result_ = Status::Error("the call has not completed");
  std::function<void()> on_done_;
  std::function<void()> on_cancel_;
  const std::atomic<bool>* flag_ = nullptr;
  Clock::time_point submitted_, completed_;
};

// Wakes one waiting thread when any of the calls it submitted completes (the decoder's "wait
// for whichever reply comes first"). Pass Callback() as Submit's on_done.
class CallNotifier {
 public:
  std::function<void()> Callback();
  uint64_t generation() const;
  // Waits until generation() differs from `seen` or `seconds` pass; returns whether it changed.
  bool WaitChange(uint64_t seen, double seconds);

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t generation = 0;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

class LlmBackend {
 public:
  virtual ~LlmBackend() = default;
  // Starts a call and returns at once; `on_done` (may be empty) is called from a backend thread
  // when it completes. Invalid requests complete at once with an error.
  virtual std::shared_ptr<LlmCall> Submit(LlmRequest request, std::function<void()> on_done) = 0;
  // Blocking convenience: Submit, then Wait.
  Expected<LlmReply> Next(std::span<const int32_t> context, int n, const SamplerParams& sampling,
                          int lookahead = 0);
  // Forget the conversation (the next call starts from scratch).
  virtual void Reset() = 0;
  // The tokenizer's fingerprint (the device refuses an LLM whose vocabulary differs).
  virtual uint64_t vocab_fingerprint() const = 0;
  // Whether LlmRequest::prefix constrains the reply (the tokens spelling it then come first,
  // on top of the n asked for); otherwise the prefix is ignored.
  virtual bool spells_prefix() const { return false; }
  // The LLM's work so far, as far as the backend can know it: exact in process; over the
  // network what the server reports (a call still running when this is read counts later).
  virtual LlmWork work() const = 0;
  virtual std::string name() const = 0;
  // How many leading tokens of `context` the LLM already holds (a call with it would read only
  // the rest), as far as the backend knows; 0 when it does not know (the cost policy then
  // prices a call as cold). May wait for a call in progress.
  virtual int64_t HeldPrefix(std::span<const int32_t> context) const {
    (void)context;
    return 0;
  }
};

// Runs calls on its own worker threads in submission order (FIFO), dropping calls cancelled
// before they start; `n_workers` calls run at once. The destructor cancels what is queued and
// joins the workers (a call in progress finishes first).
// With TLR_MAX_THREADS=1 (emulators, single-threaded builds) it starts no thread: Submit runs
// the call on the calling thread and returns it done.
class CallExecutor {
 public:
  using Fn = std::function<Expected<LlmReply>(const LlmRequest&, LlmCall&)>;
  CallExecutor(int n_workers, Fn fn);
  ~CallExecutor();
  CallExecutor(const CallExecutor&) = delete;
  CallExecutor& operator=(const CallExecutor&) = delete;
  std::shared_ptr<LlmCall> Submit(LlmRequest request, std::function<void()> on_done);

 private:
  void Work();
  Fn fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<LlmRequest, std::shared_ptr<LlmCall>>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// The LLM in this process: its own KV cache, delta prefill by longest common prefix, its own
// worker thread and thread pool (never the decoder's: the two models run side by side).
class InProcessLlm : public LlmBackend {
 public:
  // `n_threads`: the LLM's thread pool; `n_ctx`: the cache size (prompt + generated tokens
  // must fit).
  InProcessLlm(const Model& llm, int n_threads, int64_t n_ctx);
  ~InProcessLlm() override;
  std::shared_ptr<LlmCall> Submit(LlmRequest request, std::function<void()> on_done) override;
  void Reset() override;
  uint64_t vocab_fingerprint() const override { return llm_.tokenizer().Fingerprint(); }
  bool spells_prefix() const override { return true; }
  std::string name() const override { return "in-process"; }
  LlmWork work() const override;
  int64_t HeldPrefix(std::span<const int32_t> context) const override;
  // Tokens ingested over the backend's life (for tests of the delta behaviour).
  int64_t total_ingested() const;

 private:
  Expected<LlmReply> Execute(const LlmRequest& request);
  const Model& llm_;
  ThreadPool pool_;
  int64_t n_ctx_;
  mutable std::mutex mu_;       // the cache and counters (the worker computes under it)
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> held_;   // the tokens in cache_
  std::unique_ptr<PrefixConstraint> constraint_;  // made at the first call with a prefix
  std::vector<float> logits_;
  std::unique_ptr<Sampler> sampler_;
  int64_t total_ingested_ = 0;
  LlmWork work_;                // under mu_
  std::unique_ptr<CallExecutor> exec_;  // last: its worker stops before the rest goes
};

// Adds a simulated network round trip (rtt +- uniform jitter) to every call of another
// backend: half of it before the call reaches the LLM, half after its reply (evaluating an
// in-process LLM as if it were remote: --sim-rtt without --server). Each call has its own delay;
// calls in flight overlap as on a real network.
class DelayedLlm : public LlmBackend {
 public:
  DelayedLlm(LlmBackend* inner, double rtt_s, double jitter_s, uint64_t seed);
  ~DelayedLlm() override;
  std::shared_ptr<LlmCall> Submit(LlmRequest request, std::function<void()> on_done) override;
  void Reset() override { inner_->Reset(); }
  uint64_t vocab_fingerprint() const override { return inner_->vocab_fingerprint(); }
  bool spells_prefix() const override { return inner_->spells_prefix(); }
  LlmWork work() const override { return inner_->work(); }
  int64_t HeldPrefix(std::span<const int32_t> context) const override { return inner_->HeldPrefix(context); }
  std::string name() const override { return inner_->name() + " (simulated network)"; }
  // Simulated network time added so far.
  double sim_delay_s() const;

 private:
  using Clock = std::chrono::steady_clock;
  void Schedule(Clock::time_point at, std::function<void()> fn);
  void TimerLoop();
  LlmBackend* inner_;
  double rtt_s_, jitter_s_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t state_;
  double sim_delay_s_ = 0;
  int outstanding_ = 0;  // calls submitted and not yet completed
  bool stop_ = false;
  std::multimap<Clock::time_point, std::function<void()>> timers_;
  std::thread timer_;
};

}  // namespace tlr
