// Training a learned router's network from labelled hidden states (routing layer): BCE with
// class balancing, Adam, a validation split, early stopping on validation loss, AUROC. The
// CITER MLP trains with BatchNorm (batch statistics, running averages for evaluation) and
// dropout; the result has BatchNorm folded into the first layer, so it is an ordinary Router.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "routing/router.h"
#include "util/status.h"

namespace tlr {

// The logistic function: a router logit to a probability.
inline float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

class ThreadPool;

// Labelled examples: x [n, dim] (the SLM's hidden states), label 1 = the SLM's token is fine
// (keep), 0 = route to the LLM; `group` keeps positions of one question together when
// splitting into train and validation.
struct RouterExamples {
  int64_t dim = 0;
  std::vector<float> x;
  std::vector<uint8_t> label;
  std::vector<int32_t> group;
  // For feature dumps (routers that read more than the hidden state, e.g. R2R's): per example the
  // SLM's top-`topk` logits, largest first [n, topk], and its argmax token [n]; empty otherwise.
  int64_t topk = 0;
  std::vector<float> top_logits;
  std::vector<int32_t> token;
  int64_t size() const { return static_cast<int64_t>(label.size()); }
};

struct MlpTrainOptions {
  RouterKind kind = RouterKind::kCiter;
  int max_epochs = 60;
  int batch = 256;
  float lr = 1e-3f;
  float weight_decay = 1e-4f;
  float dropout = 0.1f;
  int patience = 8;          // epochs without a better validation loss before stopping
  uint64_t seed = 1;
  // Progress after every epoch: epoch, train loss, validation loss, validation AUROC.
  std::function<void(int, float, float, float)> on_epoch;
};

struct MlpTrainResult {
  std::vector<DenseLayer> layers;  // folded, ready for Router::FromLayers
  int epochs = 0, best_epoch = 0;
  float train_loss = 0, val_loss = 0, val_auroc = 0;
};

// Trains on `train`, selects the epoch by loss on `val` (both must have both classes).
Expected<MlpTrainResult> TrainRouterNetwork(const RouterExamples& train, const RouterExamples& val,
                                            const MlpTrainOptions& opts, ThreadPool* pool);

// Area under the ROC curve of `score` predicting label 1 (ties count half). 0.5 when one
// class is absent.
double Auroc(std::span<const float> score, std::span<const uint8_t> label);

}  // namespace tlr
