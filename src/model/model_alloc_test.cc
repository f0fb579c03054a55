// No heap allocation per decoded token (model label): this test binary counts every call to
// the global operator new, warms a decode loop up, then requires zero allocations over 64
// further decode steps (forward pass, logits, greedy and top-k/top-p sampling).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "model/model.h"
#include "model/random_model.h"
#include "model/sampler.h"
#include "ops/thread_pool.h"

#if defined(__SANITIZE_ADDRESS__)
#define TLR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TLR_ASAN 1
#endif
#endif

namespace {
std::atomic<uint64_t> g_allocs{0};
}

#ifndef TLR_ASAN  // ASan has its own operator new; counting is for the regular build

void* operator new(size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#endif

namespace tlr {
namespace {

TEST(ModelAlloc, NoHeapAllocationPerDecodedToken) {
#ifdef TLR_ASAN
  GTEST_SKIP() << "allocation counting needs the regular build (ASan replaces operator new)";
#endif
  const auto path = std::filesystem::temp_directory_path() / ("tlr_alloc_" + std::to_string(::getpid()) + ".gguf");
  RandomModelOptions o;
  o.preset = "tiny";
  o.arch = "qwen2";
  o.type = "q8_0";
  ASSERT_TRUE(WriteRandomModel(o, path.string()).ok());
  auto m = Model::Load(path.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Model& model = **m;
  ThreadPool pool(2);
  ForwardContext ctx(&pool);
  auto cache = model.NewCache(256);
  ASSERT_TRUE(cache.ok());
  std::vector<float> logits(model.config().n_vocab);
  std::vector<int32_t> history = {5, 17, 260, 300};
  history.reserve(256);
  SamplerParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.9f;
  Sampler sampler(sp, static_cast<int32_t>(model.config().n_vocab));
  SequenceInput in{&*cache, history, OutputRows::kLast, logits.data(), nullptr};
  ASSERT_TRUE(model.Forward({&in, 1}, &ctx).ok());
  auto step = [&] {
    const int32_t t = sampler.Sample(logits.data(), history);
    history.push_back(t);
    SequenceInput s{&*cache, {&history.back(), 1}, OutputRows::kLast, logits.data(), nullptr};
    ASSERT_TRUE(model.Forward({&s, 1}, &ctx).ok());
  };
  for (int i = 0; i < 4; ++i) step();  // warm-up: buffers reach their size
  const uint64_t before = g_allocs.load();
  for (int i = 0; i < 64; ++i) step();
  const uint64_t after = g_allocs.load();
  EXPECT_EQ(after - before, 0u) << "heap allocations during 64 decode steps";
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + ".tlrw");  // the weight cache the load wrote beside it
}

}  // namespace
}  // namespace tlr
