// Unicode properties, normalization and case mapping from generated tables (util layer).
// See unicode.h; the algorithms are Unicode's (UAX #15 for normalization, section 3.13 of the
// standard for case mapping).
#include "util/unicode.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "util/utf8.h"

namespace tlr::unicode {
namespace {

#include "util/unicode_tables.inc"

constexpr uint16_t kWhiteSpace = 1 << 5, kAlphabetic = 1 << 6, kCased = 1 << 7, kCaseIgnorable = 1 << 8,
                   kNfcNotYes = 1 << 9;

inline uint16_t Props(char32_t cp) {
  if (cp > 0x10FFFF) return 0;
  const uint32_t block = kPropIndex[cp >> kPropShift];
  return kPropBlocks[(block << kPropShift) | (cp & ((1u << kPropShift) - 1))];
}

// Looks `cp` up in a generated mapping table (pairs of entry words, sorted by code point).
// Returns the mapped code points and the entry's flags, or false.
bool FindMapping(const uint32_t* entries, size_t n_words, const uint32_t* pool, char32_t cp,
                 const uint32_t** begin, size_t* len, uint32_t* flags) {
  size_t lo = 0, hi = n_words / 2;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    const uint32_t key = entries[2 * mid] & 0x1FFFFF;
    if (key < cp) {
      lo = mid + 1;
    } else if (key > cp) {
      hi = mid;
    } else {
      const uint32_t where = entries[2 * mid + 1];
      *begin = pool + (where & 0xFFFFF);
      *len = where >> 20;
      if (flags) *flags = entries[2 * mid] >> 21;
      return true;
    }
  }
  return false;
}

// Hangul syllables are decomposed and composed algorithmically.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

void Decompose(char32_t cp, bool compat, std::u32string* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = static_cast<int>(cp - kSBase);
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const uint32_t* parts;
  size_t n;
  uint32_t flags;
  if (cp < 0xA0 || !FindMapping(kDecompEntries, std::size(kDecompEntries), kDecompPool, cp, &parts, &n, &flags) ||
      ((flags & 1) && !compat)) {
    out->push_back(cp);
    return;
  }
  for (size_t i = 0; i < n; ++i) Decompose(parts[i], compat, out);
}

// The primary composite of a starter and the next character, or 0.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const size_t n = std::size(kCompositions) / 3;
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    const uint32_t ka = kCompositions[3 * mid], kb = kCompositions[3 * mid + 1];
    if (ka < a || (ka == a && kb < b)) {
      lo = mid + 1;
    } else if (ka == a && kb == b) {
      return kCompositions[3 * mid + 2];
    } else {
      hi = mid;
    }
  }
  return 0;
}

// Final_Sigma: preceded by a cased letter (case-ignorables between) and not followed by one.
bool IsFinalSigma(std::u32string_view s, size_t i) {
  bool before = false;
  for (size_t k = i; k-- > 0;) {
    if (IsCaseIgnorable(s[k])) continue;
    before = IsCased(s[k]);
    break;
  }
  if (!before) return false;
  for (size_t k = i + 1; k < s.size(); ++k) {
    if (IsCaseIgnorable(s[k])) continue;
    return !IsCased(s[k]);
  }
  return true;
}

std::u32string MapCase(std::u32string_view text, const uint32_t* entries, size_t n_words,
                       const uint32_t* pool, bool lower) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t cp = text[i];
    if (cp < 0x80) {
      out.push_back(lower ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp) : (cp >= 'a' && cp <= 'z' ? cp - 32 : cp));
      continue;
    }
    if (lower && cp == 0x03A3) {
      out.push_back(IsFinalSigma(text, i) ? 0x03C2 : 0x03C3);
      continue;
    }
    const uint32_t* m;
    size_t n;
    if (FindMapping(entries, n_words, pool, cp, &m, &n, nullptr)) {
      out.append(m, m + n);
    } else {
      out.push_back(cp);
    }
  }
  return out;
}

}  // namespace

