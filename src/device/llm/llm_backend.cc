// Asynchronous LLM calls, the in-process backend and the simulated network (see llm_backend.h).
#include "device/llm/llm_backend.h"

#include "ops/thread_pool.h"

#include <algorithm>
#include <cmath>

namespace tlr {

namespace {

using Clock = std::chrono::steady_clock;

float LogProb(const float* logits, int64_t n, int32_t tok) { return logits[tok] - LogSumExp(logits, n); }

std::chrono::nanoseconds Seconds(double s) {
  return std::chrono::nanoseconds(static_cast<int64_t>(std::max(0.0, s) * 1e9));
}

}  // namespace

// --- LlmCall ---------------------------------------------------------------------------------

bool LlmCall::done() const {
  std::lock_guard<std::mutex> l(mu_);
  return done_;
}

const Expected<LlmReply>& LlmCall::Wait() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return done_; });
  return result_;
}

bool LlmCall::WaitFor(double seconds) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, Seconds(seconds), [&] { return done_; });
}

void LlmCall::Cancel() {
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_ = true;
    f = std::move(on_cancel_);
    on_cancel_ = nullptr;
  }
  cv_.notify_all();
  if (f) f();
}

void LlmCall::OnCancel(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!cancelled_) {
      on_cancel_ = std::move(f);
      return;
    }
  }
  f();
}

bool LlmCall::cancelled() const {
  if (flag_ && flag_->load()) return true;
  std::lock_guard<std::mutex> l(mu_);
  return cancelled_;
}

double LlmCall::latency_s() const {
  std::lock_guard<std::mutex> l(mu_);
  return done_ ? std::chrono::duration<double>(completed_ - submitted_).count() : 0.0;
}

void LlmCall::Complete(Expected<LlmReply> result) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (done_) return;
    result_ = std::move(result);
    done_ = true;
    completed_ = Clock::now();
    notify = std::move(on_done_);
  }
  cv_.notify_all();
  if (notify) notify();
}

bool LlmCall::SleepUnlessCancelled(double seconds) {
  std::unique_lock<std::mutex> l(mu_);
  if (!flag_) {
    cv_.wait_for(l, Seconds(seconds), [&] { return cancelled_; });
    return !cancelled_;
  }
  // A watched flag is polled: every 50 ms.
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(Seconds(seconds));
  while (!cancelled_ && !flag_->load() && Clock::now() < until) {
    cv_.wait_until(l, std::min(until, Clock::now() + std::chrono::milliseconds(50)));
  }
  return !cancelled_ && !flag_->load();
}

// --- CallNotifier ----------------------------------------------------------------------------

std::function<void()> CallNotifier::Callback() {
  return [s = state_] {
    {
      std::lock_guard<std::mutex> l(s->mu);
      ++s->generation;
    }
    s->cv.notify_all();
  };
}

uint64_t CallNotifier::generation() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->generation;
}

bool CallNotifier::WaitChange(uint64_t seen, double seconds) {
  std::unique_lock<std::mutex> l(state_->mu);
  return state_->cv.wait_for(l, Seconds(seconds), [&] { return state_->generation != seen; });
}

// --- LlmBackend ------------------------------------------------------------------------------

Expected<LlmReply> LlmBackend::Next(std::span<const int32_t> context, int n, const SamplerParams& sampling,
                                    int lookahead) {
  LlmRequest r;
  r.context.assign(context.begin(), context.end());
  r.n = n;
  r.lookahead = lookahead;
  r.sampling = sampling;
  std::shared_ptr<LlmCall> call = Submit(std::move(r), nullptr);
  return call->Wait();
}

// --- CallExecutor ----------------------------------------------------------------------------

CallExecutor::CallExecutor(int n_workers, Fn fn) : fn_(std::move(fn)) {
  if (MaxThreads() == 1) return;  // no threads: calls run inline (Submit)
  for (int i = 0; i < std::max(1, n_workers); ++i) workers_.emplace_back([this] { Work(); });
}

CallExecutor::~CallExecutor() {
  std::deque<std::pair<LlmRequest, std::shared_ptr<LlmCall>>> dropped;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& [req, call] : dropped) call->Complete(Status::Error("the LLM backend was closed"));
  for (std::thread& t : workers_) t.join();
}

std::shared_ptr<LlmCall> CallExecutor::Submit(LlmRequest request, std::function<void()> on_done) {
  auto call = std::make_shared<LlmCall>(std::move(on_done));
  if (workers_.empty()) {  // TLR_MAX_THREADS=1: the call runs here, done when Submit returns
    call->Complete(fn_(request, *call));
    return call;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stop_) {
      queue_.emplace_back(std::move(request), call);
      cv_.notify_one();
      return call;
    }
  }
  call->Complete(Status::Error("the LLM backend was closed"));
  return call;
}

