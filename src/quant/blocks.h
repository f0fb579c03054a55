// Block layouts of ggml's quantized types, byte-compatible with GGUF files (quant layer), and
// the half-precision conversions they need. Each struct's size is checked against the type
// table in ggml_type.cc. Plain data; thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

namespace tlr {

inline constexpr int kQK = 32;    // elements per block of the "legacy" types and of Q8A
inline constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ4_0 {  // x = d * (q - 8), q in 0..15
  uint16_t d;       // f16
  uint8_t qs[16];   // element j in the low nibble of qs[j], element j+16 in the high nibble
};
struct BlockQ4_1 {  // x = d * q + m
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {  // x = d * (q - 16), 5th bit of element j in bit j of qh
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {  // x = d * q
  uint16_t d;
  int8_t qs[32];
};
// 16 sub-blocks of 16: x = d * sc_j * q - dmin * m_j, q in 0..3, sc_j = scales[j] & 15,
// m_j = scales[j] >> 4. Element 32 * c + l (chunk c = 0..7, l = 0..31) has its 2 bits at
// bit 2 * (c % 4) of qs[32 * (c / 4) + l] and sub-block 2 * c + l / 16.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
// 16 sub-blocks of 16: x = d * (sc_j - 32) * (q - 4), q in 0..7: the low 2 bits laid out as
// in Q2_K, the high bit of element 32 * c + l at bit c of hmask[l]; the 6-bit sc_j packed in
// scales (see Q3KScale).
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32: x = d * sc_j * q - dmin * m_j, with 6-bit sc_j, m_j packed in scales.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];  // 64-element groups: low nibbles = first 32, high nibbles = next 32
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// 16 sub-blocks of 16: x = d * sc_j * (q - 32), 6-bit q split in ql (4 bits) and qh (2 bits).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// Non-linear 4-bit types: a 4-bit code indexes kIq4nlValues. IQ4_NL: 32-element blocks laid
// out like Q4_0, x = d * kIq4nlValues[code]. IQ4_XS: 8 sub-blocks of 32 with 6-bit scales,
// x = d * (ls_j - 32) * kIq4nlValues[code], ls_j = low 4 bits in nibble j of scales_l (byte
// j / 2), high 2 bits at bit 2 * j of scales_h; sub-block j's codes in qs[16 j .. 16 j + 16)
// like a Q4_0 block (low nibbles: elements 0-15, high nibbles: 16-31).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ2_K) == 84 &&
              sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 &&
              sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292 && sizeof(BlockIQ4_NL) == 18 &&
              sizeof(BlockIQ4_XS) == 136,
              "block layouts must match ggml");

// IEEE half <-> float, exact for every half value; float -> half rounds to nearest even.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
inline float Bf16ToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t F32ToBf16(float f);  // round to nearest even; NaN stays NaN

// The fields of a Q5_0 (has_min = false) or Q5_1 block starting at b.
struct Q5Fields {
  uint16_t d, m;  // f16 scale and (Q5_1) minimum
  uint32_t qh;    // 5th bits: bit j belongs to element j
  const uint8_t* qs;
};
inline Q5Fields ParseQ5(const uint8_t* b, bool has_min) {
  Q5Fields f{0, 0, 0, b + (has_min ? 8 : 6)};
  std::memcpy(&f.d, b, 2);
  if (has_min) std::memcpy(&f.m, b + 2, 2);
  std::memcpy(&f.qh, b + (has_min ? 4 : 2), 4);
  return f;
}

// The 6-bit scale and minimum of sub-block j (0..7) of a Q4_K/Q5_K block.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 6-bit scale of sub-block j (0..15) of a Q3_K block, without its offset of 32: the low
// 4 bits are nibble j / 8 of scales[j % 8], the high 2 bits sit at bit 2 * (j / 4) of
// scales[8 + j % 4].
inline int Q3KScale(const uint8_t* scales, int j) {
  const int lo = (j < 8 ? scales[j] : scales[j - 8] >> 4) & 0xF;
  const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

// The 6-bit scale of sub-block j (0..7) of an IQ4_XS block, without its offset of 32.
inline int Iq4XsScale(const BlockIQ4_XS& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

}  // namespace tlr
