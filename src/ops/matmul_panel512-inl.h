// Two-panel kernels for AVX-512 VNNI (ops layer; included by matmul_panel-inl.h for the
// AVX3_DL target only): the 32-element block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) of
// two panels (16 rows) in 512-bit vectors, the first panel's 8 rows in the low
// half of every vector and the second's in the high half. The layout is unchanged
// (panel_layout.h): each 512-bit weight vector is one 32-byte vector of each panel.
//
// Why: the single-panel kernel issues one 256-bit instruction per 32 bytes of weights; CPUs
// with full-width 512-bit units (Zen 5, Intel server cores) run a 512-bit instruction at the
// same rate, so the same instruction stream covers twice the weights. Decode on such a CPU
// was compute-bound at host bandwidths above ~60 GB/s with the 256-bit kernel. matmul_bench
// 512x896 in L2, 1 thread, alternated: Q4_0 40 -> 67 GB/s, Q5_0 37 -> 55; 4864x896 in L3,
// 2 threads: Q4_0 67 -> 87-95, Q5_0 54 -> 64-73, IQ4_NL 63 -> 79-85, Q4_1 70 -> 83.
//
// Per lane the operations are exactly the single-panel kernel's (exact integer sums, then
// the same float multiply-adds in the same order), so a row's result is bit-identical
// whichever kernel computed it, and the decode-equals-batch property holds.

#if defined(TLR_OPS_MATMUL_PANEL512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TLR_OPS_MATMUL_PANEL512_INL_H_
#undef TLR_OPS_MATMUL_PANEL512_INL_H_
#else
#define TLR_OPS_MATMUL_PANEL512_INL_H_
#endif

#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/matmul_quant-inl.h"
#include "ops/panel_layout.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {

#undef TLR_PANEL512
#ifdef TLR_HAVE_VNNI512
#define TLR_PANEL512 1

// acc + per-lane dot of 4 unsigned weight bytes with 4 signed activation bytes. Highway
// 1.0.3's AVX3_DL target does not enable the avx512vnni intrinsics (see TLR_HAVE_VNNI512).
HWY_INLINE __m512i Dp512(__m512i acc, __m512i w, __m512i a) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a));
  return acc;
}
// 32 bytes of each panel: panel 0's in the low half.
HWY_INLINE __m512i Load2Panels(const uint8_t* p0, const uint8_t* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(Load32(p0)), Load32(p1), 1);
}
HWY_INLINE __m512i Bcast4x16(const int8_t* a) {
  int32_t v;
  std::memcpy(&v, a, 4);
  return _mm512_set1_epi32(v);
}
// 8 f16 of each panel -> 16 floats.
HWY_INLINE __m512 Scales2Panels(const uint8_t* p0, const uint8_t* p1) {
  const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0));
  const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(h0), h1, 1));
}
// Both panels' fifth-bit masks of one unpacked vector: bit 4r + i of each, panel 1's above.
// Combined in general registers: two kmovd loads and a kunpckdq ran Q5_0 at 2/3 the speed.
HWY_INLINE __mmask64 Masks2Panels(const uint8_t* m0, const uint8_t* m1) {
  uint32_t a, b;
  std::memcpy(&a, m0, 4);
  std::memcpy(&b, m1, 4);
  return _cvtu64_mask64(static_cast<uint64_t>(a) | static_cast<uint64_t>(b) << 32);
}

