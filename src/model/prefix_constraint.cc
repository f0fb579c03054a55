// PrefixConstraint (see prefix_constraint.h).
#include "model/prefix_constraint.h"

#include <limits>

namespace tlr {

PrefixConstraint::PrefixConstraint(const Tokenizer& vocab) : pieces_(static_cast<size_t>(vocab.n_vocab())) {
  for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
    const TokenType t = vocab.vocab().types[static_cast<size_t>(id)];
    if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUnused) continue;
    pieces_[static_cast<size_t>(id)] = vocab.Piece(id);
  }
}

bool PrefixConstraint::Mask(std::string_view remaining, float* logits) const {
  if (remaining.empty()) return true;
  std::vector<int32_t> allowed;
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const std::string& p = pieces_[id];
    if (p.empty()) continue;
    const size_t n = std::min(p.size(), remaining.size());
    if (p.compare(0, n, remaining, 0, n) == 0) allowed.push_back(static_cast<int32_t>(id));
  }
  if (allowed.empty()) return false;
  std::vector<float> keep(allowed.size());
  for (size_t i = 0; i < allowed.size(); ++i) keep[i] = logits[allowed[i]];
  for (size_t id = 0; id < pieces_.size(); ++id) logits[id] = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < allowed.size(); ++i) logits[allowed[i]] = keep[i];
  return true;
}

std::string_view PrefixConstraint::After(std::string_view remaining, int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= pieces_.size()) return remaining;
  const size_t n = pieces_[static_cast<size_t>(token)].size();
  return n >= remaining.size() ? std::string_view() : remaining.substr(n);
}

}  // namespace tlr