void CallExecutor::Work() {
  for (;;) {
    std::pair<LlmRequest, std::shared_ptr<LlmCall>> job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    LlmCall& call = *job.second;
    if (call.cancelled()) {
      call.Complete(Status::Error("the call was cancelled"));
      continue;
    }
    call.Complete(fn_(job.first, call));
  }
}

// --- InProcessLlm ----------------------------------------------------------------------------

InProcessLlm::InProcessLlm(const Model& llm, int n_threads, int64_t n_ctx)
    : llm_(llm), pool_(std::max(1, n_threads)), n_ctx_(n_ctx) {
  exec_ = std::make_unique<CallExecutor>(1, [this](const LlmRequest& r, LlmCall&) { return Execute(r); });
}

InProcessLlm::~InProcessLlm() { exec_.reset(); }

std::shared_ptr<LlmCall> InProcessLlm::Submit(LlmRequest request, std::function<void()> on_done) {
  return exec_->Submit(std::move(request), std::move(on_done));
}

void InProcessLlm::Reset() {
  std::lock_guard<std::mutex> l(mu_);
  held_.clear();
  if (cache_) cache_->Truncate(0);
}

int64_t InProcessLlm::HeldPrefix(std::span<const int32_t> context) const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  while (n < held_.size() && n < context.size() && held_[n] == context[n]) ++n;
  return static_cast<int64_t>(n);
}

LlmWork InProcessLlm::work() const {
  std::lock_guard<std::mutex> l(mu_);
  return work_;
}

int64_t InProcessLlm::total_ingested() const {
  std::lock_guard<std::mutex> l(mu_);
  return total_ingested_;
}

Expected<LlmReply> InProcessLlm::Execute(const LlmRequest& req) {
  const std::span<const int32_t> context(req.context);
  if (context.empty()) return Status::Error("the LLM needs at least one context token");
  if (req.n < 1) return Status::Error("ask the LLM for at least one token");
  if (req.lookahead < 0) return Status::Error("lookahead must not be negative");
  TLR_RETURN_IF_ERROR(req.sampling.Validate());
  const int64_t V = llm_.config().n_vocab;
  for (int32_t t : context) {
    if (t < 0 || t >= V) return Status::Error("context token " + std::to_string(t) + " is out of range");
  }
  if (static_cast<int64_t>(context.size()) + req.n > n_ctx_) {
    return Status::Error("context of " + std::to_string(context.size()) + " + " + std::to_string(req.n) +
                         " tokens exceeds the LLM cache of " + std::to_string(n_ctx_));
  }
  // Lookahead is a hint: as much of it as fits in the cache.
  const int64_t lookahead = std::min<int64_t>(req.lookahead, n_ctx_ - static_cast<int64_t>(context.size()) - req.n);
  std::lock_guard<std::mutex> l(mu_);
  if (!cache_) {
    TLR_ASSIGN_OR_RETURN(KvCache c, llm_.NewCache(n_ctx_));
    cache_ = std::make_unique<KvCache>(std::move(c));
  }
  if (req.sampling.temperature > 0 && (!sampler_ || sampler_->params().seed != req.sampling.seed ||
                                       sampler_->params().temperature != req.sampling.temperature ||
                                       sampler_->params().top_k != req.sampling.top_k ||
                                       sampler_->params().top_p != req.sampling.top_p ||
                                       sampler_->params().min_p != req.sampling.min_p ||
                                       sampler_->params().repeat_penalty != req.sampling.repeat_penalty ||
                                       sampler_->params().repeat_last_n != req.sampling.repeat_last_n)) {
    sampler_ = std::make_unique<Sampler>(req.sampling, static_cast<int32_t>(V));
  }
  // Keep the longest common prefix; always re-read at least the last token (its logits are
  // not kept between calls).
  size_t common = 0;
  while (common < held_.size() && common < context.size() && held_[common] == context[common]) ++common;
  common = std::min(common, context.size() - 1);
  cache_->Truncate(static_cast<int64_t>(common));
  held_.assign(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(common));
  logits_.resize(V);
  ForwardContext ctx(&pool_);
  LlmReply reply;
  reply.ingested = static_cast<int64_t>(context.size() - common);
  SequenceInput in{cache_.get(), context.subspan(common), OutputRows::kLast, logits_.data(), nullptr};
  auto forward = [&](std::span<SequenceInput> ins) {
    const auto t = std::chrono::steady_clock::now();
    Status st = llm_.Forward(ins, &ctx);
    work_.forward_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    return st;
  };
  Status s = forward({&in, 1});
  if (!s.ok()) {
    held_.clear();
    cache_->Truncate(0);
    return s;
  }
  held_.assign(context.begin(), context.end());
  total_ingested_ += reply.ingested;
  work_.prefilled += reply.ingested;
  std::vector<int32_t> history(context.begin(), context.end());
  int64_t total = req.n + lookahead;
  std::string_view heal = req.prefix;
  int64_t n_reply = req.n;
  if (!heal.empty() && !constraint_) constraint_ = std::make_unique<PrefixConstraint>(llm_.tokenizer());
  for (int64_t k = 0; k < total; ++k) {
    if (!heal.empty() && !constraint_->Mask(heal, logits_.data())) {
      return Status::Error("no token of the LLM's vocabulary continues the held-back text");
    }
    const int32_t tok = req.sampling.temperature <= 0 ? ArgMax(logits_.data(), V)
                                                      : sampler_->Sample(logits_.data(), history);
    if (!heal.empty()) {  // a token spelling the prefix: on top of the n asked for
      heal = constraint_->After(heal, tok);
      ++total;
      ++n_reply;
    }
    ++work_.generated;
    if (k < n_reply) {
      reply.tokens.push_back(tok);
      reply.logprobs.push_back(LogProb(logits_.data(), V, tok));
    } else {
      reply.lookahead.push_back(tok);
    }
    history.push_back(tok);
    if (k + 1 == total || llm_.tokenizer().IsEndOfGeneration(tok)) break;
    SequenceInput step{cache_.get(), {&history.back(), 1}, OutputRows::kLast, logits_.data(), nullptr};
    s = forward({&step, 1});
    if (!s.ok()) {
      held_.clear();
      cache_->Truncate(0);
      return s;
    }
    held_.push_back(tok);
  }
  return reply;
}

