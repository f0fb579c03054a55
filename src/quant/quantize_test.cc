// Unit tests of the quant layer: the type table, the block layouts (hand-built blocks decode to
// values worked out by hand from ggml's format), and quantize -> dequantize round trips for
// every type with a quantizer, under per-value error bounds read from each block's own scales
// (what a round-to-nearest quantizer guarantees) and an overall relative RMS error bound.
#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

namespace tlr {
namespace {

constexpr uint16_t kHalfOne = 0x3C00, kHalfHalf = 0x3800, kHalfQuarter = 0x3400, kHalfTwo = 0x4000;

TEST(GgmlTypes, TableHasTheLowBitTypes) {
  const auto nl = FindGgmlType(20), xs = FindGgmlType(23);
  ASSERT_TRUE(nl && xs);
  EXPECT_EQ(nl->name, "iq4_nl");
  EXPECT_EQ(nl->block_size, 32u);
  EXPECT_EQ(nl->type_size, sizeof(BlockIQ4_NL));
  EXPECT_EQ(xs->name, "iq4_xs");
  EXPECT_EQ(xs->block_size, 256u);
  EXPECT_EQ(xs->type_size, sizeof(BlockIQ4_XS));
  EXPECT_EQ(GgmlTraits(GgmlType::kQ2_K).type_size, sizeof(BlockQ2_K));
  EXPECT_EQ(GgmlTraits(GgmlType::kQ3_K).type_size, sizeof(BlockQ3_K));
  EXPECT_EQ(*GgmlTensorBytes(GgmlType::kIQ4_XS, 512, 512 * 3), 6u * 136);
  EXPECT_FALSE(GgmlTensorBytes(GgmlType::kIQ4_XS, 896, 896).ok());
  EXPECT_FALSE(FindGgmlType(21).has_value());  // iq3_s: not supported
  for (size_t i = 1; i < AllGgmlTypes().size(); ++i) {
    EXPECT_LT(static_cast<uint32_t>(AllGgmlTypes()[i - 1].type), static_cast<uint32_t>(AllGgmlTypes()[i].type));
  }
}

std::vector<float> Decode(GgmlType type, const void* block) {
  std::vector<float> y(GgmlTraits(type).block_size);
  EXPECT_TRUE(Dequantize(type, block, y.data(), static_cast<int64_t>(y.size())).ok());
  return y;
}

TEST(BlockLayout, Q2K) {
  BlockQ2_K b{};
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  b.scales[5] = (3 << 4) | 7;   // sub-block 5 = elements 80-95: sc 7, m 3
  b.scales[12] = (15 << 4) | 1;  // sub-block 12 = elements 192-207: sc 1, m 15
  b.qs[21] = 2 << 4;             // element 85 = chunk 2, l 21: bits 4-5 of qs[21]
  b.qs[37] = 3 << 4;             // element 197 = chunk 6, l 5: bits 4-5 of qs[32 + 5]
  const auto y = Decode(GgmlType::kQ2_K, &b);
  EXPECT_EQ(y[85], 1.0f * 7 * 2 - 0.5f * 3);
  EXPECT_EQ(y[84], -0.5f * 3);       // same sub-block, code 0
  EXPECT_EQ(y[21], 0.0f);            // bits 0-1 of qs[21]: code 0, sub-block 1 all zero
  EXPECT_EQ(y[197], 1.0f * 1 * 3 - 0.5f * 15);
  EXPECT_EQ(y[192], -0.5f * 15);
}

TEST(BlockLayout, Q3K) {
  BlockQ3_K b{};
  b.d = kHalfHalf;
  // Sub-block 13 (elements 208-223, chunk 6, l 16-31) gets the 6-bit scale 40 (= +8): low
  // nibble in the high half of scales[5], high bits (2) at bits 6-7 of scales[9].
  b.scales[5] = 8 << 4;
  b.scales[9] = 2 << 6;
  b.qs[32 + 20] = 1 << 4;   // element 212 (l 20): low bits 1 ...
  b.hmask[20] = 1 << 6;     // ... high bit set: code 5 -> 5 - 4 = +1
  b.qs[32 + 21] = 3 << 4;   // element 213: code 3, high bit clear -> -1
  EXPECT_EQ(Q3KScale(b.scales, 13), 40);
  const auto y = Decode(GgmlType::kQ3_K, &b);
  EXPECT_EQ(y[212], 0.5f * 8 * 1);
  EXPECT_EQ(y[213], 0.5f * 8 * -1);
  EXPECT_EQ(y[0], 0.5f * -32 * -4);  // scale 0 -> -32, code 0 without high bit -> -4
  EXPECT_EQ(y[208], 0.5f * 8 * -4);
}

TEST(BlockLayout, IQ4NL) {
  BlockIQ4_NL b{};
  b.d = kHalfTwo;
  b.qs[3] = (15 << 4) | 0;
  b.qs[4] = (8 << 4) | 9;
  const auto y = Decode(GgmlType::kIQ4_NL, &b);
  EXPECT_EQ(y[3], 2.0f * -127);
  EXPECT_EQ(y[19], 2.0f * 113);
  EXPECT_EQ(y[4], 2.0f * 13);
  EXPECT_EQ(y[20], 2.0f * 1);
}

TEST(BlockLayout, IQ4XS) {
  BlockIQ4_XS b{};
  b.d = kHalfQuarter;
  // Sub-block 5 gets ls = 45 = 0b10'1101: low nibble 13 in the high half of scales_l[2],
  // high bits 2 at bits 10-11 of scales_h. Its codes are qs[80..95].
  b.scales_l[2] = 13 << 4;
  b.scales_h = 2 << 10;
  b.qs[80 + 7] = (2 << 4) | 9;
  EXPECT_EQ(Iq4XsScale(b, 5), 45);
  const auto y = Decode(GgmlType::kIQ4_XS, &b);
  EXPECT_EQ(y[160 + 7], 0.25f * 13 * 13);
  EXPECT_EQ(y[160 + 23], 0.25f * 13 * -83);
  EXPECT_EQ(y[0], 0.25f * -32 * -127);  // sub-block 0: ls 0, code 0
}

// ---- round trips ----

// The largest error each value may have after a round trip, read from its block: half a
// quantization step for round-to-nearest codes whose range covers the block, a full step for
// the top code of the symmetric types (their largest magnitude maps to the bottom code, so a
// value of the other sign and the same magnitude clamps), and the legacy quantizers' use of
// the unrounded scale (at most |code| * 2^-11 of a step more).
double ErrorBound(GgmlType type, const uint8_t* row, int64_t i, float x) {
  const auto& tr = GgmlTraits(type);
  const uint8_t* b = row + (i / tr.block_size) * tr.type_size;
  const int j = static_cast<int>(i % tr.block_size);
  const double slack = 4e-7 * (std::fabs(x) + 1);  // float rounding of the decoder
  auto half = [&](size_t at) {
    uint16_t h;
    std::memcpy(&h, b + at, 2);
    return std::fabs(static_cast<double>(F16ToF32(h)));
  };
  auto nibble = [&](const uint8_t* qs) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; };
  switch (type) {
    case GgmlType::kF16: return std::fabs(x) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
    case GgmlType::kBF16: return std::fabs(x) * std::ldexp(1.0, -8);
    case GgmlType::kQ8_0: return (0.5 + 127 * std::ldexp(1.0, -11)) * half(0) + slack;
    case GgmlType::kQ4_0: return (nibble(b + 2) == 15 ? 1.0 : 0.51) * half(0) + slack;
    case GgmlType::kQ5_0: {
      const Q5Fields f = ParseQ5(b, false);
      const int code = nibble(f.qs) | (((f.qh >> j) & 1) << 4);
      return (code == 31 ? 1.0 : 0.51) * half(0) + slack;
    }
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:  // min rounded to f16: up to 2^-11 |m| more
      return 0.51 * half(0) + std::ldexp(half(2), -10) + slack;
    case GgmlType::kQ2_K: {
      const auto& q = *reinterpret_cast<const BlockQ2_K*>(b);
      return 0.5 * F16ToF32(q.d) * (q.scales[j / 16] & 0xF) + slack;
    }
    case GgmlType::kQ3_K: {
      const auto& q = *reinterpret_cast<const BlockQ3_K*>(b);
      const int c = j / 32, l = j % 32;
      const int code = ((q.qs[32 * (c / 4) + l] >> (2 * (c % 4))) & 3) | (((q.hmask[l] >> c) & 1) << 2);
      const double step = std::fabs(F16ToF32(q.d) * (Q3KScale(q.scales, j / 16) - 32));
      return (code == 7 ? 1.0 : 0.5) * step + slack;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      uint8_t sc, m;
      ScaleMinK4(j / 32, b + 4, &sc, &m);
      return 0.5 * half(0) * sc + slack;
    }
    case GgmlType::kQ6_K: {
      const auto& q = *reinterpret_cast<const BlockQ6_K*>(b);
      return 0.5 * std::fabs(F16ToF32(q.d) * q.scales[j / 16]) + slack;
    }
    case GgmlType::kIQ4_NL:  // half the widest gap of the table (24), or 127 -> 113 at the top
      return 14 * half(0) + slack;
    case GgmlType::kIQ4_XS: {
      const auto& q = *reinterpret_cast<const BlockIQ4_XS*>(b);
      return 14 * std::fabs(F16ToF32(q.d) * (Iq4XsScale(q, j / 32) - 32)) + slack;
    }
    default: return 0;
  }
}

struct RoundTrip {
  GgmlType type;
  // RMS error / RMS value over Gaussian values; the measured values (printed) are ~0.8x
  // these, e.g. 0.36 for q2_K, whose 4 levels span a 16-value range: step / sqrt(12).
  double max_rel_rms;
};

TEST(Quantize, RoundTripsWithinBounds) {
  const RoundTrip cases[] = {
      {GgmlType::kF16, 3e-4},    {GgmlType::kBF16, 2.5e-3}, {GgmlType::kQ8_0, 0.007},
      {GgmlType::kQ4_0, 0.11},   {GgmlType::kQ4_1, 0.10},   {GgmlType::kQ5_0, 0.055},
      {GgmlType::kQ5_1, 0.05},   {GgmlType::kQ2_K, 0.45},   {GgmlType::kQ3_K, 0.2},
      {GgmlType::kQ4_K, 0.1},    {GgmlType::kQ5_K, 0.05},   {GgmlType::kQ6_K, 0.025},
      {GgmlType::kIQ4_NL, 0.1},  {GgmlType::kIQ4_XS, 0.1},
  };
  const int64_t n = 4096;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const RoundTrip& c : cases) {
    ASSERT_TRUE(CanQuantize(c.type) && CanDequantize(c.type)) << GgmlTraits(c.type).name;
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = normal(rng);
    // Special runs (the first 512 values): zeros, a constant, one large outlier, all negative.
    for (int i = 0; i < 256; ++i) x[i] = 0;
    for (int i = 256; i < 288; ++i) x[i] = 0.75f;
    x[300] = 25.0f;
    for (int i = 384; i < 512; ++i) x[i] = -std::fabs(x[i]) - 0.1f;
    std::vector<uint8_t> q(*GgmlTensorBytes(c.type, n, n));
    ASSERT_TRUE(Quantize(c.type, x.data(), q.data(), n).ok());
    ASSERT_TRUE(Dequantize(c.type, q.data(), y.data(), n).ok());
    double err2 = 0, val2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::fabs(static_cast<double>(y[i]) - x[i]);
      ASSERT_LE(e, ErrorBound(c.type, q.data(), i, x[i]))
          << GgmlTraits(c.type).name << " value " << i << ": " << x[i] << " -> " << y[i];
      if (i < 256) {
        ASSERT_EQ(y[i], 0.0f) << GgmlTraits(c.type).name << " zero run";
      }
      if (i >= 512) {
        err2 += e * e;
        val2 += static_cast<double>(x[i]) * x[i];
      }
    }
    const double rel = std::sqrt(err2 / val2);
    std::printf("[ roundtrip ] %-6s relative RMS error %.4f\n", std::string(GgmlTraits(c.type).name).c_str(), rel);
    EXPECT_LT(rel, c.max_rel_rms) << GgmlTraits(c.type).name;
  }
}

