// The pre-tokenizer split as ICU's regex engine does it (test-only reference: regex_icu_test and
// pretokenize_bench link ICU; the library does not). `\s`/`\S` become the White_Space property,
// which is what the tokenizers mean by them; each pattern splits the pieces of the one before.
#pragma once

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/utf8.h"

namespace tlr::icu_ref {

inline std::string RewriteWhitespaceClasses(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      out += c == 's' ? "\\p{White_Space}" : c == 'S' ? "\\P{White_Space}" : std::string{p[i], c};
      ++i;
    } else {
      out += p[i];
    }
  }
  return out;
}

class Splitter {
 public:
  // Empty error() when every pattern compiled.
  explicit Splitter(const std::vector<std::string>& patterns) {
    for (const auto& p : patterns) {
      UErrorCode st = U_ZERO_ERROR;
      UParseError perr;
      std::unique_ptr<icu::RegexPattern> c(
          icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(RewriteWhitespaceClasses(p)), 0, perr, st));
      if (U_FAILURE(st) || !c) {
        error_ = std::string(u_errorName(st)) + " in " + p;
        return;
      }
      patterns_.push_back(std::move(c));
    }
  }
  const std::string& error() const { return error_; }

  std::vector<std::pair<size_t, size_t>> Split(std::string_view text) const {
    icu::UnicodeString u;
    std::vector<size_t> byte_at;
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
    for (const auto& pattern : patterns_) {
      UErrorCode st = U_ZERO_ERROR;
      std::unique_ptr<icu::RegexMatcher> m(pattern->matcher(u, st));
      std::vector<std::pair<int32_t, int32_t>> next;
      for (const auto& [b, e] : spans) {
        st = U_ZERO_ERROR;
        m->region(b, e, st);
        int32_t prev = b;
        while (m->find(st) && U_SUCCESS(st)) {
          const int32_t s = m->start(st), t = m->end(st);
          if (t == s) continue;
          if (s > prev) next.emplace_back(prev, s);
          next.emplace_back(s, t);
          prev = t;
        }
        if (prev < e) next.emplace_back(prev, e);
      }
      spans = std::move(next);
    }
    std::vector<std::pair<size_t, size_t>> out;
    for (const auto& [b, e] : spans) out.emplace_back(byte_at[b], byte_at[e]);
    return out;
  }

 private:
  std::vector<std::unique_ptr<icu::RegexPattern>> patterns_;
  std::string error_;
};

}  // namespace tlr::icu_ref
