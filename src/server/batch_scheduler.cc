// BatchScheduler: the worker thread and its batched forward passes (see batch_scheduler.h).
#include "server/batch_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/thread_pool.h"
#include "util/clock.h"

namespace tlr {

namespace {

using Clock = std::chrono::steady_clock;

// Log-softmax of the chosen token and, when asked, the top k.
void LogProbs(const float* logits, int64_t n, int32_t tok, int k, float* lp, std::vector<TopLogprob>* top) {
  const float lse = LogSumExp(logits, n);
  *lp = logits[tok] - lse;
  top->clear();
  if (k <= 0) return;
  std::vector<int32_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
  k = static_cast<int>(std::min<int64_t>(k, n));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int i = 0; i < k; ++i) top->push_back({idx[i], logits[idx[i]] - lse});
}

// A scoring call's chunk holds all its rows' logits: at most this many bytes of them per pass.
constexpr int64_t kScoreLogitBytes = 64 << 20;

}  // namespace

struct BatchScheduler::Job {
  EngineSession* s = nullptr;
  std::vector<int32_t> feed;    // tokens to ingest
  size_t fed = 0;
  int remaining = 0;            // tokens still to generate
  int low_priority = 0;         // the last this many of them may be cut (lookahead)
  bool decoding = false;
  std::unique_ptr<Sampler> sampler;
  int top_logprobs = 0;
  const LlmEngine::TokenCallback* on_token = nullptr;
  std::vector<float> logits;
  std::vector<PromptPosition>* scores = nullptr;  // teacher forcing: one per fed prompt token
  int prompt_top = 0;
  std::vector<float> chunk_logits;  // a scoring chunk's rows
  std::string heal;             // bytes still to spell (BatchCall::heal)
  size_t take = 0;              // tokens in the current pass
  EngineReply reply;
  std::string error;
  Clock::time_point enqueued, started;
  bool started_set = false;
  bool done = false;
  bool shutdown = false;       // failed because the server stops or is overloaded (503)
  bool bad_request = false;    // failed because of what the call asked (400)
  // Admission (admission.h): deadline on the scheduler's clock (inf: none; set to inf once the
  // first token is out when only that is bounded) and deadline changes under queue_mu_.
  double deadline = std::numeric_limits<double>::infinity();
  double budget_s = 0;
  bool first_token_only = false;
  bool warm = true;
  uint64_t seq = 0;
  int64_t keep = -1;
  std::unique_ptr<KvCache> copy;       // BatchCall::copy
  std::vector<int32_t> copy_tokens;
  int64_t held = 0;            // tokens of the context its session holds when it arrives
  std::atomic<int64_t> left_tokens{0};  // prefill tokens not yet ingested
  std::atomic<int> left_steps{0};       // generation passes still due (low priority excluded)
  std::atomic<bool> gone{false};        // the client went away
  bool expired = false;        // dropped past its deadline
  bool failed_pass = false;    // a forward pass it was in failed
  bool partial = false;        // admitted to ingest what it can before its deadline
  bool partial_stop = false;   // stopped so (answered 503 before the deadline)
  std::mutex mu;
  std::condition_variable cv;
};

double BatchScheduler::HeadUnits(const ModelConfig& c) {
  const double layer = static_cast<double>(c.n_layers) *
                       (static_cast<double>(c.n_embd) * static_cast<double>(c.q_dim() + 2 * c.kv_dim()) +
                        static_cast<double>(c.q_dim() * c.n_embd) + 3.0 * static_cast<double>(c.n_embd * c.n_ff));
  return layer > 0 ? static_cast<double>(c.n_vocab * c.n_embd) / layer : 0;
}

