// The edge–cloud token protocol's shared definitions (net layer), used by the server and
// the device's remote backend alike; docs/protocol.md is the reference.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tlr {

// The prefix hash the device and the server compare before the server appends anything:
// 64-bit FNV-1a over the token ids, each as 4 little-endian bytes, no separators; written as
// 16 lowercase hex digits. Not a security measure (it catches desync, not forgery).
inline uint64_t TokenPrefixHash(std::span<const int32_t> tokens) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

inline std::string HashHex(uint64_t v) {
  static const char* kHex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = kHex[v & 15];
  return s;
}

// Parses 16 hex digits (either case); false on anything else.
inline bool ParseHashHex(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace tlr
