// Router training data for training elsewhere (routing layer): `tlr router train
// --dump-features DIR` writes the labelled positions it trains on, so a researcher can train the
// router network in PyTorch (tools/train/router_torch.py) and bring it back with `tlr router
// import`. DIR gets
//   features-00000.safetensors, ...   per shard: "features" F32 [n, hidden] (the SLM's final
//                                     hidden state at the position), "labels" U8 [n] (1: the
//                                     SLM's token is fine, keep; 0: route), "question" I32 [n]
//                                     (index into the manifest's questions), "validation" U8 [n]
//                                     (held out by the trainer's split)
//   manifest.json                     {"format": "tlr-router-features-1", "hidden_size",
//                                      "slm_fingerprint", "rows", "shards": [{"file", "rows"}],
//                                      "questions": [{"row", "id"}]}
// Shards are written atomically and the manifest last: a directory with a manifest is whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "routing/mlp_train.h"
#include "util/status.h"

namespace tlr {

struct DumpedQuestion {
  int64_t row = 0;   // the training row it came from (0-based line among the rows)
  std::string id;    // the row's id ("" when it has none)
};

// With examples.topk > 0 the shards also hold "top_logits" F32 [n, topk] and "tokens" I32 [n]
// (the manifest says "topk"); with `embeddings` (the SLM's input embedding, [vocab, n_embd]) DIR
// also gets embeddings.safetensors ("embeddings" F32; the manifest names it): what R2R's router
// reads besides the hidden state.
Status DumpRouterFeatures(const std::string& dir, const RouterExamples& examples, const std::vector<uint8_t>& validation,
                          const std::vector<DumpedQuestion>& questions, const std::string& slm_fingerprint,
                          int64_t rows_per_shard = 65536, const std::vector<float>* embeddings = nullptr,
                          int64_t vocab = 0);

// The manifest's and shards' checks, for readers: reads DIR back (all shards concatenated).
Expected<RouterExamples> ReadRouterFeatures(const std::string& dir, std::vector<uint8_t>* validation = nullptr);

}  // namespace tlr
