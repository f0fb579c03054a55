// Sampler and chat formats (unit): greedy and filtered sampling, determinism per seed, the
// repetition penalty, parameter validation, and the exact ChatML / Llama 3 prompt text.
#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "model/chat.h"

namespace tlr {
namespace {

TEST(Sampler, GreedyPicksTheArgmaxLowestIdOnTies) {
  SamplerParams p;
  p.temperature = 0;
  Sampler s(p, 5);
  const float logits[5] = {0.1f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.Sample(logits, {}), 1);
  EXPECT_EQ(ArgMax(logits, 5), 1);
}

// The blocked ArgMax against the plain scan (first index of the largest value; NaN never
// wins): random lengths around the block size, ties, NaNs, infinities, the best in the tail.
TEST(Sampler, ArgMaxMatchesThePlainScan) {
  std::mt19937 rng(7);
  auto plain = [](const std::vector<float>& x) {
    size_t best = 0;
    for (size_t i = 1; i < x.size(); ++i) {
      if (x[i] > x[best]) best = i;
    }
    return static_cast<int32_t>(best);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t n = 1 + rng() % (trial < 1000 ? 200 : 5000);
    std::vector<float> x(n);
    const int levels = 1 + static_cast<int>(rng() % 8);  // few levels: many ties
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % levels)) - 3.0f;
    if (rng() % 4 == 0) x[rng() % n] = std::nanf("");
    if (rng() % 8 == 0) x[0] = std::nanf("");
    if (rng() % 8 == 0) x[rng() % n] = -INFINITY;
    if (rng() % 8 == 0) x[n - 1] = 100.0f;
    ASSERT_EQ(ArgMax(x.data(), static_cast<int64_t>(n)), plain(x)) << "trial " << trial << ", n " << n;
  }
}

// Greedy with a penalty equals penalising a copy by hand and taking the plain argmax.
TEST(Sampler, GreedyWithPenaltyMatchesPenalisedArgmax) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 300);
    std::vector<float> logits(n);
    for (float& v : logits) v = static_cast<float>(static_cast<int>(rng() % 9)) - 4.0f;
    std::vector<int32_t> history(rng() % 40);
    for (int32_t& t : history) t = static_cast<int32_t>(rng() % (n + 3)) - 1;  // some out of range
    SamplerParams p;
    p.temperature = 0;
    p.repeat_penalty = 1.0f + static_cast<float>(rng() % 20) / 10.0f;
    p.repeat_last_n = static_cast<int32_t>(rng() % 30);
    std::vector<float> ref = logits;
    std::set<int32_t> done;
    const size_t from = history.size() > static_cast<size_t>(p.repeat_last_n) ? history.size() - p.repeat_last_n : 0;
    for (size_t j = from; j < history.size(); ++j) {
      const int32_t t = history[j];
      if (t < 0 || t >= n || !done.insert(t).second) continue;
      ref[t] = ref[t] > 0 ? ref[t] / p.repeat_penalty : ref[t] * p.repeat_penalty;
    }
    Sampler s(p, n);
    ASSERT_EQ(s.Sample(logits.data(), history), ArgMax(ref.data(), n)) << "trial " << trial;
  }
}

TEST(Sampler, SameSeedSameTokensAndTopKRestricts) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.7f) * 3;
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 5;
  p.seed = 9;
  Sampler a(p, 100), b(p, 100);
  std::vector<std::pair<float, int>> sorted;
  for (int i = 0; i < 100; ++i) sorted.emplace_back(-logits[i], i);
  std::sort(sorted.begin(), sorted.end());
  std::set<int> allowed;
  for (int i = 0; i < 5; ++i) allowed.insert(sorted[i].second);
  std::set<int> seen;
  for (int i = 0; i < 300; ++i) {
    const int32_t x = a.SampleAt(logits.data(), {}, i);
    EXPECT_EQ(x, b.SampleAt(logits.data(), {}, i));
    EXPECT_TRUE(allowed.count(x)) << x;
    seen.insert(x);
  }
  EXPECT_GT(seen.size(), 2u);  // it does sample, not always the top token
  p.seed = 10;
  Sampler c(p, 100);
  int differ = 0;
  Sampler a2({p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n, 9}, 100);
  for (int i = 0; i < 50; ++i) differ += a2.SampleAt(logits.data(), {}, i) != c.SampleAt(logits.data(), {}, i);
  EXPECT_GT(differ, 0);
}

