// BatchScheduler: the worker thread and its batched forward passes (see batch_scheduler.h).
#include "server/batch_scheduler.h"

#include <algorithm>
#include <cmath>

#include "ops/thread_pool.h"

namespace tlr {

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
  bool refused = false;        // failed because of what the call asked (400)
  bool has_deadline = false;
  Clock::time_point deadline;
  std::mutex mu;
  std::condition_variable cv;
};

BatchScheduler::BatchScheduler(const Model& model, ThreadPool* pool, int64_t max_batch_tokens, Metrics* metrics,
                               std::function<void()> housekeeping)
    : model_(model),
      pool_(pool),
      max_batch_tokens_(max_batch_tokens),
      metrics_(metrics),
      housekeeping_(std::move(housekeeping)) {
  worker_ = std::thread([this] { WorkerLoop(); });
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

std::vector<BatchOutcome> BatchScheduler::RunAll(std::vector<BatchCall> calls) {
  std::vector<std::unique_ptr<Job>> jobs;
  const auto now = Clock::now();
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
    if (call.deadline_s > 0) {
      job->has_deadline = true;
      job->deadline = now + std::chrono::microseconds(static_cast<int64_t>(call.deadline_s * 1e6));
    }
    jobs.push_back(std::move(job));
  }
  std::vector<BatchOutcome> outs(jobs.size());
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (stop_) {
      for (BatchOutcome& out : outs) {
        out.error = "the server is shutting down";
        out.overload = true;
      }
      return outs;
    }
    for (auto& job : jobs) queue_.push_back(job.get());
  }
  queue_cv_.notify_one();
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = *jobs[i];
    std::unique_lock<std::mutex> jl(job.mu);
    job.cv.wait(jl, [&] { return job.done; });
    outs[i].reply = std::move(job.reply);
    outs[i].error = std::move(job.error);
    outs[i].overload = job.shutdown;
    outs[i].bad_request = job.refused;
    outs[i].started = job.started_set;
  }
  return outs;
}

void BatchScheduler::WorkerLoop() {
  ctx_ = std::make_unique<ForwardContext>(pool_);  // scratch reused by every pass
  std::vector<Job*> active;
  auto last_sweep = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> l(queue_mu_);
      queue_cv_.wait_for(l, std::chrono::seconds(1), [&] { return stop_ || !queue_.empty() || !active.empty(); });
      if (stop_) {
        for (Job* j : queue_) active.push_back(j);
        queue_.clear();
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
      while (!queue_.empty()) {
        active.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    if (!active.empty()) Step(active);
    if (Since(last_sweep) > 5.0) {
      if (housekeeping_) housekeeping_();
      last_sweep = Clock::now();
    }
  }
}

void BatchScheduler::Step(std::vector<Job*>& active) {
  // Calls whose device has given up (their timeout_ms is how long it waits) get no more
  // passes: unstarted ones are dropped before anything is computed, started ones between
  // passes (their session's cache is partly written: the engine evicts it). An overloaded
  // server otherwise spends its passes on answers nobody reads.
  const auto now = Clock::now();
  for (size_t i = 0; i < active.size();) {
    Job* j = active[i];
    if (!j->has_deadline || now < j->deadline) {
      ++i;
      continue;
    }
    active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
    const double waited = std::chrono::duration<double>(now - j->enqueued).count();
    if (metrics_) metrics_->Add(j->started_set ? "tlr_calls_abandoned_total" : "tlr_calls_expired_total", 1);
    std::lock_guard<std::mutex> jl(j->mu);
    j->error = j->started_set
                   ? "the call ran " + std::to_string(waited) + " s, past its timeout (the device stopped waiting): the server is overloaded"
                   : "the call waited " + std::to_string(waited) + " s in the queue, past its timeout: the server is overloaded";
    j->shutdown = true;
    j->done = true;
    j->cv.notify_all();
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
      j->reply.compute_s = Since(j->started);
      std::lock_guard<std::mutex> jl(j->mu);
      j->done = true;
      j->cv.notify_all();
    }
  }
  std::vector<SequenceInput> ins;
  std::vector<Job*> batch;
  int64_t budget = max_batch_tokens_;
  int64_t tokens = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (Job* j : active) {
      if (j->decoding != (pass == 0)) continue;
      const size_t rest = j->feed.size() - j->fed;
      size_t take = std::min<size_t>(rest, static_cast<size_t>(std::max<int64_t>(budget, 0)));
      const bool scoring = j->scores && !j->decoding;
      const int64_t V = model_.config().n_vocab;
      if (scoring) take = std::min<size_t>(take, static_cast<size_t>(std::max<int64_t>(1, kScoreLogitBytes / (4 * V))));
      if (take == 0 && batch.empty()) take = std::min<size_t>(rest, 1);  // always progress
      if (take == 0) continue;
      j->take = take;
      budget -= static_cast<int64_t>(take);
      tokens += static_cast<int64_t>(take);
      const bool last = j->fed + take == j->feed.size();
      const std::span<const int32_t> chunk(j->feed.data() + j->fed, take);
      if (scoring) {
        j->chunk_logits.resize(take * static_cast<size_t>(V));
        ins.push_back({j->s->cache.get(), chunk, OutputRows::kAll, j->chunk_logits.data(), nullptr});
      } else {
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
  const auto pass_start = Clock::now();
  Status st = model_.Forward(ins, ctx_.get());
  const double pass_s = Since(pass_start);
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
      j->refused = true;
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
  for (Job* j : finished) {
    j->reply.compute_s = Since(j->started);
    active.erase(std::find(active.begin(), active.end(), j));
    std::lock_guard<std::mutex> jl(j->mu);
    j->done = true;
    j->cv.notify_all();
  }
}

}  // namespace tlr