double BatchScheduler::Now() const {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

AdmissionWork BatchScheduler::WorkOf(const Job& j) const {
  AdmissionWork w;
  w.deadline = j.deadline;
  w.budget_s = j.budget_s;
  w.warm = j.warm;
  w.tokens = j.left_tokens.load();
  w.steps = j.left_steps.load();
  w.first_token_only = j.first_token_only;
  w.seq = j.seq;
  return w;
}

BatchScheduler::BatchScheduler(const Model& model, ThreadPool* pool, const SchedulerOptions& opts, Metrics* metrics,
                               std::function<void()> housekeeping)
    : model_(model),
      pool_(pool),
      opts_(opts),
      metrics_(metrics),
      housekeeping_(std::move(housekeeping)),
      pass_model_(HeadUnits(model.config())),
      pacer_(opts.admission.new_share) {
  worker_ = std::thread([this] { WorkerLoop(); });
  // Serving starts once the passes are timed: calls arriving before would all be admitted.
  std::unique_lock<std::mutex> l(queue_mu_);
  queue_cv_.wait(l, [this] { return calibrated_; });
}

BatchScheduler::~BatchScheduler() {
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  worker_.join();
}

BatchOutcome BatchScheduler::Run(BatchCall call) {
  std::vector<BatchCall> one;
  one.push_back(std::move(call));
  return std::move(RunAll(std::move(one))[0]);
}

namespace {

// Tokens of the call's context its session holds when it arrives (what it keeps, or all).
int64_t Held(const BatchCall& call) {
  if (call.keep >= 0) return call.keep;
  return call.session ? static_cast<int64_t>(call.session->tokens.size()) : 0;
}

}  // namespace

std::vector<BatchOutcome> BatchScheduler::RunAll(std::vector<BatchCall> calls) {
  std::vector<std::unique_ptr<Job>> jobs;
  const auto now = Clock::now();
  const double now_s = Now();
  for (BatchCall& call : calls) {
    auto job = std::make_unique<Job>();
    job->s = call.session;
    job->feed = std::move(call.feed);
    job->remaining = call.n;
    job->low_priority = std::max(0, std::min(call.low_priority, call.n - 1));
    if (call.sampling.temperature > 0) {
      // Counter-based draws (keyed by seed and position): a context gets the same tokens
      // whichever calls came before it, and the same as the device's SLM would draw there.
      job->sampler = std::make_unique<Sampler>(call.sampling, static_cast<int32_t>(model_.config().n_vocab));
    }
    job->top_logprobs = call.top_logprobs;
    job->on_token = call.on_token;
    job->scores = call.prompt_scores;
    job->prompt_top = call.prompt_top;
    job->heal = std::move(call.heal);
    if (!job->heal.empty()) {
      std::call_once(constraint_once_, [this] { constraint_ = std::make_unique<PrefixConstraint>(model_.tokenizer()); });
    }
    if (job->scores) job->scores->clear();
    job->logits.resize(static_cast<size_t>(model_.config().n_vocab));
    job->reply.prefilled = static_cast<int64_t>(job->feed.size());
    job->enqueued = now;
    if (call.deadline_s > 0 && std::isfinite(call.deadline_s)) {
      job->deadline = now_s + call.deadline_s;
      job->budget_s = call.deadline_s;
      job->first_token_only = call.deadline_first_token;
    }
    job->warm = static_cast<int64_t>(job->feed.size()) <= opts_.admission.warm_tokens;
    job->keep = call.keep;
    if (call.keep >= 0 && call.copy) {
      job->copy = std::move(call.copy);
      job->copy_tokens = std::move(call.copy_tokens);
    }
    job->held = Held(call);
    job->left_tokens = static_cast<int64_t>(job->feed.size());
    // Generation passes after the prefill (its last pass gives the first token).
    job->left_steps = std::max(0, call.n - job->low_priority - 1);
    jobs.push_back(std::move(job));
  }
  std::vector<BatchOutcome> outs(jobs.size());
  std::vector<bool> admitted(jobs.size(), false);
  std::vector<std::unique_ptr<KvCache>> retired;  // caches replaced by copies
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (stop_) {
      for (BatchOutcome& out : outs) {
        out.error = "the server is shutting down";
        out.overload = true;
      }
      return outs;
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
      Job& job = *jobs[i];
      job.seq = next_seq_++;
      const AdmissionVerdict v = Decide(job, true);
      if (!v.admit) {
        outs[i].refused = !v.never;
        outs[i].too_long = v.never;
        outs[i].retry_after_s = v.retry_after_s;
        outs[i].error = v.never ? "the call cannot be answered in its time: " + v.why : "the server is overloaded: " + v.why;
        // (A call that cannot fit at all is a 400, not a refusal: not counted as one.)
        if (metrics_ && !v.never) metrics_->Add("tlr_calls_refused_total", 1, {{"class", job.warm ? "warm" : "cold"}});
        continue;
      }
      admitted[i] = true;
      outs[i].admitted = true;
      job.partial = v.partial;
      if (job.copy) {  // only an admitted call changes its session
        retired.push_back(std::move(job.s->cache));  // freed after queue_mu_
        job.s->cache = std::move(job.copy);
        job.s->tokens = std::move(job.copy_tokens);
      } else if (job.keep >= 0) {
        if (job.s->cache) job.s->cache->Truncate(job.keep);
        job.s->tokens.resize(static_cast<size_t>(job.keep));
      }
      admitted_.push_back(&job);
      queue_.push_back(&job);
    }
  }
  queue_cv_.notify_one();
  retired.clear();
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (calls[i].on_decided) calls[i].on_decided(admitted[i]);
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!admitted[i]) continue;
    Job& job = *jobs[i];
    std::unique_lock<std::mutex> jl(job.mu);
    const std::function<bool()>& gone = calls[i].client_gone;
    while (!job.done) {
      if (!gone) {
        job.cv.wait(jl);
        continue;
      }
      if (job.cv.wait_for(jl, std::chrono::milliseconds(50), [&] { return job.done; })) break;
      if (!job.gone.load()) {
        jl.unlock();
        if (gone()) job.gone = true;
        jl.lock();
      }
    }
    outs[i].reply = std::move(job.reply);
    outs[i].error = std::move(job.error);
    outs[i].overload = job.shutdown;
    outs[i].bad_request = job.bad_request;
    outs[i].started = job.started_set;
    outs[i].failed_pass = job.failed_pass;
    if (job.expired) outs[i].retry_after_s = 1;
    if (job.partial_stop) {
      outs[i].retry_after_s = 0.05;
      outs[i].partial = true;
    }
  }
  return outs;
}

