// DeviceContextPool: the context sharing the longest prefix comes back, conversations keep their
// own, and the slot count and the KV budget drop the least recently used.
#include "device/session/context_pool.h"

#include <gtest/gtest.h>

#include "model/random_pair_fixture.h"

namespace tlr {
namespace {

class ContextPoolTest : public RandomPairTest<11, 12> {
 protected:
  // A context holding `tokens` (its cache written up to them, as a generation leaves it).
  std::unique_ptr<DeviceContext> Holding(const std::vector<int32_t>& tokens) {
    auto c = std::make_unique<DeviceContext>();
    auto cache = slm_->NewCache(64, KvMemory::kOnDemand);
    EXPECT_TRUE(cache.ok());
    c->slm.cache = std::move(cache).value();
    ForwardContext ctx(nullptr);
    std::vector<float> logits(slm_->config().n_vocab);
    SequenceInput in{&c->slm.cache, tokens, OutputRows::kLast, logits.data(), nullptr};
    EXPECT_TRUE(slm_->Forward({&in, 1}, &ctx).ok());
    c->slm.tokens = tokens;
    return c;
  }
  uint64_t PerPosition() const { return KvCache::BytesPerPosition(slm_->config(), GgmlType::kF16); }
};

TEST_F(ContextPoolTest, TakesTheContextSharingTheLongestPrefix) {
  ContextPoolOptions o;
  o.max_slots = 4;
  o.n_ctx = 64;
  DeviceContextPool pool(o, PerPosition());
  pool.Give(Holding({1, 2, 3, 4}));
  pool.Give(Holding({1, 2, 7, 8, 9}));
  pool.Give(Holding({5, 6}));
  EXPECT_EQ(pool.slots(), 3);
  EXPECT_EQ(pool.bytes(), 11 * PerPosition());
  // Each conversation gets its own back.
  auto a = pool.Take(std::vector<int32_t>{1, 2, 3, 4, 10, 11});
  EXPECT_EQ(a->slm.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  auto b = pool.Take(std::vector<int32_t>{1, 2, 7, 8, 9, 12});
  EXPECT_EQ(b->slm.tokens, (std::vector<int32_t>{1, 2, 7, 8, 9}));
  EXPECT_EQ(pool.slots(), 1);
  // Nothing shared: a new empty context of the pool's size.
  auto fresh = pool.Take(std::vector<int32_t>{9, 9});
  EXPECT_FALSE(fresh->slm.has_cache());
  EXPECT_EQ(fresh->slm.n_ctx, 64);
  // A context without a cache is not kept.
  pool.Give(std::move(fresh));
  EXPECT_EQ(pool.slots(), 1);
}

TEST_F(ContextPoolTest, SlotCountAndBudgetDropTheLeastRecentlyUsed) {
  ContextPoolOptions o;
  o.max_slots = 2;
  o.n_ctx = 64;
  DeviceContextPool pool(o, PerPosition());
  pool.Give(Holding({1, 1}));
  pool.Give(Holding({2, 2}));
  pool.Give(Holding({3, 3}));  // the third: {1, 1} goes
  EXPECT_EQ(pool.slots(), 2);
  EXPECT_FALSE(pool.Take(std::vector<int32_t>{1, 1})->slm.has_cache());
  EXPECT_EQ(pool.Take(std::vector<int32_t>{2, 2})->slm.tokens, (std::vector<int32_t>{2, 2}));

  o.max_slots = 8;
  o.budget_bytes = 5 * PerPosition();
  DeviceContextPool small(o, PerPosition());
  small.Give(Holding({1, 2, 3}));
  small.Give(Holding({4, 5, 6}));  // 6 positions > 5: the older goes
  EXPECT_EQ(small.slots(), 1);
  EXPECT_EQ(small.Take(std::vector<int32_t>{4, 5, 6})->slm.tokens, (std::vector<int32_t>{4, 5, 6}));
  small.Give(Holding({1, 2, 3, 4, 5, 6}));  // larger than the whole budget: not kept
  EXPECT_EQ(small.slots(), 0);

  o.max_slots = 0;  // no prompt cache
  DeviceContextPool none(o, PerPosition());
  none.Give(Holding({1, 2}));
  EXPECT_EQ(none.slots(), 0);
}

}  // namespace
}  // namespace tlr
