// SessionStore: least-recently-used eviction under the KV budget, and eviction while other
// threads use their sessions the way LlmEngine's calls do (holding the session's lock, touching
// last_used). No model: the store only counts positions. Under ThreadSanitizer (make tsan-test)
// the second test catches a read of another session's fields without its lock.
#include "server/session_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tlr {
namespace {

constexpr uint64_t kBytesPerPosition = 100;

EngineLimits Limits(int64_t budget_positions) {
  EngineLimits lim;
  lim.kv_budget_bytes = static_cast<uint64_t>(budget_positions) * kBytesPerPosition;
  lim.prompt_cache_slots = 0;
  return lim;
}

// A call's use of a session: under its lock, it is touched and holds `positions`.
void Use(EngineSession* s, int64_t positions) {
  std::lock_guard<std::mutex> l(s->mu);
  s->last_used = EngineSession::Clock::now();
  s->high_water = positions;
}

TEST(SessionStore, MakeRoomEvictsTheLeastRecentlyUsedIdleSession) {
  SessionStore store(Limits(100), kBytesPerPosition, nullptr);
  auto a = store.Create(), b = store.Create(), self = store.Create();
  ASSERT_TRUE(a && b && self);
  Use(b.get(), 40);
  Use(a.get(), 40);  // used after b: b is the least recently used
  std::string why;
  std::lock_guard<std::mutex> l(self->mu);
  ASSERT_TRUE(store.MakeRoom(self.get(), 50, &why)) << why;
  EXPECT_EQ(b->high_water.load(), 0);
  EXPECT_EQ(a->high_water.load(), 40);
  // The room is reserved for self before the store's lock is let go: a call beside it that
  // needs 20 more finds 90 of the 100 positions taken and must evict a.
  EXPECT_EQ(self->high_water.load(), 50);
  EXPECT_EQ(store.kv_bytes(), 90 * kBytesPerPosition);
  // More than the whole budget is refused without evicting anyone.
  EXPECT_FALSE(store.MakeRoom(self.get(), 101, &why));
  EXPECT_EQ(a->high_water.load(), 40);
}

TEST(SessionStore, EvictionWhileOtherSessionsAreInUse) {
  SessionStore store(Limits(100), kBytesPerPosition, nullptr);
  auto a = store.Create(), b = store.Create(), self = store.Create();
  ASSERT_TRUE(a && b && self);
  std::atomic<bool> stop{false};
  // Relaxed: tells the loop below each device made progress without ordering the device's
  // writes before its reads (only the sessions' own locks may do that, as in the engine).
  std::atomic<int64_t> rounds[2] = {0, 0};
  // Two devices' calls keep starting and finishing on their own sessions (Next touches
  // last_used under the session's lock when it starts and when it ends).
  std::vector<std::thread> devices;
  for (int d = 0; d < 2; ++d) {
    devices.emplace_back([&, d] {
      EngineSession* s = d == 0 ? a.get() : b.get();
      while (!stop.load()) {
        {
          std::lock_guard<std::mutex> l(s->mu);
          s->last_used = EngineSession::Clock::now();
        }
        rounds[d].fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  int evicted = 0;
  for (int i = 0; i < 200; ++i) {
    Use(a.get(), 40);
    Use(b.get(), 40);
    Use(self.get(), 0);  // a fresh call each round (MakeRoom reserves its 50)
    for (auto& r : rounds) {
      const int64_t seen = r.load(std::memory_order_relaxed);
      while (r.load(std::memory_order_relaxed) < seen + 2) std::this_thread::yield();
    }
    std::string why;
    std::lock_guard<std::mutex> l(self->mu);
    // Needs 50 of the 100 positions: one of the two idle sessions must go, unless both are
    // in a call at that instant.
    if (store.MakeRoom(self.get(), 50, &why)) {
      EXPECT_EQ(a->high_water.load() + b->high_water.load(), 40) << "exactly one evicted";
      ++evicted;
    } else {
      EXPECT_NE(why.find("in progress"), std::string::npos) << why;
    }
  }
  stop = true;
  for (auto& t : devices) t.join();
  EXPECT_GT(evicted, 0);
}

}  // namespace
}  // namespace tlr
