// A Unicode regex engine for pre-tokenizer patterns (model layer), with ICU's semantics for the
// syntax the tokenizers use, so that no ICU is needed at run time.
//
// Matching is backtracking (leftmost match, ordered alternation, greedy/lazy/possessive
// quantifiers), as in ICU and Oniguruma, over decoded code points. Supported: literals and
// escapes (\n \r \t \f \v \e \a \xhh \x{h..} \uhhhh \Uhhhhhhhh, escaped punctuation), `.`
// (anything but a line terminator), classes [...] with ranges, negation and the escapes below,
// \s \S (the White_Space property), \d \D (Nd), \w \W (ICU's word characters), \p{..} \P{..} and
// \pX with general categories (L, Lu, Letter, ...) and White_Space / Alphabetic, groups (...)
// (?:...) (?i:...) (?i) (?>...), lookahead (?=...) (?!...), ^ and $ at the ends of the text,
// quantifiers ? * + {n} {n,} {n,m} with ? (lazy) or + (possessive). Anything else (lookbehind,
// backreferences, set operations, ...) is a compile error naming it. `(?i)` folds case with the
// simple case folding. Immutable after Compile: Find is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace tlr {

class UnicodeRegex {
 public:
  UnicodeRegex();
  ~UnicodeRegex();
  UnicodeRegex(UnicodeRegex&&) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&&) noexcept;

  // `pattern` is UTF-8. Errors name the construct and its byte offset.
  static Expected<UnicodeRegex> Compile(std::string_view pattern);

  // The leftmost match starting at or after `from` in text[begin, end), the text outside
  // [begin, end) invisible (lookahead stops at `end`; ^ and $ match at `begin` and `end`).
  // Returns false when there is none; else the match is [*match_begin, *match_end).
  // `budget` (may be null: a fresh one) counts down the matching steps, shared by the searches
  // of one text: a pattern that backtracks exponentially or quadratically (a hostile
  // tokenizer.json) stops when it runs out (every later search then fails) instead of hanging.
  bool Find(const char32_t* text, size_t begin, size_t end, size_t from, size_t* match_begin,
            size_t* match_end, int64_t* budget = nullptr) const;
  // A budget for a text of n characters: far above what real patterns take (a few steps each).
  static int64_t StepBudget(size_t n);

 private:
  struct Program;
  std::unique_ptr<Program> prog_;
};

}  // namespace tlr
