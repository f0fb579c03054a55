// Two-panel K-quant kernels for AVX-512 VNNI (ops layer; included by matmul_kquant.cc
// after matmul_kpanel-inl.h; AVX3_DL target only): Q4_K, Q5_K, Q6_K and IQ4_XS weights of
// two panels (16 rows) in 512-bit vectors (Q2_K and Q3_K: KPanelDot23x2 at the end), as
// matmul_panel512-inl.h does for the 32-element types: panel p0's 8 rows in the low half of
// every vector, p1's in the high half, the layout unchanged. Per lane the operations are
// the one-panel kernels' (exact integer sums, then the same float multiply-adds in the same
// order), so a row's result is the same bits whichever kernel computed it. matmul_bench
// 512x1024 in L2, 1 thread, alternated: Q4_K 34 -> 55 GB/s, Q5_K 32 -> 49-53, Q6_K 49 ->
// 74-76, IQ4_XS 34 -> 55.

#if defined(TLR_OPS_MATMUL_KPANEL512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TLR_OPS_MATMUL_KPANEL512_INL_H_
#undef TLR_OPS_MATMUL_KPANEL512_INL_H_
#else
#define TLR_OPS_MATMUL_KPANEL512_INL_H_
#endif

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/panel_layout.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {

#ifdef TLR_PANEL512

// 8 bytes of each panel (p0's first) as 16 int32 lanes.
HWY_INLINE __m128i Bytes8x2(const void* p0, const void* p1) {
  return _mm_unpacklo_epi64(_mm_loadl_epi64(static_cast<const __m128i*>(p0)),
                            _mm_loadl_epi64(static_cast<const __m128i*>(p1)));
}
HWY_INLINE __m512 U8x2ToFloat(const uint8_t* p0, const uint8_t* p1) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(Bytes8x2(p0, p1)));
}
HWY_INLINE __m512 I8x2ToFloat(const int8_t* p0, const int8_t* p1) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(Bytes8x2(p0, p1)));
}

// PrefetchKGroup for group j of both panels' super-blocks b0 and b1 (groups g0 and g1).
HWY_INLINE void Prefetch2Panels(bool every_line, const uint8_t* b0, const uint8_t* b1, size_t block_bytes,
                                int64_t j, const uint8_t* g0, const uint8_t* g1, size_t ahead) {
  PrefetchKGroup(every_line, b0, block_bytes, j, g0, ahead);
  PrefetchKGroup(every_line, b1, block_bytes, j, g1, ahead);
}

// Q6_K's two high bits of unpacked vector kU (see Q6High), both panels.
template <int kU>
HWY_INLINE __m512i Q6High2(__m512i h) {
  const __m512i m30 = _mm512_set1_epi8(0x30);
  constexpr int kShift = 4 - 2 * (kU % 4);
  if constexpr (kShift > 0) return _mm512_and_si512(_mm512_slli_epi16(h, kShift), m30);
  if constexpr (kShift == 0) return _mm512_and_si512(h, m30);
  return _mm512_and_si512(_mm512_srli_epi16(h, -kShift), m30);
}
// One 16-value half kC of a Q6_K group of both panels (see Q6HalfSums).
template <int NT, int kC>
HWY_INLINE void Q6HalfSums2(const uint8_t* g0, const uint8_t* g1, const KPanelFormat& f, const ActView* a, int64_t g,
                            __m512i* isum) {
  const __m512i h = Load2Panels(g0 + f.high_off + 32 * kC, g1 + f.high_off + 32 * kC);
  for (int t = 0; t < NT; ++t) isum[t] = _mm512_set1_epi32(-32 * a[t].s16[2 * g + kC]);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const size_t v = f.values_off + 64 * kC;
  const __m512i r0 = Load2Panels(g0 + v, g1 + v), r1 = Load2Panels(g0 + v + 32, g1 + v + 32);
  DotLoHi2<NT>(_mm512_or_si512(_mm512_and_si512(r0, m4), Q6High2<0>(h)),
               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(r0, 4), m4), Q6High2<1>(h)), a, 32 * g + 16 * kC,
               isum);
  DotLoHi2<NT>(_mm512_or_si512(_mm512_and_si512(r1, m4), Q6High2<2>(h)),
               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(r1, 4), m4), Q6High2<3>(h)), a,
               32 * g + 16 * kC + 8, isum);
}