uint32_t CategoryMask(std::string_view name) {
  static constexpr std::pair<const char*, uint32_t> kNames[] = {
      {"L", kLetters}, {"Letter", kLetters}, {"LC", kCasedLetters}, {"L&", kCasedLetters},
      {"Cased_Letter", kCasedLetters}, {"M", kMarks}, {"Mark", kMarks}, {"N", kNumbers},
      {"Number", kNumbers}, {"P", kPunctuation}, {"Punctuation", kPunctuation}, {"S", kSymbols},
      {"Symbol", kSymbols}, {"Z", kSeparators}, {"Separator", kSeparators}, {"C", kOthers},
      {"Other", kOthers},
      {"Lu", Bit(kLu)}, {"Uppercase_Letter", Bit(kLu)}, {"Ll", Bit(kLl)}, {"Lowercase_Letter", Bit(kLl)},
      {"Lt", Bit(kLt)}, {"Titlecase_Letter", Bit(kLt)}, {"Lm", Bit(kLm)}, {"Modifier_Letter", Bit(kLm)},
      {"Lo", Bit(kLo)}, {"Other_Letter", Bit(kLo)}, {"Mn", Bit(kMn)}, {"Nonspacing_Mark", Bit(kMn)},
      {"Mc", Bit(kMc)}, {"Spacing_Mark", Bit(kMc)}, {"Me", Bit(kMe)}, {"Enclosing_Mark", Bit(kMe)},
      {"Nd", Bit(kNd)}, {"Decimal_Number", Bit(kNd)}, {"Nl", Bit(kNl)}, {"Letter_Number", Bit(kNl)},
      {"No", Bit(kNo)}, {"Other_Number", Bit(kNo)}, {"Zs", Bit(kZs)}, {"Space_Separator", Bit(kZs)},
      {"Zl", Bit(kZl)}, {"Line_Separator", Bit(kZl)}, {"Zp", Bit(kZp)}, {"Paragraph_Separator", Bit(kZp)},
      {"Cc", Bit(kCc)}, {"Control", Bit(kCc)}, {"Cf", Bit(kCf)}, {"Format", Bit(kCf)},
      {"Co", Bit(kCo)}, {"Private_Use", Bit(kCo)}, {"Cs", Bit(kCs)}, {"Surrogate", Bit(kCs)},
      {"Cn", Bit(kCn)}, {"Unassigned", Bit(kCn)}, {"Pd", Bit(kPd)}, {"Dash_Punctuation", Bit(kPd)},
      {"Ps", Bit(kPs)}, {"Open_Punctuation", Bit(kPs)}, {"Pe", Bit(kPe)}, {"Close_Punctuation", Bit(kPe)},
      {"Pc", Bit(kPc)}, {"Connector_Punctuation", Bit(kPc)}, {"Po", Bit(kPo)}, {"Other_Punctuation", Bit(kPo)},
      {"Pi", Bit(kPi)}, {"Initial_Punctuation", Bit(kPi)}, {"Pf", Bit(kPf)}, {"Final_Punctuation", Bit(kPf)},
      {"Sm", Bit(kSm)}, {"Math_Symbol", Bit(kSm)}, {"Sc", Bit(kSc)}, {"Currency_Symbol", Bit(kSc)},
      {"Sk", Bit(kSk)}, {"Modifier_Symbol", Bit(kSk)}, {"So", Bit(kSo)}, {"Other_Symbol", Bit(kSo)},
  };
  for (const auto& [n, mask] : kNames) {
    if (name == n) return mask;
  }
  return 0;
}

Category GetCategory(char32_t cp) { return static_cast<Category>(Props(cp) & 31); }
bool IsWhiteSpace(char32_t cp) { return Props(cp) & kWhiteSpace; }
bool IsAlphabetic(char32_t cp) { return Props(cp) & kAlphabetic; }
bool IsCased(char32_t cp) { return Props(cp) & kCased; }
bool IsCaseIgnorable(char32_t cp) { return Props(cp) & kCaseIgnorable; }

uint8_t CombiningClass(char32_t cp) {
  if (cp > 0x10FFFF) return 0;
  const uint32_t block = kCccIndex[cp >> kCccShift];
  return kCccBlocks[(block << kCccShift) | (cp & ((1u << kCccShift) - 1))];
}

