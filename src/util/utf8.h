// UTF-8 helpers (util layer): strict decoding, encoding, validation, and the
// "how much of this buffer is complete characters" question that streaming decode asks.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tlr {

// Decodes one code point at s[*pos] and advances *pos. Returns false (advancing by one
// byte, *cp = U+FFFD) on an ill-formed sequence: bad lead byte, missing or bad
// continuation, overlong form, surrogate, or a value above U+10FFFF.
bool DecodeUtf8(std::string_view s, size_t* pos, char32_t* cp);

// Appends the UTF-8 encoding of `cp` (U+FFFD for surrogates and values past U+10FFFF).
void AppendUtf8(std::string* out, char32_t cp);

bool IsValidUtf8(std::string_view s);

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence that could
// still be completed by more bytes. Ill-formed bytes count as complete (they will never
// become valid), so a streaming printer never waits forever.
size_t Utf8CompletePrefix(std::string_view s);

// Replaces every ill-formed byte with U+FFFD; valid text is returned unchanged.
std::string SanitizeUtf8(std::string_view s);

// A-Z lowered, every other byte kept (protocol tokens, header names, answer letters).
std::string AsciiLower(std::string_view s);

}  // namespace tlr
