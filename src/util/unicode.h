// Unicode character properties, normalization and case mapping (util layer), from tables
// generated out of the Unicode Character Database (scripts/gen_unicode_tables.py ->
// unicode_tables.inc), so that nothing at run time needs ICU. unicode_icu_test compares every
// code point with ICU's answer. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tlr::unicode {

// General categories, numbered as ICU's UCharCategory (unassigned = 0).
enum Category : uint8_t {
  kCn, kLu, kLl, kLt, kLm, kLo, kMn, kMe, kMc, kNd, kNl, kNo, kZs, kZl, kZp, kCc, kCf, kCo, kCs,
  kPd, kPs, kPe, kPc, kPo, kSm, kSc, kSk, kSo, kPi, kPf, kCategoryCount
};

// One bit per category, for sets of categories (\p{L} = the letter bits, ...).
constexpr uint32_t Bit(Category c) { return 1u << c; }
constexpr uint32_t kLetters = Bit(kLu) | Bit(kLl) | Bit(kLt) | Bit(kLm) | Bit(kLo);
constexpr uint32_t kCasedLetters = Bit(kLu) | Bit(kLl) | Bit(kLt);
constexpr uint32_t kMarks = Bit(kMn) | Bit(kMc) | Bit(kMe);
constexpr uint32_t kNumbers = Bit(kNd) | Bit(kNl) | Bit(kNo);
constexpr uint32_t kSeparators = Bit(kZs) | Bit(kZl) | Bit(kZp);
constexpr uint32_t kOthers = Bit(kCc) | Bit(kCf) | Bit(kCo) | Bit(kCs) | Bit(kCn);
constexpr uint32_t kPunctuation = Bit(kPd) | Bit(kPs) | Bit(kPe) | Bit(kPc) | Bit(kPo) | Bit(kPi) | Bit(kPf);
constexpr uint32_t kSymbols = Bit(kSm) | Bit(kSc) | Bit(kSk) | Bit(kSo);

// The category bits of a property-value name as regexes write it after \p (`L`, `Lu`,
// `Letter`, `Uppercase_Letter`, `N`, `Nd`, `P`, ...; `LC`/`L&` = cased letters); 0 if unknown.
uint32_t CategoryMask(std::string_view name);

// Out-of-range values (> U+10FFFF) are unassigned, with no properties.
Category GetCategory(char32_t cp);
bool IsWhiteSpace(char32_t cp);     // the White_Space property (what \s means in the tokenizers)
bool IsAlphabetic(char32_t cp);     // Alphabetic (DerivedCoreProperties)
bool IsCased(char32_t cp);
bool IsCaseIgnorable(char32_t cp);
uint8_t CombiningClass(char32_t cp);  // canonical combining class

enum class Form { kNFC, kNFD, kNFKC, kNFKD };
std::u32string Normalize(std::u32string_view text, Form form);

// Full case mappings (SpecialCasing's unconditional ones included; lower-casing applies
// Final_Sigma), as ICU's root locale maps them.
std::u32string ToLower(std::u32string_view text);
std::u32string ToUpper(std::u32string_view text);

// Simple case folding (CaseFolding.txt, statuses C and S): what case-insensitive matching
// compares. CaseVariants lists every code point that folds to the same as `cp` (`cp` included).
char32_t SimpleFold(char32_t cp);
size_t CaseVariants(char32_t cp, char32_t out[8]);

// UTF-8 forms. Ill-formed bytes are read as U+FFFD, one per byte (util/utf8.h).
std::u32string DecodeUtf32(std::string_view utf8);
std::string EncodeUtf8(std::u32string_view text);
// NFC of `text`; the original bytes (ill-formed ones included) when it is already in NFC.
std::string NfcUtf8(std::string_view text);
std::string ToLowerUtf8(std::string_view text);
std::string ToUpperUtf8(std::string_view text);

// The Unicode version of the tables (e.g. "15.0.0").
const char* Version();

}  // namespace tlr::unicode