// Refusals against admissions, decayed over a few seconds: under sustained overload the waits a
// refusal asks for grow with it (up to 8x), so that refused devices come back about as fast as
// calls get in, not in a stream of refusals that costs the server's own CPU.
double BatchScheduler::NoteDecision(bool admitted, double now) const {
  constexpr double kTau = 2.0;
  const double decay = last_decision_ > 0 ? std::exp(-std::max(0.0, now - last_decision_) / kTau) : 1.0;
  recent_admitted_ = recent_admitted_ * decay + (admitted ? 1 : 0);
  recent_refused_ = recent_refused_ * decay + (admitted ? 0 : 1);
  last_decision_ = now;
  return std::min(8.0, 1.0 + recent_refused_ / std::max(1.0, recent_admitted_));
}

AdmissionVerdict BatchScheduler::Decide(const Job& job, bool count_admission) const {
  std::vector<AdmissionWork> work;
  work.reserve(admitted_.size());
  double shortest = std::numeric_limits<double>::infinity();
  for (const Job* a : admitted_) {
    work.push_back(WorkOf(*a));
    if (a->budget_s > 0 && std::isfinite(a->deadline)) shortest = std::min(shortest, a->budget_s);
  }
  const int64_t without = PassTokens(shortest, work.size(), 0);
  if (job.budget_s > 0) shortest = std::min(shortest, job.budget_s);
  AdmissionPolicy policy = opts_.admission;
  policy.pass_tokens = PassTokens(shortest, work.size() + 1, 0);
  const double now = Now();
  // The pass in flight, and the work after it that the worker does before the next one.
  const double pass_left = pass_started_ >= 0 ? std::max(0.0, pass_started_ + pass_expected_s_ - now) : 0;
  AdmissionVerdict v = Admit(work, WorkOf(job), now, pass_left, pass_model_, policy, without);
  // A new or resynced conversation: more of its context to ingest than its session holds. Only
  // an admission charges the pacer; a dry run (Check) does not reserve its credit, so calls that
  // arrive together may pass Check on the same credit and be paced when queued.
  const int64_t tokens = job.left_tokens.load();
  const bool fresh = !job.warm && std::isfinite(job.deadline) && tokens > job.held;
  bool paced_refusal = false;
  if (fresh && v.admit && pass_model_.calibrated()) {
    // The server's token rate at full load: full passes, one output row per ten tokens (as
    // routed calls), each pass paying its fixed cost.
    const int64_t full = std::max<int64_t>(1, opts_.max_batch_tokens);
    const double full_s = pass_model_.Predict(full, std::max<int64_t>(1, full / 10));
    const double rate = full_s > 0 ? static_cast<double>(full) / full_s : 0;
    if (const double wait = pacer_.Wait(now, rate); wait > 0) {
      v.admit = false;
      paced_refusal = true;
      v.partial = false;
      // Pacing may end sooner than the credit comes (the server found a gap): back within a second.
      v.retry_after_s = std::clamp(wait, 0.05, 1.0);
      v.why = "the server is busy and refusing calls, and new conversations get " +
              std::to_string(static_cast<int>(std::lround(pacer_.share() * 100))) + "% of its time meanwhile";
      if (metrics_) metrics_->Add("tlr_new_conversations_paced_total", 1);
    } else if (count_admission) {
      pacer_.Admitted(tokens, now, rate);
    }
  }
  if (!v.admit && !v.never && !paced_refusal) pacer_.Refused(now);
  if (!v.admit && !v.never) {
    v.retry_after_s = std::min(60.0, v.retry_after_s * NoteDecision(false, now));
  } else if (v.admit && count_admission) {
    NoteDecision(true, now);
    if (fresh && metrics_) metrics_->Add("tlr_new_conversation_tokens_total", static_cast<double>(tokens));
  }
  return v;
}

