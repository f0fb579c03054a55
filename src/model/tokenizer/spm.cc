// SentencePiece BPE (model layer), as llama.cpp runs Llama 2 / Phi-3 vocabularies.
//
// The text (spaces already escaped to "▁", dummy prefix already added) starts as one symbol
// per UTF-8 character. Repeatedly the adjacent pair whose concatenation is a vocabulary
// token with the highest score is merged (leftmost first on ties). Final symbols that are
// not tokens are split back along the merges that built them, and characters that are not
// tokens fall back to their <0xXX> byte tokens.
#include <queue>
#include <unordered_map>

#include "model/tokenizer/tokenizer.h"

namespace tlr {
namespace {

size_t Utf8Len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;  // continuation or invalid byte: a symbol of its own
}

// Tokens an SPM merge may produce: ordinary pieces (never control, unknown or byte pieces).
bool Mergeable(TokenType t) {
  return t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUndefined;
}

}  // namespace

void Tokenizer::EncodeSpm(std::string_view text, std::vector<int32_t>* out) const {
  struct Sym {
    size_t off, n;  // bytes of text
    int32_t prev, next;
  };
  std::vector<Sym> sym;
  for (size_t off = 0; off < text.size();) {
    size_t n = std::min(Utf8Len(static_cast<unsigned char>(text[off])), text.size() - off);
    // A truncated sequence (a lead byte without all its continuation bytes) is one symbol
    // per byte, so that it never swallows the start of the next character (an escaped space
    // would then fall back to bytes and decode as "▁").
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[off + k]) & 0xC0) != 0x80) n = 1;
    }
    const auto i = static_cast<int32_t>(sym.size());
    sym.push_back({off, n, i - 1, -1});
    if (i > 0) sym[i - 1].next = i;
    off += n;
  }
  struct Bigram {
    int32_t left, right;
    float score;
    size_t size;
    bool operator<(const Bigram& o) const {  // max-heap: highest score, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
  };
  std::priority_queue<Bigram> heap;
  std::unordered_map<std::string_view, std::pair<int32_t, int32_t>> rev_merge;
  auto lookup = [&](std::string_view s) {
    const int32_t id = Find(s);
    return (id >= 0 && Mergeable(vocab_.types[id])) ? id : -1;
  };
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view s = text.substr(sym[left].off, sym[left].n + sym[right].n);
    const int32_t id = lookup(s);
    if (id < 0) return;
    const float score = vocab_.scores.empty() ? 0.0f : vocab_.scores[id];
    heap.push({left, right, score, s.size()});
    rev_merge[s] = {left, right};
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
  while (!heap.empty()) {
    const Bigram b = heap.top();
    heap.pop();
    Sym& l = sym[b.left];
    Sym& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // outdated
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  // Emit each final symbol, splitting it along its merges when it is not a token itself.
  auto resegment = [&](auto&& self, std::string_view s) -> void {
    const int32_t id = lookup(s);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    auto it = rev_merge.find(s);
    if (it == rev_merge.end()) {
      for (unsigned char c : s) {
        if (byte_token_[c] >= 0) out->push_back(byte_token_[c]);
        else if (vocab_.unk_id >= 0) out->push_back(vocab_.unk_id);
      }
      return;
    }
    const Sym& a = sym[it->second.first];
    const Sym& b = sym[it->second.second];
    // The halves as they were when merged: left starts at a.off, right at b.off.
    self(self, text.substr(a.off, b.off - a.off));
    self(self, text.substr(b.off, s.size() - (b.off - a.off)));
  };
  if (sym.empty()) return;
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    resegment(resegment, text.substr(sym[i].off, sym[i].n));
  }
}

}  // namespace tlr
