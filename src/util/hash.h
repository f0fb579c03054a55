// Hashing helpers (util layer): 64-bit FNV-1a over fields, for fingerprints that identify a
// tokenizer or a model (not for security). Each field ends with a separator byte so
// ("ab", "c") and ("a", "bc") hash differently.
#pragma once

#include <cstdint>
#include <string_view>

namespace tlr {

inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;

inline uint64_t Fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= 0xff;
  h *= 0x100000001b3ull;
  return h;
}

inline uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  return Fnv1a(h, std::string_view(static_cast<const char*>(data), n));
}

// 16 lowercase hex digits.
inline std::string_view HexU64(uint64_t v, char (&buf)[17]) {
  static const char* kHex = "0123456789abcdef";
  for (int i = 15; i >= 0; --i, v >>= 4) buf[i] = kHex[v & 15];
  buf[16] = 0;
  return std::string_view(buf, 16);
}

}  // namespace tlr