// Panels p0 and p1 x NT tokens of Q4_K, Q5_K, Q6_K or IQ4_XS: y0[t * ldy + r] (p0's rows)
// and y1[t * ldy + r] (p1's), r < 8. ng: groups of 32 columns.
template <GgmlType kType, int NT>
HWY_NOINLINE void KPanelDot2(const uint8_t* p0, const uint8_t* p1, int64_t ng, const ActView* a, float* y0,
                             float* y1, int64_t ldy) {
  constexpr KPanelFormat f = KPanelFormatOf(kType);
  static_assert(!f.two_bit, "Q2_K and Q3_K run on one panel");
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const bool every_line = PrefetchEveryLine();
  for (int64_t sb = 0; sb < ng / 8; ++sb) {
    const uint8_t* b0 = p0 + sb * f.block_bytes;
    const uint8_t* b1 = p1 + sb * f.block_bytes;
    HWY_ALIGN uint8_t sc[2][64], mn[2][64];
    HWY_ALIGN int8_t xs[2][64];  // IQ4_XS
    if constexpr (f.has_min) {
      DecodeScalesK4(b0 + f.scales_off, sc[0], mn[0]);
      DecodeScalesK4(b1 + f.scales_off, sc[1], mn[1]);
    }
    if constexpr (f.nonlinear) {
      DecodeScalesXs(b0 + f.scales_off, xs[0]);
      DecodeScalesXs(b1 + f.scales_off, xs[1]);
    }
    const auto* sc6_0 = reinterpret_cast<const int8_t*>(b0 + f.scales_off);  // Q6_K: byte 8k + r
    const auto* sc6_1 = reinterpret_cast<const int8_t*>(b1 + f.scales_off);
    const __m512 wd = Scales2Panels(b0, b1);
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t g = 8 * sb + j;
      const uint8_t* g0 = b0 + f.groups_off + j * f.group_bytes;
      const uint8_t* g1 = b1 + f.groups_off + j * f.group_bytes;
      Prefetch2Panels(every_line, b0, b1, f.block_bytes, j, g0, g1, 4 * f.group_bytes);
      __m512i isum[NT];
      if constexpr (f.six_bit) {
        __m512i part[NT];
        Q6HalfSums2<NT, 0>(g0, g1, f, a, g, part);
        const __m512i s0 = _mm512_cvtepi8_epi32(Bytes8x2(sc6_0 + 16 * j, sc6_1 + 16 * j));
        for (int t = 0; t < NT; ++t) part[t] = _mm512_mullo_epi32(part[t], s0);
        Q6HalfSums2<NT, 1>(g0, g1, f, a, g, isum);
        const __m512i s1 = _mm512_cvtepi8_epi32(Bytes8x2(sc6_0 + 16 * j + 8, sc6_1 + 16 * j + 8));
        for (int t = 0; t < NT; ++t) isum[t] = _mm512_add_epi32(part[t], _mm512_mullo_epi32(isum[t], s1));
      } else {
        for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
        DotNibbleGroup2<NT, f.has_mask, f.nonlinear>(g0 + f.values_off, g1 + f.values_off, g0 + f.mask_off,
                                                     g1 + f.mask_off, a, g, isum);
      }
      if constexpr (f.has_min) {
        const __m512 dsc = _mm512_mul_ps(wd, U8x2ToFloat(sc[0] + 8 * j, sc[1] + 8 * j));
        const __m512 dmn = _mm512_mul_ps(Scales2Panels(b0 + f.dmin_off, b1 + f.dmin_off),
                                         U8x2ToFloat(mn[0] + 8 * j, mn[1] + 8 * j));
        for (int t = 0; t < NT; ++t) {
          const __m512 acc_t =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dsc, _mm512_set1_ps(a[t].d[g])), acc[t]);
          acc[t] = _mm512_fnmadd_ps(dmn, _mm512_set1_ps(a[t].s[g]), acc_t);
        }
      } else if constexpr (f.nonlinear) {
        const size_t k = 32 * (j % 2) + 8 * (j / 2);
        const __m512 dsc = _mm512_mul_ps(wd, I8x2ToFloat(xs[0] + k, xs[1] + k));
        constexpr float kOff = PanelOffsetScale<GgmlType::kIQ4_NL>();
        for (int t = 0; t < NT; ++t) {
          const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_set1_ps(a[t].d[g]),
                                           _mm512_set1_ps(kOff * a[t].s[g]));
          acc[t] = _mm512_fmadd_ps(dsc, v, acc[t]);
        }
      } else {
        for (int t = 0; t < NT; ++t) {
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(wd, _mm512_set1_ps(a[t].d[g])), acc[t]);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    _mm256_storeu_ps(y0 + t * ldy, _mm512_castps512_ps256(acc[t]));
    _mm256_storeu_ps(y1 + t * ldy, _mm512_extractf32x8_ps(acc[t], 1));
  }
}