AdmissionVerdict BatchScheduler::Check(const BatchCall& call) const {
  Job probe;
  probe.budget_s = call.deadline_s > 0 && std::isfinite(call.deadline_s) ? call.deadline_s : 0;
  probe.deadline = probe.budget_s > 0 ? Now() + probe.budget_s : std::numeric_limits<double>::infinity();
  probe.first_token_only = call.deadline_first_token;
  probe.warm = static_cast<int64_t>(call.feed.size()) <= opts_.admission.warm_tokens;
  probe.left_tokens = static_cast<int64_t>(call.feed.size());
  probe.held = Held(call);
  const int low = std::max(0, std::min(call.low_priority, call.n - 1));
  probe.left_steps = std::max(0, call.n - low - 1);
  std::lock_guard<std::mutex> l(queue_mu_);
  probe.seq = next_seq_;
  return Decide(probe, false);  // its admission is counted when the call is queued
}

int64_t BatchScheduler::PassTokens(double shortest_budget_s, size_t sequences, int64_t queued_tokens) const {
  int64_t b = opts_.max_batch_tokens;
  if (std::isfinite(shortest_budget_s) && pass_model_.calibrated()) {
    // A pass takes at most a quarter of the shortest timeout waiting (a call arriving just after
    // a pass started waits for it and then needs its own), unless the pass's fixed cost alone
    // is near that: then cutting tokens would only cost throughput.
    const double per_token = queued_tokens > 0 ? std::min(1.0, static_cast<double>(sequences) / static_cast<double>(queued_tokens)) : 0.1;
    const double target = std::max(0.25 * shortest_budget_s, 2 * pass_model_.fixed_s());
    b = std::min(b, pass_model_.TokensWithin(target, per_token));
  }
  return std::max<int64_t>(b, std::min<int64_t>(16, opts_.max_batch_tokens));
}

