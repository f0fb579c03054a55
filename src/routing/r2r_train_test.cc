// R2R router training (unit): backpropagation against finite differences through both input
// variants; a network that learns a rule only the hidden state, token and logits together
// reveal; and the trained tensors, read by the inference network (r2r_net.h), score the
// held-out positions as the trainer did.
#include "routing/r2r_train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "ops/thread_pool.h"

namespace tlr {
namespace {

TEST(R2rTrain, BackpropagationMatchesFiniteDifferences) {
  for (bool normalize : {false, true}) {
    R2rTrainOptions o;
    o.dims = {6, 6, 5};  // a block that keeps its width and one that changes it (dim_change)
    o.expansion = 2;
    o.normalize_input = normalize;
    const double worst = R2rGradientCheck(/*hidden=*/4, /*embed=*/3, /*topk=*/5, /*vocab=*/7, o);
    EXPECT_LT(worst, 2e-2) << "normalize_input " << normalize;
  }
}

// Positions whose label is "keep" when h[0] + (top[0] - top[1]) + (token even ? 1 : -1) > 0.
RouterExamples Synthetic(int64_t n, int64_t H, int64_t K, int64_t vocab, uint64_t seed) {
  RouterExamples e;
  e.dim = H;
  e.topk = K;
  uint64_t s = seed;
  auto uni = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) * (1.0 / 16777216.0));
  };
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> h(static_cast<size_t>(H)), top(static_cast<size_t>(K));
    for (float& v : h) v = 4 * uni() - 2;
    float x = 5 * uni();
    for (float& v : top) v = (x -= uni());  // descending
    const int32_t tok = static_cast<int32_t>(uni() * vocab) % static_cast<int32_t>(vocab);
    const float score = h[0] + (top[0] - top[1]) * 2 - 1 + (tok % 2 == 0 ? 1.0f : -1.0f);
    e.x.insert(e.x.end(), h.begin(), h.end());
    e.top_logits.insert(e.top_logits.end(), top.begin(), top.end());
    e.token.push_back(tok);
    e.label.push_back(score > 0);
    e.group.push_back(static_cast<int32_t>(i));
  }
  return e;
}

TEST(R2rTrain, LearnsARuleAndTheInferenceNetworkAgrees) {
  const int64_t H = 8, K = 5, V = 20, E = 4;
  const RouterExamples tr = Synthetic(3000, H, K, V, 1), va = Synthetic(600, H, K, V, 2);
  std::vector<float> emb(static_cast<size_t>(V * E));
  for (int64_t t = 0; t < V; ++t) {
    for (int64_t j = 0; j < E; ++j) emb[t * E + j] = std::sin(0.7f * static_cast<float>(t * E + j + 1));
    emb[t * E + 1] += t % 2 == 0 ? 1.0f : -1.0f;  // the token's part of the rule, there to be found
  }
  ThreadPool pool(2);
  for (bool normalize : {false, true}) {
    R2rTrainOptions o;
    o.dims = {32, 24};
    o.epochs = 12;
    o.batch = 64;
    o.lr = 3e-3f;
    o.normalize_input = normalize;
    auto r = TrainR2rNetwork(tr, va, emb, V, o, &pool);
    ASSERT_TRUE(r.ok()) << r.status().message();
    // LayerNorm over the hidden state blurs h[0] (it is read relative to the other dimensions'
    // mean and spread) and softmax keeps top[0] - top[1] only through a ratio: less to learn from.
    EXPECT_GT(r->val_auroc, normalize ? 0.8 : 0.95) << "normalize_input " << normalize;
    std::printf("normalize_input %d: held-out AUROC %.4f (epoch %d of %d)\n", normalize, r->val_auroc, r->best_epoch,
                r->epochs);
    // The inference network, from the exported tensors, gives the same held-out scores.
    std::vector<float> conf(static_cast<size_t>(va.size()));
    R2rScratch scratch;
    for (int64_t i = 0; i < va.size(); ++i) {
      conf[i] = 1.0f - Sigmoid(r->net.Logit(va.x.data() + i * H, va.token[i], va.top_logits.data() + i * K, &scratch));
    }
    EXPECT_NEAR(Auroc(conf, va.label), r->val_auroc, 1e-4);
    EXPECT_EQ(r->net.normalize_input, normalize);
    EXPECT_EQ(r->net.n_blocks, 2);
  }
}

TEST(R2rTrain, BadExamplesAreErrors) {
  RouterExamples tr = Synthetic(50, 4, 3, 10, 3);
  std::vector<float> emb(10 * 2, 0.5f);
  R2rTrainOptions o;
  EXPECT_FALSE(TrainR2rNetwork(tr, {}, emb, 0, o, nullptr).ok());
  RouterExamples no_logits = tr;
  no_logits.top_logits.clear();
  EXPECT_FALSE(TrainR2rNetwork(no_logits, {}, emb, 10, o, nullptr).ok());
  RouterExamples bad_token = tr;
  bad_token.token[3] = 99;
  EXPECT_FALSE(TrainR2rNetwork(bad_token, {}, emb, 10, o, nullptr).ok());
  RouterExamples one_class = tr;
  for (auto& l : one_class.label) l = 1;
  auto r = TrainR2rNetwork(one_class, {}, emb, 10, o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("one class"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tlr