// ---- Q2_K and Q3_K (see KPanelDot23) ----
// Unpacked vector kU of a group of both panels (see Q23Vector).
template <int NT, bool kQ3, int kU>
HWY_INLINE void Q23Vector2(__m512i lows, __m512i high, const ActView* a, int64_t g, __m512i* isum) {
  constexpr int kS = 2 * (kU % 4);
  __m512i q = _mm512_and_si512(kS ? _mm512_srli_epi16(lows, kS) : lows, _mm512_set1_epi8(3));
  if constexpr (kQ3) {
    __m512i h;
    if constexpr (kU < 2) h = _mm512_slli_epi16(high, 2 - kU);
    else if constexpr (kU == 2) h = high;
    else h = _mm512_srli_epi16(high, kU - 2);
    q = _mm512_or_si512(q, _mm512_and_si512(h, _mm512_set1_epi8(4)));
  }
  for (int t = 0; t < NT; ++t) isum[t] = Dp512(isum[t], q, Bcast4x16(a[t].qs + 32 * g + 4 * kU));
}
// Sub-block kC (0, 1) of group g of both panels (see Q23HalfSums).
template <int NT, bool kQ3, int kC>
HWY_INLINE void Q23HalfSums2(const uint8_t* g0, const uint8_t* g1, const KPanelFormat& f, const ActView* a, int64_t g,
                             __m512i* isum) {
  const __m512i lows = Load2Panels(g0 + f.values_off + 32 * kC, g1 + f.values_off + 32 * kC);
  const __m512i high = kQ3 ? Load2Panels(g0 + f.high_off, g1 + f.high_off) : _mm512_setzero_si512();
  for (int t = 0; t < NT; ++t) {
    isum[t] = kQ3 ? _mm512_set1_epi32(-4 * a[t].s16[2 * g + kC]) : _mm512_setzero_si512();
  }
  Q23Vector2<NT, kQ3, 4 * kC>(lows, high, a, g, isum);
  Q23Vector2<NT, kQ3, 4 * kC + 1>(lows, high, a, g, isum);
  Q23Vector2<NT, kQ3, 4 * kC + 2>(lows, high, a, g, isum);
  Q23Vector2<NT, kQ3, 4 * kC + 3>(lows, high, a, g, isum);
}