// --- DelayedLlm ------------------------------------------------------------------------------

DelayedLlm::DelayedLlm(LlmBackend* inner, double rtt_s, double jitter_s, uint64_t seed)
    : inner_(inner), rtt_s_(rtt_s), jitter_s_(jitter_s), state_(seed * 0x9e3779b97f4a7c15ull + 1) {
  timer_ = std::thread([this] { TimerLoop(); });
}

DelayedLlm::~DelayedLlm() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;  // pending deliveries run at once; calls not yet sent fail
  }
  cv_.notify_all();
  timer_.join();
}

double DelayedLlm::sim_delay_s() const {
  std::lock_guard<std::mutex> l(mu_);
  return sim_delay_s_;
}

void DelayedLlm::Schedule(Clock::time_point at, std::function<void()> fn) {
  // Notified under the lock: the inner backend's threads call this, and once the lock is
  // released the timer thread may run the event, finish the last call and let the destructor
  // destroy cv_ (ThreadSanitizer found the race with an unlocked notify).
  std::lock_guard<std::mutex> l(mu_);
  timers_.emplace(at, std::move(fn));
  cv_.notify_all();
}

void DelayedLlm::TimerLoop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (timers_.empty()) {
      if (stop_ && outstanding_ == 0) return;
      cv_.wait(l);
      continue;
    }
    auto it = timers_.begin();
    if (!stop_ && Clock::now() < it->first) {
      cv_.wait_until(l, it->first);
      continue;
    }
    std::function<void()> fn = std::move(it->second);
    timers_.erase(it);
    l.unlock();
    fn();  // runs on this thread only, one event at a time
    l.lock();
  }
}

std::shared_ptr<LlmCall> DelayedLlm::Submit(LlmRequest request, std::function<void()> on_done) {
  auto outer = std::make_shared<LlmCall>(std::move(on_done));
  double d;
  {
    std::lock_guard<std::mutex> l(mu_);
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    const double u = static_cast<double>(state_ >> 11) / 9007199254740992.0;  // [0, 1)
    d = std::max(0.0, rtt_s_ + jitter_s_ * (2 * u - 1));
    ++outstanding_;
  }
  // Ends the outer call and, for calls that reached the LLM, counts their simulated time.
  auto finish = [this, outer](Expected<LlmReply> r, double delay) {
    {
      std::lock_guard<std::mutex> l(mu_);
      sim_delay_s_ += delay;
      --outstanding_;
    }
    cv_.notify_all();
    outer->Complete(std::move(r));
  };
  const auto sent = Clock::now();
  Schedule(sent + Seconds(d / 2), [this, outer, finish, d, req = std::move(request)]() mutable {
    bool stopping;
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping = stop_;
    }
    if (stopping || outer->cancelled()) {
      finish(Status::Error(stopping ? "the LLM backend was closed" : "the call was cancelled"), d / 2);
      return;
    }
    // The reply travels back for the other half of the round trip. The inner call may complete
    // on another thread at any time; its delivery is an event on this thread, so it cannot run
    // before `*inner` is assigned below.
    auto inner = std::make_shared<std::shared_ptr<LlmCall>>();
    *inner = inner_->Submit(std::move(req), [this, inner, finish, d]() {
      Schedule(Clock::now() + Seconds(d / 2), [inner, finish, d]() { finish((*inner)->Wait(), d); });
    });
  });
  return outer;
}

}  // namespace tlr
