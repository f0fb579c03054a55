// ThreadPool (ops layer). Workers spin on the generation counter for a while after each loop
// (a decode step issues a parallel loop every few microseconds, and the next token's first
// loop follows the last one within a millisecond), then sleep on a condition variable. The
// caller counts finished chunks, not workers: a worker still waking up (a sleeping vCPU can
// take hundreds of microseconds) costs the caller nothing, where waiting for every worker to
// check in cost Q5_0 decode at 2 threads ~30% of its time.
#include "ops/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace tlr {
namespace {
// How long an idle worker spins before it sleeps, and how long the caller spins for running
// chunks before it yields its core between checks.
constexpr auto kSpinTime = std::chrono::microseconds(1000);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Spins until done() or the spin time has passed; true if done().
template <typename Done>
bool SpinUntil(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

}  // namespace

// TLR_MAX_THREADS=N caps every pool at N threads (the caller included): for shared machines,
// and for emulators where creating a thread does not work (qemu-user 7.2 on the 6.18 kernel
// here never returns from pthread_create; `make aarch64-test` runs with N = 1).
int MaxThreads() {
#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
  return 1;  // the browser's single-thread build: no thread can be started
#endif
  static const int max = [] {
    const char* v = std::getenv("TLR_MAX_THREADS");
    const int n = v ? std::atoi(v) : 0;
    return n >= 1 ? n : 1 << 20;
  }();
  return max;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::clamp(n_threads, 1, MaxThreads())) {
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::Work(int thread) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t left = static_cast<uint32_t>(c);
    if (left == 0) return;
    if (!claim_.compare_exchange_weak(c, c - 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // The chunk is ours, so the loop it belongs to is still running: its fields are stable.
    const int64_t b = (n_chunks_ - left) * chunk_;
    thunk_(ctx_, b, std::min(n_, b + chunk_), thread);
    done_.fetch_add(1, std::memory_order_acq_rel);
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = seen;
    if (!SpinUntil([&] { return (g = generation_.load(std::memory_order_acquire)) != seen; })) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_relaxed);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      g = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = g;
    Work(thread);
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
  // Chunk counts must fit the 32 bits of claim_.
  chunk = std::max(chunk, (n + 0xfffffffe) / 0xffffffff);
  chunk_ = chunk;
  n_chunks_ = (n + chunk - 1) / chunk;
  done_.store(0, std::memory_order_relaxed);
  ++loop_id_;
  claim_.store((static_cast<uint64_t>(loop_id_) << 32) | static_cast<uint64_t>(n_chunks_), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_relaxed) > 0) cv_.notify_all();
  Work(0);
  // Wait for the chunks other threads are running (usually microseconds), then yield the
  // core between checks: another process may hold the core a worker needs.
  auto all_done = [&] { return done_.load(std::memory_order_acquire) == n_chunks_; };
  while (!SpinUntil(all_done)) std::this_thread::yield();
}

}  // namespace tlr