// Two unpacked vectors (low and high nibbles of one nibble vector of each panel, values
// col..col+3 and col+4..col+7) dotted with every token's activations: isum[t] += 16 row sums.
template <int NT>
HWY_INLINE void DotLoHi2(__m512i lo, __m512i hi, const ActView* a, int64_t col, __m512i* isum) {
  for (int t = 0; t < NT; ++t) {
    const int8_t* q = a[t].qs + col;
    isum[t] = Dp512(Dp512(isum[t], lo, Bcast4x16(q)), hi, Bcast4x16(q + 4));
  }
}
// Group g of two panels: 4 nibble vectors each at v0 / v1 (fifth-bit masks at k0 / k1 when
// kMask; codes into kIq4nlValues, +128, when kNonlinear): isum[t] += 16 row sums.
template <int NT, bool kMask, bool kNonlinear>
HWY_INLINE void DotNibbleGroup2(const uint8_t* v0, const uint8_t* v1, const uint8_t* k0, const uint8_t* k1,
                                const ActView* a, int64_t g, __m512i* isum) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    const __m512i raw = Load2Panels(v0 + 32 * j, v1 + 32 * j);
    __m512i lo = _mm512_and_si512(raw, m4);
    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    if constexpr (kNonlinear) {
      static constexpr Iq4Table kTable = MakeIq4Table();
      const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kTable.v)));
      lo = _mm512_shuffle_epi8(table, lo);
      hi = _mm512_shuffle_epi8(table, hi);
    }
    if constexpr (kMask) {
      const __m512i fifth = _mm512_set1_epi8(0x10);
      lo = _mm512_mask_add_epi8(lo, Masks2Panels(k0 + 8 * j, k1 + 8 * j), lo, fifth);
      hi = _mm512_mask_add_epi8(hi, Masks2Panels(k0 + 8 * j + 4, k1 + 8 * j + 4), hi, fifth);
    }
    DotLoHi2<NT>(lo, hi, a, 32 * g + 8 * j, isum);
  }
}

// Q8_0's group g of two panels (8 vectors of 4 bytes x 8 rows each, made unsigned by +128:
// the offset term takes it back): isum[t] += 16 row sums.
template <int NT>
HWY_INLINE void DotQ8Group2(const uint8_t* v0, const uint8_t* v1, const ActView* a, int64_t g, __m512i* isum) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int c = 0; c < 8; ++c) {
    const __m512i w = _mm512_xor_si512(Load2Panels(v0 + 32 * c, v1 + 32 * c), bias);
    for (int t = 0; t < NT; ++t) isum[t] = Dp512(isum[t], w, Bcast4x16(a[t].qs + 32 * g + 4 * c));
  }
}

// Panels p0 and p1 x NT tokens: y0[t * ldy + r] (p0's rows) and y1[t * ldy + r] (p1's), r < 8.
// The two panels should be far apart (PanelLayoutRows pairs the two halves of a range): two
// streams a few KiB apart read at two thirds of the speed of one (measured here), while
// streams 32 KiB and more apart read as fast as one or faster.
template <GgmlType kType, int NT>
HWY_NOINLINE void PanelDot2(const uint8_t* p0, const uint8_t* p1, int64_t ng, const ActView* a, float* y0, float* y1,
                            int64_t ldy) {
  constexpr PanelFormat f = PanelFormatOf(kType);
  __m512 acc[NT], off[NT];
  for (int t = 0; t < NT; ++t) acc[t] = off[t] = _mm512_setzero_ps();
  const bool every_line = PrefetchEveryLine();
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* g0 = p0 + g * f.group_bytes;
    const uint8_t* g1 = p1 + g * f.group_bytes;
    PrefetchGroup(g0, f.group_bytes, kPanelPrefetchBytes, every_line);
    PrefetchGroup(g1, f.group_bytes, kPanelPrefetchBytes, every_line);
    __m512i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
    if constexpr (kType == GgmlType::kQ8_0) {
      DotQ8Group2<NT>(g0 + f.values_off, g1 + f.values_off, a, g, isum);
    } else {
      DotNibbleGroup2<NT, f.has_mask, f.nonlinear>(g0 + f.values_off, g1 + f.values_off, g0 + f.mask_off,
                                                   g1 + f.mask_off, a, g, isum);
    }
    const __m512 wd = Scales2Panels(g0, g1);
    const __m512 wo = f.has_min ? Scales2Panels(g0 + f.min_off, g1 + f.min_off) : wd;
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(wd, _mm512_set1_ps(a[t].d[g])), acc[t]);
      if constexpr (PanelOffsetScale<kType>() != 0.0f) off[t] = _mm512_fmadd_ps(wo, _mm512_set1_ps(a[t].s[g]), off[t]);
    }
  }
  constexpr float kOff = PanelOffsetScale<kType>();
  for (int t = 0; t < NT; ++t) {
    __m512 out = acc[t];
    if constexpr (kOff != 0.0f) out = _mm512_fmadd_ps(off[t], _mm512_set1_ps(kOff), out);
    _mm256_storeu_ps(y0 + t * ldy, _mm512_castps512_ps256(out));
    _mm256_storeu_ps(y1 + t * ldy, _mm512_extractf32x8_ps(out, 1));
  }
}

#endif  // TLR_HAVE_VNNI512

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