std::u32string Normalize(std::u32string_view text, Form form) {
  const bool compat = form == Form::kNFKC || form == Form::kNFKD;
  std::u32string d;
  d.reserve(text.size());
  for (char32_t cp : text) Decompose(cp, compat, &d);
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (CombiningClass(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && CombiningClass(d[j]) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(d.begin() + i, d.begin() + j,
                       [](char32_t a, char32_t b) { return CombiningClass(a) < CombiningClass(b); });
    }
    i = j;
  }
  if (form == Form::kNFD || form == Form::kNFKD || d.empty()) return d;
  // Canonical composition.
  std::u32string out;
  out.reserve(d.size());
  size_t starter = 0;
  out.push_back(d[0]);
  int last_class = CombiningClass(d[0]);
  if (last_class != 0) last_class = 256;  // a leading non-starter composes with nothing
  for (size_t i = 1; i < d.size(); ++i) {
    const char32_t ch = d[i];
    const int cc = CombiningClass(ch);
    const char32_t composite = Compose(out[starter], ch);
    if (composite != 0 && (last_class < cc || last_class == 0)) {
      out[starter] = composite;
      continue;
    }
    if (cc == 0) starter = out.size();
    last_class = cc;
    out.push_back(ch);
  }
  return out;
}

std::u32string ToLower(std::u32string_view text) {
  return MapCase(text, kLowerEntries, std::size(kLowerEntries), kLowerPool, true);
}

std::u32string ToUpper(std::u32string_view text) {
  return MapCase(text, kUpperEntries, std::size(kUpperEntries), kUpperPool, false);
}

char32_t SimpleFold(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  const uint32_t* m;
  size_t n;
  if (FindMapping(kFoldEntries, std::size(kFoldEntries), kFoldPool, cp, &m, &n, nullptr) && n == 1) return m[0];
  return cp;
}

size_t CaseVariants(char32_t cp, char32_t out[8]) {
  const char32_t f = SimpleFold(cp);
  size_t n = 0;
  out[n++] = f;
  // kFoldInverse: (folded, code point) pairs sorted by folded value.
  const size_t pairs = std::size(kFoldInverse) / 2;
  size_t lo = 0, hi = pairs;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (kFoldInverse[2 * mid] < f) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  for (size_t k = lo; k < pairs && kFoldInverse[2 * k] == f && n < 8; ++k) out[n++] = kFoldInverse[2 * k + 1];
  return n;
}

std::u32string DecodeUtf32(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  size_t pos = 0;
  while (pos < utf8.size()) {
    char32_t cp;
    DecodeUtf8(utf8, &pos, &cp);
    out.push_back(cp);
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) AppendUtf8(&out, cp);
  return out;
}

std::string NfcUtf8(std::string_view text) {
  // UAX #15's quick check: every character NFC_Quick_Check=Yes and combining classes in order
  // means the text is in NFC already (the common case: no copy of it is made).
  bool in_nfc = true;
  uint8_t last_class = 0;
  for (size_t pos = 0; pos < text.size() && in_nfc;) {
    const auto b = static_cast<uint8_t>(text[pos]);
    if (b < 0x80) {
      ++pos;
      last_class = 0;
      continue;
    }
    char32_t cp;
    DecodeUtf8(text, &pos, &cp);
    const uint8_t cc = CombiningClass(cp);
    in_nfc = !(Props(cp) & kNfcNotYes) && (cc == 0 || last_class <= cc);
    last_class = cc;
  }
  if (in_nfc) return std::string(text);
  const std::u32string u = DecodeUtf32(text);
  const std::u32string n = Normalize(u, Form::kNFC);
  if (n == u) return std::string(text);
  return EncodeUtf8(n);
}

std::string ToLowerUtf8(std::string_view text) { return EncodeUtf8(ToLower(DecodeUtf32(text))); }
std::string ToUpperUtf8(std::string_view text) { return EncodeUtf8(ToUpper(DecodeUtf32(text))); }

const char* Version() { return TLR_UNICODE_VERSION; }

}  // namespace tlr::unicode