TEST(Sampler, DrawsAreKeyedBySeedAndPositionOnly) {
  // Counter-based: the token at a position does not depend on the draws made before it, so
  // speculative or cancelled work cannot shift later tokens (the decoder's pipeline relies on it).
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::cos(i * 1.3f);
  SamplerParams p;
  p.temperature = 0.9f;
  p.top_k = 0;
  p.seed = 3;
  Sampler fresh(p, 50), used(p, 50);
  for (int i = 0; i < 17; ++i) used.SampleAt(logits.data(), {}, 1000 + i);  // unrelated draws
  std::vector<int32_t> history;
  int distinct_positions = 0;
  for (int pos = 0; pos < 64; ++pos) {
    const int32_t a = fresh.Sample(logits.data(), history);
    EXPECT_EQ(a, used.SampleAt(logits.data(), history, history.size()));
    EXPECT_EQ(a, fresh.Sample(logits.data(), history));  // the same position again: the same draw
    distinct_positions += pos > 0 && a != history.back();
    history.push_back(a);
  }
  EXPECT_GT(distinct_positions, 10);  // different positions draw different numbers
  for (uint64_t pos = 0; pos < 1000; ++pos) {
    const double u = CounterUniform(7, pos);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_NE(CounterUniform(7, 5), CounterUniform(8, 5));
  EXPECT_NE(CounterUniform(7, 5), CounterUniform(7, 6));
}

TEST(Sampler, TopPAndMinPCutTheTail) {
  // Probabilities ~ 0.7, 0.2, 0.07, 0.03: top-p 0.8 keeps two tokens, min-p 0.2 keeps two.
  const float logits[4] = {std::log(0.7f), std::log(0.2f), std::log(0.07f), std::log(0.03f)};
  for (int mode = 0; mode < 2; ++mode) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    if (mode == 0) p.top_p = 0.8f;
    else p.min_p = 0.2f;
    Sampler s(p, 4);
    std::map<int, int> count;
    for (int i = 0; i < 2000; ++i) count[s.SampleAt(logits, {}, i)]++;
    EXPECT_EQ(count[2] + count[3], 0) << "mode " << mode;
    EXPECT_GT(count[1], 300);
    EXPECT_GT(count[0], count[1]);
  }
}

TEST(Sampler, RepetitionPenaltyDiscouragesRecentTokens) {
  const float logits[3] = {2.0f, 1.9f, 0.0f};
  SamplerParams p;
  p.temperature = 0;
  p.repeat_penalty = 1.5f;
  Sampler s(p, 3);
  const std::vector<int32_t> history = {0, 0};
  EXPECT_EQ(s.Sample(logits, history), 1);  // 2.0 / 1.5 < 1.9
  p.repeat_penalty = 1.0f;
  Sampler off(p, 3);
  EXPECT_EQ(off.Sample(logits, history), 0);
}

TEST(Sampler, ValidatesParameters) {
  SamplerParams p;
  EXPECT_TRUE(p.Validate().ok());
  p.temperature = -1;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_p = 0;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.min_p = 1;
  EXPECT_FALSE(p.Validate().ok());
}

TEST(Chat, FormatsChatMlAndLlama3) {
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi?"}};
  EXPECT_EQ(FormatChat(ChatFormat::kChatMl, msgs, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(FormatChat(ChatFormat::kLlama3, msgs, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(DetectChatFormat("... <|start_header_id|> ...", "qwen2"), ChatFormat::kLlama3);
  EXPECT_EQ(DetectChatFormat("{{'<|im_start|>' + ...", "llama"), ChatFormat::kChatMl);
  EXPECT_EQ(DetectChatFormat("", "llama"), ChatFormat::kLlama3);
  EXPECT_EQ(DetectChatFormat("", "qwen2"), ChatFormat::kChatMl);
}

}  // namespace
}  // namespace tlr
