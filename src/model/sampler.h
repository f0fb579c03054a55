// Sampler (model layer): picks the next token from logits. Greedy, or temperature with
// top-k, top-p (nucleus), min-p and a repetition penalty, in llama.cpp's order (penalty ->
// top-k -> top-p -> min-p -> temperature -> draw). No heap allocation per call after
// construction. Not thread-safe (one per sequence).
//
// Counter-based: the random number of a draw is a function of (seed, position) only, where the
// position is the index of the token being drawn (history.size() by default). So a token's draw
// never depends on how many draws came before it: the device's SLM and the LLM (in process or on
// a server) draw the same number at the same position, and speculative or cancelled work cannot
// shift later draws. Same logits + same history + same seed -> same token, always.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/status.h"

namespace tlr {

struct SamplerParams {
  float temperature = 0.0f;    // <= 0: greedy
  int32_t top_k = 40;          // <= 0: all tokens
  float top_p = 1.0f;          // 1: off
  float min_p = 0.0f;          // 0: off
  float repeat_penalty = 1.0f; // 1: off; > 1 discourages tokens seen in the last n
  int32_t repeat_last_n = 64;
  uint64_t seed = 42;
  Status Validate() const;
};

class Sampler {
 public:
  Sampler(const SamplerParams& params, int32_t n_vocab);
  // `history`: the tokens so far (prompt and generated), for the repetition penalty; the draw
  // is keyed by (seed, history.size()).
  int32_t Sample(const float* logits, std::span<const int32_t> history) {
    return SampleAt(logits, history, history.size());
  }
  // The same with the draw keyed by (seed, position).
  int32_t SampleAt(const float* logits, std::span<const int32_t> history, uint64_t position);
  const SamplerParams& params() const { return params_; }

 private:
  SamplerParams params_;
  int32_t n_vocab_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<float> probs_;
  std::vector<float> penalized_;  // the logits after the repetition penalty
};

// The uniform number in [0, 1) that a sampler with `seed` draws at `position`.
double CounterUniform(uint64_t seed, uint64_t position);

// Index of the largest value (lowest index on ties).
int32_t ArgMax(const float* x, int64_t n);
// log(sum(exp(x))), stable: logits[i] - LogSumExp(logits) is token i's log-probability.
float LogSumExp(const float* x, int64_t n);

}  // namespace tlr
