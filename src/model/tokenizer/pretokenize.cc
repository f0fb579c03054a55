// Pre-tokenization with ICU regexes (model layer). See pretokenize.h.
#include "model/tokenizer/pretokenize.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>

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

// Rewrites unescaped \s and \S to the White_Space property (ICU's \s lacks U+000B, U+0085).
std::string RewriteWhitespaceClasses(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      if (c == 's') out += "\\p{White_Space}";
      else if (c == 'S') out += "\\P{White_Space}";
      else {
        out += p[i];
        out += c;
      }
      ++i;
    } else {
      out += p[i];
    }
  }
  return out;
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
  std::vector<std::unique_ptr<icu::RegexPattern>> patterns;
};

RegexSplitter::RegexSplitter() : impl_(std::make_unique<Impl>()) {}
RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

Expected<RegexSplitter> RegexSplitter::Create(const std::vector<std::string>& patterns) {
  RegexSplitter s;
  for (const auto& p : patterns) {
    const std::string rewritten = RewriteWhitespaceClasses(p);
    UErrorCode status = U_ZERO_ERROR;
    UParseError perr;
    std::unique_ptr<icu::RegexPattern> compiled(icu::RegexPattern::compile(
        icu::UnicodeString::fromUTF8(rewritten), 0, perr, status));
    if (U_FAILURE(status) || !compiled) {
      return Status::Error("pre-tokenizer regex does not compile (" +
                           std::string(u_errorName(status)) + " at offset " +
                           std::to_string(perr.offset) + "): " + p);
    }
    s.impl_->patterns.push_back(std::move(compiled));
  }
  return s;
}

std::vector<std::pair<size_t, size_t>> RegexSplitter::Split(std::string_view text, std::vector<size_t>* restarts) const {
  // UTF-16 copy of the text plus the byte offset of every UTF-16 unit, so ICU's match
  // positions map back to byte ranges exactly (ill-formed bytes become one U+FFFD each).
  icu::UnicodeString u;
  std::vector<size_t> byte_at;
  byte_at.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    char32_t cp;
    DecodeUtf8(text, &pos, &cp);
    const int32_t before = u.length();
    u.append(static_cast<UChar32>(cp));
    for (int32_t k = before; k < u.length(); ++k) byte_at.push_back(start);
  }
  byte_at.push_back(text.size());

  std::vector<std::pair<int32_t, int32_t>> spans;
  if (u.length() > 0) spans.emplace_back(0, u.length());
  for (const auto& pattern : impl_->patterns) {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> m(pattern->matcher(u, status));
    if (U_FAILURE(status)) continue;
    std::vector<std::pair<int32_t, int32_t>> next;
    next.reserve(spans.size() * 2);
    for (const auto& [b, e] : spans) {
      status = U_ZERO_ERROR;
      // Opaque, anchoring bounds: each piece is matched as if it were the whole string.
      m->region(b, e, status);
      int32_t prev = b;
      while (m->find(status) && U_SUCCESS(status)) {
        const int32_t s = m->start(status);
        const int32_t t = m->end(status);
        if (t == s) continue;
        if (s > prev) next.emplace_back(prev, s);
        next.emplace_back(s, t);
        prev = t;
      }
      if (prev < e) next.emplace_back(prev, e);
    }
    spans = std::move(next);
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