void BatchScheduler::WorkerLoop() {
  ctx_ = std::make_unique<ForwardContext>(pool_);  // scratch reused by every pass
  if (opts_.calibrate) Calibrate();
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    calibrated_ = true;
  }
  queue_cv_.notify_all();
  std::vector<Job*> active;
  auto last_sweep = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> l(queue_mu_);
      // Busy since the first pass after the worker last found nothing to do (new conversations
      // are paced only while it is busy without a gap).
      if (queue_.empty() && active.empty()) pacer_.Idle();
      queue_cv_.wait_for(l, std::chrono::seconds(1), [&] { return stop_ || !queue_.empty() || !active.empty(); });
      if (stop_) {
        for (Job* j : queue_) active.push_back(j);
        queue_.clear();
        admitted_.clear();
        l.unlock();
        for (Job* j : active) {
          std::lock_guard<std::mutex> jl(j->mu);
          j->error = "the server is shutting down";
          j->shutdown = true;
          j->done = true;
          j->cv.notify_all();
        }
        return;
      }
      if (!queue_.empty() || !active.empty()) pacer_.Working(Now());
      while (!queue_.empty()) {
        active.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    if (!active.empty()) Step(active);
    if (SecondsSince(last_sweep) > 5.0) {
      if (housekeeping_) housekeeping_();
      last_sweep = Clock::now();
    }
  }
}

// Times a few passes on a scratch cache before serving, so that admission has a pass time
// from the first call on (a wave of calls arriving at start would otherwise all be admitted).
void BatchScheduler::Calibrate() {
  const int64_t n = std::min<int64_t>(32, std::max<int64_t>(2, opts_.max_batch_tokens));
  auto cache = model_.NewCache(n + 2, KvMemory::kOnDemand);
  if (!cache.ok()) return;
  std::vector<float> logits(static_cast<size_t>(model_.config().n_vocab));
  std::vector<int32_t> tokens(static_cast<size_t>(n), 0);
  // Seconds of one pass over `len` tokens (negative: it failed).
  const auto pass = [&](int64_t len) {
    cache->Truncate(0);
    SequenceInput in{&*cache, std::span<const int32_t>(tokens.data(), static_cast<size_t>(len)), OutputRows::kLast,
                     logits.data(), nullptr};
    const auto t0 = Clock::now();
    if (!model_.Forward(std::span<SequenceInput>(&in, 1), ctx_.get()).ok()) return -1.0;
    if (opts_.test_pass_delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(opts_.test_pass_delay_s));
    return SecondsSince(t0);
  };
  // The first pass pays for touching the weights: not measured. Each length is timed twice and
  // the faster pass counts: a pass the OS preempted only ever takes longer, and one such pass
  // would have made admission think the server slower than it is.
  if (pass(1) < 0) return;
  for (int64_t len : {int64_t{1}, n}) {
    const double a = pass(len), b = pass(len);
    if (a < 0 || b < 0) return;
    std::lock_guard<std::mutex> l(queue_mu_);
    pass_model_.Observe(len, 1, std::min(a, b));
  }
}

void BatchScheduler::Finish(Job* j) {
  bool late = false;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    admitted_.erase(std::remove(admitted_.begin(), admitted_.end(), j), admitted_.end());
    // Answered, but after its deadline: the pass that finished it ran past the projection (calls
    // are stopped only between passes). The device may have stopped waiting.
    late = !j->expired && !j->gone.load() && j->error.empty() && Now() > j->deadline;
  }
  if (late && metrics_) metrics_->Add("tlr_calls_late_total", 1);
  std::lock_guard<std::mutex> jl(j->mu);
  j->done = true;
  j->cv.notify_all();
}

