// Token healing's constraint (model layer): while a generation must first spell given bytes
// (the text a vocabulary bridge held back, device/llm/vocab_bridge.h), only tokens that agree with
// what remains of them may be sampled: a piece that is a prefix of the remaining bytes, or one
// that starts with all of them. Control tokens (end of generation included) wait until the
// bytes are spelled. Thread-safe after construction.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace tlr {

class PrefixConstraint {
 public:
  explicit PrefixConstraint(const Tokenizer& vocab);
  // Sets every logit whose token disagrees with `remaining` to -infinity (nothing when it is
  // empty). Returns false when no token agrees (the logits are then left unchanged).
  bool Mask(std::string_view remaining, float* logits) const;
  // What remains after `token` (which Mask allowed).
  std::string_view After(std::string_view remaining, int32_t token) const;

 private:
  std::vector<std::string> pieces_;  // per token; empty for control and unknown tokens
};

}  // namespace tlr
