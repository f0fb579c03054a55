// Pre-tokenization with TLR's Unicode regexes (model layer). See pretokenize.h.
#include "model/tokenizer/pretokenize.h"

#include "model/tokenizer/regex.h"
#include "util/utf8.h"

namespace tlr {
namespace {

// GPT-2 (and everything derived from it without changes).
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// Llama 3: case-insensitive contractions, letters with one leading non-letter, digits in
// groups of up to three.
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2: as Llama 3 but every digit on its own.
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Known {
  const char* names;  // space-separated aliases
  std::vector<std::string> patterns;
};

const std::vector<Known>& KnownTable() {
  static const std::vector<Known> table = {
      {"gpt-2 gpt2 mpt olmo", {kGpt2}},
      // llama.cpp's fallback for BPE vocabularies that name no pre-tokenizer.
      {"default",
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}},
      {"llama-bpe llama3 llama-v3 falcon3 smaug-bpe", {kLlama3}},
      {"qwen2 deepseek-r1-qwen", {kQwen2}},
      {"none", {}},  // the whole text is one piece
  };
  return table;
}

}  // namespace

Expected<std::vector<std::string>> PreTokenizerPatterns(const std::string& pre_name) {
  for (const auto& k : KnownTable()) {
    std::string names = std::string(" ") + k.names + " ";
    if (names.find(" " + pre_name + " ") != std::string::npos) return k.patterns;
  }
  return Status::Error("unknown pre-tokenizer '" + pre_name + "' (known: " +
                       KnownPreTokenizers() + ")");
}

std::string KnownPreTokenizers() {
  std::string out;
  for (const auto& k : KnownTable()) {
    if (!out.empty()) out += ", ";
    std::string n = k.names;
    for (auto& ch : n) {
      if (ch == ' ') ch = '/';
    }
    out += n;
  }
  return out;
}

struct RegexSplitter::Impl {
  std::vector<UnicodeRegex> patterns;
};

RegexSplitter::RegexSplitter() : impl_(std::make_unique<Impl>()) {}
RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

Expected<RegexSplitter> RegexSplitter::Create(const std::vector<std::string>& patterns) {
  RegexSplitter s;
  for (const auto& p : patterns) {
    Expected<UnicodeRegex> compiled = UnicodeRegex::Compile(p);
    if (!compiled.ok()) return compiled.status();
    s.impl_->patterns.push_back(std::move(compiled).value());
  }
  return s;
}

std::vector<std::pair<size_t, size_t>> RegexSplitter::Split(std::string_view text, std::vector<size_t>* restarts) const {
  // The code points of the text plus the byte offset of each, so match positions map back to
  // byte ranges exactly (ill-formed bytes become one U+FFFD each).
  thread_local std::u32string u;
  thread_local std::vector<size_t> byte_at;
  u.clear();
  byte_at.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    byte_at.push_back(pos);
    char32_t cp;
    DecodeUtf8(text, &pos, &cp);
    u.push_back(cp);
  }
  byte_at.push_back(text.size());

  std::vector<std::pair<size_t, size_t>> spans;
  if (!u.empty()) spans.emplace_back(0, u.size());
  std::vector<std::pair<size_t, size_t>> next;
  for (const auto& pattern : impl_->patterns) {
    next.clear();
    next.reserve(spans.size() * 2);
    for (const auto& [b, e] : spans) {
      // Each piece is matched as if it were the whole text.
      size_t prev = b, from = b, s, t;
      int64_t budget = UnicodeRegex::StepBudget(e - b);  // for all the searches of this piece
      while (from <= e && pattern.Find(u.data(), b, e, from, &s, &t, &budget)) {
        if (t == s) {  // an empty match splits nothing; search on from the next character
          from = s + 1;
          continue;
        }
        if (s > prev) next.emplace_back(prev, s);
        next.emplace_back(s, t);
        prev = from = t;
      }
      if (prev < e) next.emplace_back(prev, e);
    }
    spans.swap(next);
    if (restarts && &pattern == &impl_->patterns.front()) {
      for (const auto& span : spans) restarts->push_back(byte_at[span.first]);
    }
  }
  if (restarts && impl_->patterns.empty() && !text.empty()) restarts->push_back(0);
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(spans.size());
  for (const auto& [b, e] : spans) out.emplace_back(byte_at[b], byte_at[e]);
  return out;
}

}  // namespace tlr
