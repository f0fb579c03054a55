// ThreadPool (ops layer). Workers spin briefly on the generation counter (a decode step
// issues a parallel loop every few microseconds), then sleep on a condition variable; the
// caller spins briefly for the workers to finish, then yields its core.
#include "ops/thread_pool.h"

#include <algorithm>

namespace tlr {
namespace {
// Pause-loop iterations before a waiting thread yields or sleeps (tens of microseconds: a
// decode step leaves gaps between its parallel loops that 4000 did not cover, so workers
// slept and were woken ~10 times per token; 20000 gave Q5_0 decode at 2 threads ~+20%).
constexpr int kSpins = 20000;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::Work(int thread) {
  for (;;) {
    const int64_t b = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (b >= n_) break;
    thunk_(ctx_, b, std::min(n_, b + chunk_), thread);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpins; ++spin) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    Work(thread);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::Run(int64_t n, int64_t chunk, Thunk thunk, void* ctx) {
  if (n <= 0) return;
  if (chunk <= 0) chunk = std::max<int64_t>(1, (n + 4 * n_threads_ - 1) / (4 * n_threads_));
  if (n_threads_ == 1 || n <= chunk) {
    for (int64_t b = 0; b < n; b += chunk) thunk(ctx, b, std::min(n, b + chunk), 0);
    return;
  }
  thunk_ = thunk;
  ctx_ = ctx;
  n_ = n;
  chunk_ = chunk;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  Work(0);
  // Spin briefly (the workers usually finish within microseconds), then yield: when another
  // process holds the core a worker needs, spinning would only keep it from running.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpins) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace tlr
