// UTF-8 helpers (util layer). See utf8.h.
#include "util/utf8.h"

namespace tlr {

bool DecodeUtf8(std::string_view s, size_t* pos, char32_t* cp) {
  const size_t i = *pos;
  const auto b0 = static_cast<uint8_t>(s[i]);
  auto fail = [&] {
    *pos = i + 1;
    *cp = 0xFFFD;
    return false;
  };
  if (b0 < 0x80) {
    *cp = b0;
    *pos = i + 1;
    return true;
  }
  size_t n;
  char32_t v;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, v = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, v = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, v = b0 & 0x07, min = 0x10000;
  } else {
    return fail();
  }
  if (i + n > s.size()) return fail();
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return fail();
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail();
  *cp = v;
  *pos = i + n;
  return true;
}

void AppendUtf8(std::string* out, char32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  size_t pos = 0;
  char32_t cp;
  while (pos < s.size()) {
    if (!DecodeUtf8(s, &pos, &cp)) return false;
  }
  return true;
}

namespace {
// Allowed range of the byte after `lead` (Unicode Table 3-7, well-formed byte sequences).
void SecondByteRange(uint8_t lead, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80, *hi = 0xBF;
  if (lead == 0xE0) *lo = 0xA0;
  if (lead == 0xED) *hi = 0x9F;
  if (lead == 0xF0) *lo = 0x90;
  if (lead == 0xF4) *hi = 0x8F;
}
}  // namespace

size_t Utf8CompletePrefix(std::string_view s) {
  // Only the last 1..3 bytes can be the start of a sequence that more bytes would finish.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto lead = static_cast<uint8_t>(s[n - back]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = 0;
    if (lead >= 0xC2 && lead <= 0xDF) need = 2;
    else if (lead >= 0xE0 && lead <= 0xEF) need = 3;
    else if (lead >= 0xF0 && lead <= 0xF4) need = 4;
    if (need <= back) return n;  // complete, or a byte that never starts a sequence
    for (size_t k = 1; k < back; ++k) {
      const auto b = static_cast<uint8_t>(s[n - back + k]);
      uint8_t lo = 0x80, hi = 0xBF;
      if (k == 1) SecondByteRange(lead, &lo, &hi);
      if (b < lo || b > hi) return n;  // already ill-formed: it will never complete
    }
    return n - back;
  }
  return n;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    char32_t cp;
    if (DecodeUtf8(s, &pos, &cp)) {
      out.append(s.substr(start, pos - start));
    } else {
      AppendUtf8(&out, 0xFFFD);
    }
  }
  return out;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return out;
}

}  // namespace tlr
