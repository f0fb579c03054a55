// Training R2R's router network (r2r_net.h) in process (routing layer), as tools/train/r2r_torch.py
// trains it in PyTorch and R2R (thu-nics/R2R) trains its own: the SLM's token embedding frozen,
// BCE on "critical" (the SLM's token must be routed: label 0), Adam, the epoch of the best AUROC
// on the held-out questions kept. Backpropagation by hand through LayerNorm, exact GELU and the
// residual blocks; matrix products on the ops layer's F32 MatMul. No dropout (R2R's 0.1 is an
// identity at inference; the epoch choice on held-out questions guards against overfitting).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "routing/mlp_train.h"
#include "routing/r2r_net.h"
#include "util/status.h"

namespace tlr {

class ThreadPool;

struct R2rTrainOptions {
  std::vector<int64_t> dims = {64, 64, 48};  // the backbone's widths (R2R's default config: 6 x 1024)
  int expansion = 2;                         // a block's MLP widens by this
  bool normalize_input = false;              // LayerNorm the hidden state and embedding, softmax the logits
  int epochs = 8;
  int patience = 0;  // stop after this many epochs without a better held-out AUROC (0: never)
  int batch = 256;
  float lr = 1e-3f;
  uint64_t seed = 1;
  // After every epoch: epoch, train loss, held-out loss, held-out AUROC.
  std::function<void(int, float, float, float)> on_epoch;
};

struct R2rTrainResult {
  R2rNet net;  // token_embeddings.weight is the SLM's embedding table
  int epochs = 0, best_epoch = 0;
  float train_loss = 0, val_loss = 0, val_auroc = 0;
};

// `train` and `val` carry per position the SLM's hidden state (x), top-K logits and argmax token
// (router_train.h collects them for kind r2r); `embedding` is the SLM's input embedding
// [vocab, embed]. Both classes must be present in `train`.
Expected<R2rTrainResult> TrainR2rNetwork(const RouterExamples& train, const RouterExamples& val,
                                         const std::vector<float>& embedding, int64_t vocab,
                                         const R2rTrainOptions& opts, ThreadPool* pool);

// For the test: backpropagation against central differences of the loss on a few random
// positions through a network of that layout; the worst relative error over sampled entries of
// every trained tensor.
double R2rGradientCheck(int64_t hidden, int64_t embed, int64_t topk, int64_t vocab, const R2rTrainOptions& opts);

}  // namespace tlr
