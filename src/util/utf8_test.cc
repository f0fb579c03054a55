// Tests for the UTF-8 helpers (unit).
#include "util/utf8.h"

#include <gtest/gtest.h>

namespace tlr {
namespace {

TEST(Utf8, DecodeRejectsIllFormed) {
  const char* bad[] = {"\x80", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                       "\xF8\x88\x80\x80\x80", "\xE2\x82", "\xFF"};
  for (const char* b : bad) EXPECT_FALSE(IsValidUtf8(b)) << b;
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x81"));
}

TEST(Utf8, EncodeDecodeRoundTripAllScalarValues) {
  for (char32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x3000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    AppendUtf8(&s, cp);
    size_t pos = 0;
    char32_t got = 0;
    ASSERT_TRUE(DecodeUtf8(s, &pos, &got)) << static_cast<uint32_t>(cp);
    ASSERT_EQ(static_cast<uint32_t>(got), static_cast<uint32_t>(cp));
    ASSERT_EQ(pos, s.size());
  }
}

TEST(Utf8, CompletePrefixHoldsBackOnlyCompletableTails) {
  EXPECT_EQ(Utf8CompletePrefix("abc"), 3u);
  EXPECT_EQ(Utf8CompletePrefix("ab\xE2\x82"), 2u);      // start of the euro sign
  EXPECT_EQ(Utf8CompletePrefix("ab\xF0\x9F\x98"), 2u);  // start of an emoji
  EXPECT_EQ(Utf8CompletePrefix("ab\xF0"), 2u);
  EXPECT_EQ(Utf8CompletePrefix("ab\xE0\x80"), 4u);      // overlong: never completes
  EXPECT_EQ(Utf8CompletePrefix("ab\x80"), 3u);          // stray continuation byte
  EXPECT_EQ(Utf8CompletePrefix("ab\xE2\x82\xAC"), 5u);  // complete
  EXPECT_EQ(Utf8CompletePrefix(""), 0u);
}

TEST(Utf8, SanitizeReplacesOnlyBadBytes) {
  EXPECT_EQ(SanitizeUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82\xAC"), "\xE2\x82\xAC");
}

}  // namespace
}  // namespace tlr
