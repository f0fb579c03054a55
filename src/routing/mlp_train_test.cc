// Router network training: AUROC, learning a non-linear rule (and a linear head failing to),
// BatchNorm folding consistent with the trained network.
#include "routing/mlp_train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace tlr {
namespace {

TEST(Auroc, KnownValues) {
  const std::vector<uint8_t> y = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(Auroc(std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}, y), 1.0);
  EXPECT_DOUBLE_EQ(Auroc(std::vector<float>{0.4f, 0.3f, 0.2f, 0.1f}, y), 0.0);
  EXPECT_DOUBLE_EQ(Auroc(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, y), 0.5);
  EXPECT_DOUBLE_EQ(Auroc(std::vector<float>{0.1f, 0.3f, 0.2f, 0.4f}, y), 0.75);
  EXPECT_DOUBLE_EQ(Auroc(std::vector<float>{0.1f, 0.3f}, std::vector<uint8_t>{1, 1}), 0.5);
}

// label = 1 when x0 * x1 > 0 (XOR of signs), with 14 noise dimensions; 30% positives by
// shifting the threshold, so class balancing matters.
RouterExamples Xor(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  RouterExamples e;
  e.dim = 16;
  for (int i = 0; i < n; ++i) {
    float x[16];
    for (float& v : x) v = nd(rng);
    e.x.insert(e.x.end(), x, x + 16);
    e.label.push_back(x[0] * x[1] > 0.4f);
    e.group.push_back(i);
  }
  return e;
}

TEST(MlpTrain, CiterLearnsANonLinearRuleAndColmCannot) {
  const RouterExamples tr = Xor(4000, 1), va = Xor(1000, 2);
  MlpTrainOptions o;
  o.kind = RouterKind::kCiter;
  o.max_epochs = 40;
  o.batch = 64;
  o.lr = 3e-3f;
  int epochs_seen = 0;
  o.on_epoch = [&](int, float, float, float) { ++epochs_seen; };
  auto r = TrainRouterNetwork(tr, va, o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->val_auroc, 0.95f);
  EXPECT_EQ(epochs_seen, r->epochs);
  EXPECT_LE(r->best_epoch, r->epochs);
  ASSERT_EQ(r->layers.size(), 3u);
  EXPECT_EQ(r->layers[0].n_out, 32);

  // The folded router computes what the trained network computed in evaluation mode: its
  // confidences reproduce the reported validation loss and AUROC.
  RouterInfo info;
  info.kind = RouterKind::kCiter;
  auto router = Router::FromLayers(info, r->layers);
  ASSERT_TRUE(router.ok());
  std::vector<float> conf(va.size());
  router->ConfidenceBatch(va.x.data(), va.size(), conf.data(), nullptr);
  EXPECT_NEAR(Auroc(conf, va.label), r->val_auroc, 1e-4);
  int64_t pos = 0;
  for (uint8_t l : tr.label) pos += l;
  const double w1 = tr.size() / (2.0 * pos), w0 = tr.size() / (2.0 * (tr.size() - pos));
  double loss = 0, wsum = 0;
  for (int64_t i = 0; i < va.size(); ++i) {
    const double p = std::clamp<double>(conf[i], 1e-7, 1 - 1e-7);
    const double w = va.label[i] ? w1 : w0;
    loss -= w * (va.label[i] ? std::log(p) : std::log(1 - p));
    wsum += w;
  }
  EXPECT_NEAR(loss / wsum, r->val_loss, 2e-3);

  o.kind = RouterKind::kColm;
  auto lin = TrainRouterNetwork(tr, va, o, nullptr);
  ASSERT_TRUE(lin.ok());
  EXPECT_LT(lin->val_auroc, 0.65f);
  ASSERT_EQ(lin->layers.size(), 1u);
}

TEST(MlpTrain, ColmLearnsALinearRule) {
  RouterExamples tr = Xor(2000, 3), va = Xor(500, 4);
  for (RouterExamples* e : {&tr, &va}) {
    for (int64_t i = 0; i < e->size(); ++i) e->label[i] = e->x[i * 16 + 2] - 0.5f * e->x[i * 16 + 3] > 0.3f;
  }
  MlpTrainOptions o;
  o.kind = RouterKind::kColm;
  o.lr = 1e-2f;
  auto r = TrainRouterNetwork(tr, va, o, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->val_auroc, 0.98f);
}

TEST(MlpTrain, RejectsDegenerateInput) {
  RouterExamples tr = Xor(100, 5), va = Xor(50, 6);
  MlpTrainOptions o;
  o.kind = RouterKind::kMaxProb;
  EXPECT_FALSE(TrainRouterNetwork(tr, va, o, nullptr).ok());
  o.kind = RouterKind::kCiter;
  std::fill(tr.label.begin(), tr.label.end(), 1);
  EXPECT_FALSE(TrainRouterNetwork(tr, va, o, nullptr).ok());
  va.dim = 8;
  EXPECT_FALSE(TrainRouterNetwork(Xor(100, 5), va, o, nullptr).ok());
}

}  // namespace
}  // namespace tlr
