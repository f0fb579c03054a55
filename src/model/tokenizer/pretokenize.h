// Pre-tokenization (model layer): splits text into the pieces a BPE model encodes one at a
// time, with the regexes of the reference tokenizers (GPT-2, Llama 3, Qwen2, ...).
//
// Matching uses TLR's Unicode regex engine (regex.h; ICU's semantics, no ICU), so Unicode
// categories (\p{L}, \p{N}, ...) are right for all of Unicode. `\s`/`\S` are the White_Space
// property, which is what the reference (Oniguruma in Hugging Face tokenizers) means by them. Several patterns apply in
// sequence, each splitting the pieces left by the previous one ("Isolated" behaviour: both
// matches and the gaps between them become pieces). Immutable after construction:
// thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/status.h"

namespace tlr {

// The split patterns llama.cpp uses for a tokenizer.ggml.pre name; error for unknown names.
Expected<std::vector<std::string>> PreTokenizerPatterns(const std::string& pre_name);
// Names PreTokenizerPatterns knows, for help texts and error messages.
std::string KnownPreTokenizers();

class RegexSplitter {
 public:
  RegexSplitter();
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  static Expected<RegexSplitter> Create(const std::vector<std::string>& patterns);
  // Byte ranges [begin, end) of the pieces, in order, covering all of `text`. Ill-formed
  // UTF-8 bytes are matched as U+FFFD but keep their own byte ranges. `restarts` (optional)
  // gets the byte offsets where the first pattern's pieces start: splitting a text that begins
  // with text[0, r + 16 bytes) from such an r on gives the same pieces after r as splitting it
  // whole (matching is left to right and reads at most one character past a match).
  std::vector<std::pair<size_t, size_t>> Split(std::string_view text, std::vector<size_t>* restarts = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tlr
