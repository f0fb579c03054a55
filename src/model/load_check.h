// Test helpers (model layer) for the tests of how a model's weights are loaded (weight cache,
// packed files): the load notes as one string, and the logits of a fixed prompt at every
// position, which must be bit-identical however the weights came in.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/model.h"
#include "ops/thread_pool.h"

namespace tlr {

inline std::string LoadNotes(const Model& m) {
  std::string s;
  for (const auto& n : m.load_notes()) s += n + "\n";
  return s;
}

inline std::vector<float> PromptLogits(const Model& m) {
  const std::vector<int32_t> ids = m.tokenizer().Encode("Question: Where does a tharko live? Answer: in the hills");
  auto cache = m.NewCache(64);
  EXPECT_TRUE(cache.ok());
  std::vector<float> logits(ids.size() * static_cast<size_t>(m.config().n_vocab));
  ThreadPool pool(2);
  ForwardContext ctx(&pool);
  SequenceInput in{&*cache, ids, OutputRows::kAll, logits.data(), nullptr};
  EXPECT_TRUE(m.Forward({&in, 1}, &ctx).ok());
  return logits;
}

}  // namespace tlr
