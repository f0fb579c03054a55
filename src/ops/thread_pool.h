// ThreadPool (ops layer): a fixed set of worker threads that run one parallel loop at a time.
//
// Passed explicitly to everything that computes (no global pool), so two models can run side
// by side with their own threads. ParallelFor hands out chunks of [0, n) through an atomic
// counter (so a slow core does not hold everyone up); the calling thread works too, and waits
// only for chunks that are running, never for a worker that has not woken up yet (a worker
// that wakes late finds the chunks taken, or joins the next loop). No heap allocation per
// call. Not reentrant: one ParallelFor at a time per pool (callers on several threads must
// each own a pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace tlr {

// The cap TLR_MAX_THREADS puts on every pool (threads, the caller included), or a large number.
// 1 means: start no thread at all (the LLM calls of the device then run on the calling thread).
int MaxThreads();

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread: ThreadPool(1) runs everything inline. The
  // environment variable TLR_MAX_THREADS caps it (n_threads() says what a pool got).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) over chunks covering [0, n), each of at most `chunk`
  // items (0 = pick: about four chunks per thread). Returns when all are done.
  template <typename Fn>
  void ParallelFor(int64_t n, int64_t chunk, Fn&& fn) {
    struct Ctx {
      std::remove_reference_t<Fn>* fn;
    } ctx{&fn};
    Run(n, chunk, [](void* c, int64_t b, int64_t e, int t) { (*static_cast<Ctx*>(c)->fn)(b, e, t); },
        &ctx);
  }

 private:
  using Thunk = void (*)(void*, int64_t, int64_t, int);
  void Run(int64_t n, int64_t chunk, Thunk thunk, void* ctx);
  // Claims and runs chunks of the current loop until none is left.
  void Work(int thread);
  void WorkerLoop(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The current loop: written by the caller before it publishes claim_, read by a worker
  // only after it has claimed a chunk (so never while the caller rewrites them).
  Thunk thunk_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, n_chunks_ = 0;
  uint32_t loop_id_ = 0;
  // (loop id << 32) | chunks not yet claimed. Claiming is a compare-exchange, so a worker
  // holding a stale value cannot take a chunk of a loop that has ended.
  alignas(64) std::atomic<uint64_t> claim_{0};
  // Chunks of the current loop finished (the caller returns when all are).
  alignas(64) std::atomic<int64_t> done_{0};
  // Workers wait for generation_ to change (spinning a while, then on cv_).
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
};

}  // namespace tlr
