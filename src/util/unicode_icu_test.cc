// TLR's Unicode tables against ICU, the reference (unit; the only place ICU is linked): for
// every code point U+0000..U+10FFFF the category, the properties the tokenizers and the Jinja
// filters use, the combining class, NFC/NFD/NFKC/NFKD and the full case mappings; then random
// strings (combining sequences, Hangul, final sigma) through normalization and case mapping.
#include "util/unicode.h"

#include <gtest/gtest.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <random>
#include <vector>

namespace tlr::unicode {
namespace {

std::u32string FromIcu(const icu::UnicodeString& u) {
  std::u32string out;
  for (int32_t i = 0; i < u.length();) {
    const UChar32 c = u.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

icu::UnicodeString ToIcu(std::u32string_view s) {
  icu::UnicodeString u;
  for (char32_t c : s) u.append(static_cast<UChar32>(c));
  return u;
}

std::string Hex(std::u32string_view s) {
  std::string out;
  char buf[16];
  for (char32_t c : s) {
    snprintf(buf, sizeof buf, "%s%04X", out.empty() ? "" : " ", static_cast<unsigned>(c));
    out += buf;
  }
  return out;
}

const icu::Normalizer2* IcuForm(Form f) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (f) {
    case Form::kNFC: n = icu::Normalizer2::getNFCInstance(st); break;
    case Form::kNFD: n = icu::Normalizer2::getNFDInstance(st); break;
    case Form::kNFKC: n = icu::Normalizer2::getNFKCInstance(st); break;
    case Form::kNFKD: n = icu::Normalizer2::getNFKDInstance(st); break;
  }
  EXPECT_TRUE(U_SUCCESS(st));
  return n;
}

TEST(UnicodeIcu, SameUnicodeVersion) {
  UVersionInfo v;
  u_getUnicodeVersion(v);
  char buf[U_MAX_VERSION_STRING_LENGTH];
  u_versionToString(v, buf);
  EXPECT_EQ(std::string(Version()).substr(0, 4), std::string(buf).substr(0, 4))
      << "regenerate src/util/unicode_tables.inc from the unicode-data matching ICU";
}

TEST(UnicodeIcu, PropertiesOfEveryCodePoint) {
  int bad = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF && bad < 20; ++cp) {
    const UChar32 c = static_cast<UChar32>(cp);
    bool ok = GetCategory(cp) == u_charType(c) && IsWhiteSpace(cp) == !!u_hasBinaryProperty(c, UCHAR_WHITE_SPACE) &&
              IsAlphabetic(cp) == !!u_hasBinaryProperty(c, UCHAR_ALPHABETIC) &&
              IsCased(cp) == !!u_hasBinaryProperty(c, UCHAR_CASED) &&
              IsCaseIgnorable(cp) == !!u_hasBinaryProperty(c, UCHAR_CASE_IGNORABLE) &&
              CombiningClass(cp) == u_getCombiningClass(c) &&
              SimpleFold(cp) == static_cast<char32_t>(u_foldCase(c, U_FOLD_CASE_DEFAULT));
    if (!ok) {
      ++bad;
      ADD_FAILURE() << "U+" << Hex(std::u32string(1, cp)) << ": category " << int(GetCategory(cp)) << " vs ICU "
                    << int(u_charType(c)) << ", ccc " << int(CombiningClass(cp)) << " vs "
                    << int(u_getCombiningClass(c));
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(UnicodeIcu, NormalizationOfEveryCodePoint) {
  for (Form f : {Form::kNFC, Form::kNFD, Form::kNFKC, Form::kNFKD}) {
    const icu::Normalizer2* icu_form = IcuForm(f);
    int bad = 0;
    for (char32_t cp = 0; cp <= 0x10FFFF && bad < 20; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // not characters; UTF-8 cannot carry them
      const std::u32string one(1, cp);
      UErrorCode st = U_ZERO_ERROR;
      const std::u32string want = FromIcu(icu_form->normalize(ToIcu(one), st));
      const std::u32string got = Normalize(one, f);
      if (got != want) {
        ++bad;
        ADD_FAILURE() << "form " << int(f) << " of U+" << Hex(one) << ": " << Hex(got) << " vs ICU " << Hex(want);
      }
    }
    EXPECT_EQ(bad, 0) << "form " << int(f);
  }
}

TEST(UnicodeIcu, CaseMappingOfEveryCodePoint) {
  int bad = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF && bad < 20; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::u32string one(1, cp);
    icu::UnicodeString up = ToIcu(one), low = ToIcu(one);
    up.toUpper(icu::Locale::getRoot());
    low.toLower(icu::Locale::getRoot());
    if (ToUpper(one) != FromIcu(up) || ToLower(one) != FromIcu(low)) {
      ++bad;
      ADD_FAILURE() << "U+" << Hex(one) << ": upper " << Hex(ToUpper(one)) << " vs ICU " << Hex(FromIcu(up))
                    << ", lower " << Hex(ToLower(one)) << " vs ICU " << Hex(FromIcu(low));
    }
  }
  EXPECT_EQ(bad, 0);
}

// Strings where the order and context of characters matter: combining marks of several classes,
// Hangul jamo, sigma between letters and case-ignorables.
TEST(UnicodeIcu, RandomStrings) {
  const std::vector<char32_t> pool = {
      'a', 'e', 'o', 'A', 'E', 0x3A3, 0x3C3, 0x391, 0x3B1, 0x300, 0x301, 0x302, 0x308, 0x316, 0x323, 0x327,
      0x328, 0x345, 0x34F, 0x5B0, 0x5BC, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x1E0A, 0x1E0C, 0x212B,
      0x2126, 0xFB01, 0xDF, 0x130, 0x131, 0x149, 0x1F80, 0x3099, 0x304B, 0x30AB, 0x0F73, 0x0F75, 0x0F81,
      0x2019, 0xAD, 0x20, '.', '\'', 0x1D15E, 0x1D165, 0x1D16E, 0xFF21, 0x2460, 0x3392, 0x1E9E, 0x0130,
      0x0069, 0x0307, 0x00C5, 0x0041, 0x030A, 0x0CCB, 0x0CD5, 0x0B47, 0x0B3E, 0x0B57, 0x1B05, 0x1B35};
  std::mt19937 rng(7);
  for (int iter = 0; iter < 20000; ++iter) {
    std::u32string s;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) s.push_back(pool[rng() % pool.size()]);
    for (Form f : {Form::kNFC, Form::kNFD, Form::kNFKC, Form::kNFKD}) {
      UErrorCode st = U_ZERO_ERROR;
      const std::u32string want = FromIcu(IcuForm(f)->normalize(ToIcu(s), st));
      ASSERT_EQ(Hex(Normalize(s, f)), Hex(want)) << "form " << int(f) << " of " << Hex(s);
      if (f == Form::kNFC) {
        ASSERT_EQ(NfcUtf8(EncodeUtf8(s)), EncodeUtf8(want)) << Hex(s);  // with the quick check
      }
    }
    icu::UnicodeString up = ToIcu(s), low = ToIcu(s);
    up.toUpper(icu::Locale::getRoot());
    low.toLower(icu::Locale::getRoot());
    ASSERT_EQ(Hex(ToUpper(s)), Hex(FromIcu(up))) << Hex(s);
    ASSERT_EQ(Hex(ToLower(s)), Hex(FromIcu(low))) << Hex(s);
  }
}

TEST(UnicodeIcu, Utf8FormsKeepOrReplaceBytes) {
  EXPECT_EQ(NfcUtf8("plain ascii"), "plain ascii");
  EXPECT_EQ(NfcUtf8("e\xCC\x81"), "\xC3\xA9");                // e + U+0301 -> U+00E9
  EXPECT_EQ(NfcUtf8("\xC3\xA9\xFF"), "\xC3\xA9\xFF");        // already NFC: bytes kept, bad one too
  EXPECT_EQ(ToUpperUtf8("stra\xC3\x9F" "e"), "STRASSE");     // ß -> SS
  EXPECT_EQ(ToLowerUtf8("\xCE\x9F\xCE\xA3"), "\xCE\xBF\xCF\x82");  // final sigma
  EXPECT_EQ(CategoryMask("L"), kLetters);
  EXPECT_EQ(CategoryMask("Lu") | CategoryMask("Ll"), Bit(kLu) | Bit(kLl));
  EXPECT_EQ(CategoryMask("Nope"), 0u);
  char32_t v[8];
  const size_t n = CaseVariants(U'S', v);
  EXPECT_EQ(std::u32string(v, n), U"s" U"S" U"\u017F");  // long s folds to s
}

}  // namespace
}  // namespace tlr::unicode