void BatchScheduler::Step(std::vector<Job*>& active) {
  // Calls whose client has gone or whose device has given up (their deadline passed; admission
  // makes that rare) get no more passes: unstarted ones are dropped before anything is
  // computed, started ones between passes. What they computed stays in their session (its
  // tokens and cache agree), so the device's next call sends only what is new.
  const double now = Now();
  for (size_t i = 0; i < active.size();) {
    Job* j = active[i];
    const bool in_tail = j->decoding && j->remaining <= j->low_priority;
    double deadline;
    {
      std::lock_guard<std::mutex> l(queue_mu_);
      deadline = j->deadline;
    }
    const bool gone = j->gone.load();
    if (!gone && now < deadline) {
      ++i;
      continue;
    }
    active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
    if (!gone && in_tail) {  // only the lookahead was left: answer with what there is
      if (metrics_) metrics_->Add("tlr_lookahead_cut_total", static_cast<double>(j->remaining));
      j->reply.compute_s = SecondsSince(j->started);
      Finish(j);
      continue;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - j->enqueued).count();
    if (gone) {
      if (metrics_) metrics_->Add("tlr_calls_cancelled_total", 1);
      j->error = "the client closed its connection";
    } else {
      if (metrics_) metrics_->Add(j->started_set ? "tlr_calls_abandoned_total" : "tlr_calls_expired_total", 1);
      j->error = j->started_set
                     ? "the call ran " + std::to_string(waited) + " s, past its timeout (the device stopped waiting): the server is overloaded"
                     : "the call waited " + std::to_string(waited) + " s in the queue, past its timeout: the server is overloaded";
      j->expired = true;
    }
    j->shutdown = true;
    Finish(j);
  }
  if (active.empty()) return;
  // Low-priority tails (lookahead) give way to every other call: cut where they stand.
  const auto in_tail = [](const Job* j) { return j->decoding && j->remaining <= j->low_priority; };
  if (std::any_of(active.begin(), active.end(), [&](const Job* j) { return !in_tail(j); })) {
    for (size_t i = 0; i < active.size();) {
      Job* j = active[i];
      if (!in_tail(j)) {
        ++i;
        continue;
      }
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      if (metrics_) metrics_->Add("tlr_lookahead_cut_total", static_cast<double>(j->remaining));
      j->reply.compute_s = SecondsSince(j->started);
      Finish(j);
    }
  }
  // Prefill in admission order (warm first, then by deadline), within a budget that keeps the
  // pass short next to the shortest timeout waiting.
  std::vector<Job*> order = active;
  int64_t budget;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    std::stable_sort(order.begin(), order.end(), [&](const Job* a, const Job* b) { return ServedBefore(WorkOf(*a), WorkOf(*b)); });
    double shortest = std::numeric_limits<double>::infinity();
    int64_t queued = 0;
    for (const Job* j : active) {
      if (std::isfinite(j->deadline) && j->budget_s > 0) shortest = std::min(shortest, j->budget_s);
      queued += static_cast<int64_t>(j->feed.size() - j->fed);
    }
    budget = PassTokens(shortest, active.size(), queued);
  }
  // A call admitted to ingest what it can (AdmissionVerdict::partial) stops before the pass
  // that would end past its deadline, and answers (503, come back at once) while its device
  // still waits: what it ingested stays in the session, and the next call goes on from there.
  // Its first pass always runs: stopped on the prediction alone, a pass time measured too long
  // (a calibration pass the OS preempted) would stop every call before any pass, and with no
  // pass the prediction never learns otherwise (seen under ctest -j3 on 2 cores).
  {
    const double next_pass = pass_model_.Predict(std::min<int64_t>(budget, 1 << 20), static_cast<int64_t>(active.size()));
    const AdmissionPolicy& p = opts_.admission;
    for (size_t i = 0; i < active.size();) {
      Job* j = active[i];
      const double margin = p.margin_s + p.margin_share * j->budget_s;
      if (!j->partial || j->decoding || j->fed == 0 || j->fed >= j->feed.size() ||
          Now() + p.safety * next_pass <= j->deadline - margin) {
        ++i;
        continue;
      }
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      order.erase(std::find(order.begin(), order.end(), j));
      if (metrics_) metrics_->Add("tlr_calls_partial_total", 1);
      j->error = "its prefill takes longer than its time: " + std::to_string(j->fed) + " of its " +
                 std::to_string(j->feed.size()) + " new tokens are in the session now; call again to go on";
      j->shutdown = true;
      j->partial_stop = true;
      Finish(j);
    }
    if (active.empty()) return;
  }
  std::vector<SequenceInput> ins;
  std::vector<Job*> batch;
  int64_t tokens = 0, outputs = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (Job* j : order) {
      if (j->decoding != (pass == 0)) continue;
      const size_t rest = j->feed.size() - j->fed;
      size_t take = std::min<size_t>(rest, static_cast<size_t>(std::max<int64_t>(budget, 0)));
      const bool scoring = j->scores && !j->decoding;
      const int64_t V = model_.config().n_vocab;
      if (scoring) take = std::min<size_t>(take, static_cast<size_t>(std::max<int64_t>(1, kScoreLogitBytes / (4 * V))));
      // Every generating call takes its step, whatever the budget; so does the first prefill.
      if (take == 0 && (batch.empty() || j->decoding)) take = std::min<size_t>(rest, 1);
      if (take == 0) continue;
      j->take = take;
      budget -= static_cast<int64_t>(take);
      // Admission sees the work after this pass (the pass itself is pass_left).
      if (j->decoding) {
        j->left_steps = std::max(0, j->left_steps.load() - 1);
      } else {
        j->left_tokens = static_cast<int64_t>(j->feed.size() - j->fed - take);
      }
      tokens += static_cast<int64_t>(take);
      const bool last = j->fed + take == j->feed.size();
      const std::span<const int32_t> chunk(j->feed.data() + j->fed, take);
      if (scoring) {
        j->chunk_logits.resize(take * static_cast<size_t>(V));
        ins.push_back({j->s->cache.get(), chunk, OutputRows::kAll, j->chunk_logits.data(), nullptr});
        outputs += static_cast<int64_t>(take);
      } else {
        outputs += last ? 1 : 0;
        ins.push_back({j->s->cache.get(), chunk, last ? OutputRows::kLast : OutputRows::kNone,
                       last ? j->logits.data() : nullptr, nullptr});
      }
      batch.push_back(j);
      if (!j->started_set) {
        j->started = Clock::now();
        j->started_set = true;
        j->reply.queue_s = std::chrono::duration<double>(j->started - j->enqueued).count();
        if (metrics_) metrics_->Observe("tlr_queue_seconds", j->reply.queue_s);
      }
    }
  }
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    pass_started_ = Now();
    pass_expected_s_ = pass_model_.Predict(tokens, outputs);
  }
  const auto pass_start = Clock::now();
  Status st = model_.Forward(ins, ctx_.get());
  if (opts_.test_pass_delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(opts_.test_pass_delay_s));
  const double pass_s = SecondsSince(pass_start);
  if (metrics_) {
    metrics_->Add("tlr_forward_passes_total", 1);
    metrics_->Add("tlr_forward_seconds_total", pass_s);
    metrics_->Observe("tlr_batch_sequences", static_cast<double>(batch.size()));
    metrics_->Observe("tlr_batch_tokens", static_cast<double>(tokens));
  }
  std::vector<Job*> finished;
  for (Job* j : batch) {
    if (!st.ok()) {
      j->error = "forward pass failed: " + st.message();
      j->failed_pass = true;
      finished.push_back(j);
      continue;
    }
    EngineSession* s = j->s;
    const int64_t V = model_.config().n_vocab;
    if (j->scores && !j->decoding) {  // teacher forcing: what the model predicts at each position
      for (size_t r = 0; r < j->take; ++r) {
        const float* row = j->chunk_logits.data() + r * static_cast<size_t>(V);
        const size_t p = j->fed + r;
        PromptPosition pos;
        pos.argmax = ArgMax(row, V);
        const bool has_next = p + 1 < j->feed.size();
        LogProbs(row, V, has_next ? j->feed[p + 1] : pos.argmax, j->prompt_top, &pos.logprob, &pos.top);
        if (has_next) {
          const float mine = row[j->feed[p + 1]];
          pos.rank = 1 + static_cast<int32_t>(std::count_if(row, row + V, [mine](float x) { return x > mine; }));
        } else {
          pos.logprob = 0;
        }
        j->scores->push_back(std::move(pos));
      }
      if (j->fed + j->take == j->feed.size()) {
        std::copy_n(j->chunk_logits.data() + (j->take - 1) * static_cast<size_t>(V), V, j->logits.data());
      }
    }
    s->work.forward_s += tokens > 0 ? pass_s * static_cast<double>(j->take) / static_cast<double>(tokens) : 0;
    if (!j->decoding) s->work.prefilled += static_cast<int64_t>(j->take);
    s->tokens.insert(s->tokens.end(), j->feed.begin() + static_cast<std::ptrdiff_t>(j->fed),
                     j->feed.begin() + static_cast<std::ptrdiff_t>(j->fed + j->take));
    s->high_water = std::max<int64_t>(s->high_water.load(), static_cast<int64_t>(s->tokens.size()));
    (j->decoding ? decode_tokens_ : prefill_tokens_) += static_cast<int64_t>(j->take);
    if (metrics_) metrics_->Add(j->decoding ? "tlr_decode_tokens_total" : "tlr_prefill_tokens_total", static_cast<double>(j->take));
    j->fed += j->take;
    if (j->fed < j->feed.size()) continue;
    if (j->remaining <= 0) {  // a scoring call: nothing to generate
      j->reply.finish = "length";
      finished.push_back(j);
      continue;
    }
    if (!j->heal.empty() && !constraint_->Mask(j->heal, j->logits.data())) {
      j->error = "no token of the LLM's vocabulary spells the held-back bytes ('prefix_bytes')";
      j->bad_request = true;
      finished.push_back(j);
      continue;
    }
    const int32_t tok = j->sampler ? j->sampler->Sample(j->logits.data(), s->tokens)
                                   : ArgMax(j->logits.data(), V);
    if (!j->heal.empty()) {  // spelling the healed bytes: on top of the n
      j->heal = std::string(constraint_->After(j->heal, tok));
      ++j->remaining;
      ++j->reply.spelled;
    }
    float lp = 0;
    std::vector<TopLogprob> top;
    LogProbs(j->logits.data(), V, tok, j->top_logprobs, &lp, &top);
    // While spelling held-back bytes the distribution is the constrained one: tokens it rules
    // out (probability 0) are not among the alternatives.
    std::erase_if(top, [](const TopLogprob& t) { return !std::isfinite(t.logprob); });
    j->reply.tokens.push_back(tok);
    j->reply.logprobs.push_back(lp);
    if (j->top_logprobs > 0) j->reply.top.push_back(top);
    --j->remaining;
    if (j->first_token_only) {  // the deadline was for the first token: it is out
      std::lock_guard<std::mutex> l(queue_mu_);
      j->deadline = std::numeric_limits<double>::infinity();
      j->first_token_only = false;
    }
    ++s->work.generated;
    if (metrics_) metrics_->Add("tlr_generated_tokens_total", 1);
    bool go_on = true;
    if (j->on_token && !(*j->on_token)(tok, lp, top)) {
      j->reply.finish = "stop";
      go_on = false;
    } else if (model_.tokenizer().IsEndOfGeneration(tok)) {
      j->reply.finish = "eos";
      go_on = false;
    } else if (j->remaining <= 0) {
      j->reply.finish = "length";
      go_on = false;
    }
    if (!go_on) {
      finished.push_back(j);
      continue;
    }
    j->feed.assign(1, tok);
    j->fed = 0;
    j->decoding = true;
  }
  // The pass time admission learns is the whole step: the forward pass and the sampling, log
  // probabilities and scoring rows after it (over the vocabulary, per sequence).
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    pass_started_ = -1;
    if (st.ok()) pass_model_.Observe(tokens, outputs, SecondsSince(pass_start));
  }
  for (Job* j : finished) {
    j->reply.compute_s = SecondsSince(j->started);
    active.erase(std::find(active.begin(), active.end(), j));
    Finish(j);
  }
}

}  // namespace tlr
