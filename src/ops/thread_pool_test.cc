// ThreadPool (unit): every index is visited exactly once, for any thread count and chunk.
#include "ops/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tlr {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 100, 1001}) {
      for (int64_t chunk : {0, 1, 3, 64}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> max_thread{0};
        pool.ParallelFor(n, chunk, [&](int64_t b, int64_t e, int t) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
          int m = max_thread.load();
          while (t > m && !max_thread.compare_exchange_weak(m, t)) {
          }
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
        EXPECT_LT(max_thread.load(), threads);
      }
    }
  }
}

TEST(ThreadPool, ManySmallJobsInARow) {
  ThreadPool pool(2);
  int64_t total = 0;
  std::vector<int64_t> part(2);
  for (int job = 0; job < 20000; ++job) {
    part[0] = part[1] = 0;
    pool.ParallelFor(2, 1, [&](int64_t b, int64_t, int) { part[b] = b + 1; });
    total += part[0] + part[1];
  }
  EXPECT_EQ(total, 3 * 20000);
}

// Loops after the workers have gone to sleep (idle longer than their spin time) and loops
// issued while a worker is still waking: every index once, and each loop sees only its own
// function (a late worker never runs a chunk of a loop that has ended).
TEST(ThreadPool, SleepingAndLateWorkers) {
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 6; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(round % 2 ? 5 : 0));
      for (int job = 0; job < 200; ++job) {
        const int64_t n = 1 + (job * 7 + round) % 37;
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, 1 + job % 3, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1 + job, std::memory_order_relaxed);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1 + job) << "job " << job << " index " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tlr