// Panels p0 and p1 x NT tokens of Q2_K or Q3_K: y0[t * ldy + r] (p0's rows) and
// y1[t * ldy + r] (p1's), r < 8.
template <GgmlType kType, int NT>
HWY_NOINLINE void KPanelDot23x2(const uint8_t* p0, const uint8_t* p1, int64_t ng, const ActView* a, float* y0,
                                float* y1, int64_t ldy) {
  constexpr KPanelFormat f = KPanelFormatOf(kType);
  constexpr bool kQ3 = kType == GgmlType::kQ3_K;
  static_assert(f.two_bit, "Q2_K and Q3_K only");
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const bool every_line = PrefetchEveryLine();
  for (int64_t sb = 0; sb < ng / 8; ++sb) {
    const uint8_t* b0 = p0 + sb * f.block_bytes;
    const uint8_t* b1 = p1 + sb * f.block_bytes;
    const uint8_t* raw0 = b0 + f.scales_off;  // byte 8k + r: scale byte k of row r
    const uint8_t* raw1 = b1 + f.scales_off;
    HWY_ALIGN int8_t sc3[2][128];  // Q3_K: sc[8k + r] = scale k of row r, minus 32
    if constexpr (kQ3) {
      DecodeScalesQ3(raw0, sc3[0]);
      DecodeScalesQ3(raw1, sc3[1]);
    }
    const __m512 wd = Scales2Panels(b0, b1);
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t g = 8 * sb + j;
      const uint8_t* g0 = b0 + f.groups_off + j * f.group_bytes;
      const uint8_t* g1 = b1 + f.groups_off + j * f.group_bytes;
      Prefetch2Panels(every_line, b0, b1, f.block_bytes, j, g0, g1, 8 * f.group_bytes);
      __m512i isum[NT], msum[NT], part[NT];
      Q23HalfSums2<NT, kQ3, 0>(g0, g1, f, a, g, part);
      Q23HalfSums2<NT, kQ3, 1>(g0, g1, f, a, g, isum);
      if constexpr (kQ3) {
        const __m512i s0 = _mm512_cvtepi8_epi32(Bytes8x2(sc3[0] + 16 * j, sc3[1] + 16 * j));
        const __m512i s1 = _mm512_cvtepi8_epi32(Bytes8x2(sc3[0] + 16 * j + 8, sc3[1] + 16 * j + 8));
        for (int t = 0; t < NT; ++t) {
          isum[t] = _mm512_add_epi32(_mm512_mullo_epi32(part[t], s0), _mm512_mullo_epi32(isum[t], s1));
        }
      } else {
        const __m512i bb0 = _mm512_cvtepu8_epi32(Bytes8x2(raw0 + 16 * j, raw1 + 16 * j));
        const __m512i bb1 = _mm512_cvtepu8_epi32(Bytes8x2(raw0 + 16 * j + 8, raw1 + 16 * j + 8));
        const __m512i m4 = _mm512_set1_epi32(0x0F);
        const __m512i s0 = _mm512_and_si512(bb0, m4), s1 = _mm512_and_si512(bb1, m4);
        const __m512i m0 = _mm512_srli_epi32(bb0, 4), m1 = _mm512_srli_epi32(bb1, 4);
        for (int t = 0; t < NT; ++t) {
          isum[t] = _mm512_add_epi32(_mm512_mullo_epi32(part[t], s0), _mm512_mullo_epi32(isum[t], s1));
          msum[t] = _mm512_add_epi32(_mm512_mullo_epi32(m0, _mm512_set1_epi32(a[t].s16[2 * g])),
                                     _mm512_mullo_epi32(m1, _mm512_set1_epi32(a[t].s16[2 * g + 1])));
        }
      }
      for (int t = 0; t < NT; ++t) {
        __m512 acc_t =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(wd, _mm512_set1_ps(a[t].d[g])), acc[t]);
        if constexpr (!kQ3) {
          const __m512 dmin = Scales2Panels(b0 + f.dmin_off, b1 + f.dmin_off);
          acc_t = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(dmin, _mm512_set1_ps(a[t].d[g])), acc_t);
        }
        acc[t] = acc_t;
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    _mm256_storeu_ps(y0 + t * ldy, _mm512_castps512_ps256(acc[t]));
    _mm256_storeu_ps(y1 + t * ldy, _mm512_extractf32x8_ps(acc[t], 1));
  }
}

#endif  // TLR_PANEL512

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