// IQ4 codes are the nearest table entry for the block's (sub-block) scale.
TEST(Quantize, IQ4CodesAreNearest) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(512);
  for (auto& v : x) v = normal(rng);
  std::vector<BlockIQ4_NL> nl(16);
  std::vector<BlockIQ4_XS> xs(2);
  ASSERT_TRUE(Quantize(GgmlType::kIQ4_NL, x.data(), nl.data(), 512).ok());
  ASSERT_TRUE(Quantize(GgmlType::kIQ4_XS, x.data(), xs.data(), 512).ok());
  for (int i = 0; i < 512; ++i) {
    const int j = i % 32;
    const float dnl = F16ToF32(nl[i / 32].d);
    const auto& bx = xs[i / 256];
    const float dxs = F16ToF32(bx.d) * (Iq4XsScale(bx, (i % 256) / 32) - 32);
    const uint8_t* qx = bx.qs + 16 * ((i % 256) / 32);
    const int cnl = j < 16 ? nl[i / 32].qs[j] & 0xF : nl[i / 32].qs[j - 16] >> 4;
    const int cxs = j < 16 ? qx[j] & 0xF : qx[j - 16] >> 4;
    for (int k = 0; k < 16; ++k) {
      EXPECT_LE(std::fabs(x[i] - dnl * kIq4nlValues[cnl]), std::fabs(x[i] - dnl * kIq4nlValues[k]) + 1e-6f) << i;
      EXPECT_LE(std::fabs(x[i] - dxs * kIq4nlValues[cxs]), std::fabs(x[i] - dxs * kIq4nlValues[k]) + 1e-6f) << i;
    }
  }
}

TEST(Quantize, ErrorsForUnsupportedTypesAndSizes) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> buf(1024);
  EXPECT_FALSE(Quantize(GgmlType::kQ8_1, x.data(), buf.data(), 256).ok());
  EXPECT_FALSE(Dequantize(GgmlType::kI32, buf.data(), x.data(), 256).ok());
  EXPECT_FALSE(Quantize(GgmlType::kQ2_K, x.data(), buf.data(), 128).ok());  // not a whole block
  EXPECT_FALSE(Dequantize(GgmlType::kIQ4_NL, buf.data(), x.data(), 48).ok());
}

}  // namespace
}  // namespace tlr
