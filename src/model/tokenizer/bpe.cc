// Byte-level BPE (model layer): GPT-2's byte-to-character mapping and the merge loop.
//
// Each pre-token's bytes map to printable characters (GPT-2's bytes_to_unicode), each
// character starts as its own symbol, and the adjacent pair with the lowest merge rank is
// merged (leftmost first on ties) until no pair has a rank — the algorithm of Hugging Face
// tokenizers and llama.cpp. A heap over pairs plus a linked list of symbols keeps it
// O(n log n) in the length of the pre-token.
#include <array>
#include <queue>

#include "model/tokenizer/tokenizer.h"
#include "util/utf8.h"

namespace tlr {
namespace {

struct ByteMap {
  std::array<char32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      AppendUtf8(&to_utf8[b], to_cp[b]);
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap m;
  return m;
}

}  // namespace

std::string ByteToBpeChar(uint8_t b) { return Bytes().to_utf8[b]; }

int BpeCharToByte(char32_t cp) {
  if (cp < 256) {
    const bool printable =
        (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE);
    return printable ? static_cast<int>(cp) : -1;
  }
  if (cp < 256 + 68) {  // 68 bytes are not printable: 0x00-0x20, 0x7F-0xA0, 0xAD
    for (int b = 0; b < 256; ++b) {
      if (Bytes().to_cp[b] == cp) return b;
    }
  }
  return -1;
}

void Tokenizer::EncodeBpe(std::string_view text, std::vector<int32_t>* out, std::vector<size_t>* restarts,
                          size_t base) const {
  const size_t first = restarts ? restarts->size() : 0;
  for (const auto& [b, e] : splitter_->Split(text, restarts)) EncodeBpeWord(text.substr(b, e - b), out);
  if (restarts) {
    for (size_t i = first; i < restarts->size(); ++i) (*restarts)[i] += base;
  }
}

void Tokenizer::EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  const ByteMap& bm = Bytes();
  if (vocab_.ignore_merges) {
    std::string mapped;
    for (unsigned char c : word) mapped += bm.to_utf8[c];
    const int32_t id = Find(mapped);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Sym> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    sym[i] = {Find(bm.to_utf8[static_cast<unsigned char>(word[i])]), static_cast<int32_t>(i) - 1,
              i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1, true};
  }
  struct Pair {
    int32_t rank, left, left_id, right_id;
    bool operator<(const Pair& o) const {  // max-heap: lowest rank, then leftmost, on top
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Pair> heap;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = sym[left].next;
    if (right < 0 || sym[left].id < 0 || sym[right].id < 0) return;
    const uint64_t key = (static_cast<uint64_t>(sym[left].id) << 32) |
                         static_cast<uint32_t>(sym[right].id);
    auto it = merges_.find(key);
    if (it != merges_.end()) heap.push({it->second.first, left, sym[left].id, sym[right].id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(word.size()); ++i) consider(i);
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    Sym& l = sym[p.left];
    if (!l.alive || l.id != p.left_id || l.next < 0) continue;  // stale
    Sym& r = sym[l.next];
    if (r.id != p.right_id) continue;  // stale
    l.id = merges_.at((static_cast<uint64_t>(p.left_id) << 32) |
                      static_cast<uint32_t>(p.right_id)).second;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    consider(l.prev);
    consider(p.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].id >= 0) out->push_back(sym[i].id);
    else if (vocab_.unk_id >= 0) out->push_back(vocab_.unk_id);
  }
}

}  // namespace tlr
