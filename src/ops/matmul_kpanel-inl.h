// Panel kernels for the K-quants (ops layer), compiled once per Highway target (included by
// matmul_kquant.cc after hwy/foreach_target.h): Q4_K, Q5_K, Q6_K and IQ4_XS weights (and
// Q2_K, Q3_K: KPanelDot23 at the end) in the panel
// layout of panel_layout.h (KPanelFormat), times up to kPanelTokens tokens of Q8A activations.
//
// As for the 32-element types (matmul_panel-inl.h), one call computes 8 rows x NT tokens:
// per 32-column group the 8 rows' values are unpacked once and every token dots them with
// its activation bytes broadcast 4 at a time, each 32-bit lane holding one row. Per
// super-block the 8 rows' sub-block scales are decoded at once: Q4_K/Q5_K's 6-bit scales and
// minimums by the GGUF bit formula run on 32 transposed bytes (4 bytes of each of 8 rows) per
// vector op, Q6_K's int8 scales are already 8 contiguous bytes per sub-block. Then per group
// and token:
//   Q4_K, Q5_K: acc += isum * (d * sc_g * d_a), then acc -= dmin * m_g * s_a (one lane per
//               row); y = acc.
//   Q6_K:       the values go in unsigned (0..63), two integer chains per group (its two
//               16-value sub-blocks), each started at -32 x the sum of its 16 activations
//               (MatMulInput::s16) so it ends as the exact signed sum; the chains times the
//               rows' int8 scales (int32 multiplies) add up to one integer per row and
//               acc += isum * (d * d_a). Every integer here is exact (|isum| < 2^24).
//   IQ4_XS:     codes looked up as for IQ4_NL (DotIq4nlGroup), acc += isum * (d * (ls - 32) * d_a).
// The float operations per lane are the same sequence whatever NT and the other rows, so
// a (row, token) result is bit-identical in decode and in any batch.
//
// x86 (AVX2 and up) unpacks in registers and uses maddubs or, with AVX-512 VNNI, vpdpbusd;
// other targets sum the bytes in plain integer loops and do the float part with Highway.

#if defined(TLR_OPS_MATMUL_KPANEL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TLR_OPS_MATMUL_KPANEL_INL_H_
#undef TLR_OPS_MATMUL_KPANEL_INL_H_
#else
#define TLR_OPS_MATMUL_KPANEL_INL_H_
#endif

#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/matmul_panel-inl.h"
#include "ops/matmul_quant-inl.h"
#include "ops/panel_layout.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Q4_K/Q5_K: the 8 rows' sub-block scales and minimums from the transposed scale bytes
// (byte 8k + r = scales[k] of row r): sc[8j + r], mn[8j + r] for sub-block j (0..7).
HWY_INLINE void DecodeScalesK4(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
#ifdef TLR_X86_256
  // Bytes 0-3, 4-7 and 8-11 of every row; ScaleMinK4 on 32 bytes at a time:
  //   j < 4:  sc = q[j] & 63,                       m = q[j + 4] & 63
  //   j >= 4: sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4,  m = (q[j + 4] >> 4) | (q[j] >> 6) << 4
  const __m256i t0 = Load32(s), t1 = Load32(s + 32), t2 = Load32(s + 64);
  const __m256i m6 = _mm256_set1_epi8(63), m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  auto store = [](uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); };
  store(sc, _mm256_and_si256(t0, m6));
  store(sc + 32, _mm256_or_si256(_mm256_and_si256(t2, m4), _mm256_and_si256(_mm256_srli_epi16(t0, 2), m30)));
  store(mn, _mm256_and_si256(t1, m6));
  store(mn + 32, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t2, 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(t1, 2), m30)));
#else
  for (int r = 0; r < 8; ++r) {
    uint8_t q[12];
    for (int k = 0; k < 12; ++k) q[k] = s[8 * k + r];
    for (int j = 0; j < 8; ++j) ScaleMinK4(j, q, &sc[8 * j + r], &mn[8 * j + r]);
  }
#endif
}

// IQ4_XS: the 8 rows' sub-block scales ls - 32 from the transposed scale bytes (see
// panel_layout.h): sc[32 * (j % 2) + 8 * (j / 2) + r] for sub-block j (0..7) of row r.
HWY_INLINE void DecodeScalesXs(const uint8_t* s, int8_t* sc) {
#ifdef TLR_X86_256
  // Even sub-blocks 2k: low nibbles of scales_l byte k, high bits 0-1 of H(k); odd ones:
  // high nibbles, bits 2-3 of H(k). H(k) is nibble k % 2 of scales_h byte k / 2.
  const __m256i t = Load32(s);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
  const __m128i n4 = _mm_set1_epi8(0x0F);
  const __m128i h_lo = _mm_and_si128(h, n4), h_hi = _mm_and_si128(_mm_srli_epi16(h, 4), n4);
  const __m256i hk = _mm256_set_m128i(_mm_unpackhi_epi64(h_lo, h_hi), _mm_unpacklo_epi64(h_lo, h_hi));
  const __m256i m4 = _mm256_set1_epi8(0x0F), k32 = _mm256_set1_epi8(32);
  const __m256i even = _mm256_or_si256(_mm256_and_si256(t, m4), _mm256_slli_epi16(_mm256_and_si256(hk, _mm256_set1_epi8(3)), 4));
  const __m256i odd = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t, 4), m4),
                                      _mm256_slli_epi16(_mm256_and_si256(hk, _mm256_set1_epi8(0x0C)), 2));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sc), _mm256_sub_epi8(even, k32));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sc + 32), _mm256_sub_epi8(odd, k32));
#else
  for (int r = 0; r < 8; ++r) {
    for (int j = 0; j < 8; ++j) {
      const int lo = (s[8 * (j / 2) + r] >> (4 * (j % 2))) & 0xF;
      const int hi = (s[32 + 8 * (j / 4) + r] >> (2 * (j % 4))) & 3;
      sc[32 * (j % 2) + 8 * (j / 2) + r] = static_cast<int8_t>((lo | (hi << 4)) - 32);
    }
  }
#endif
}

// Lanes k..k+L of 8 bytes as float (unsigned: Q4_K/Q5_K scales; signed: Q6_K scales).
template <typename T>
HWY_INLINE hn::Vec<DF> BytesToFloat(const T* p) {
  const DF df;
  const DI di;
  const hn::Rebind<T, DI> d8;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p)));
}

#ifdef TLR_X86_256
// Q6_K's two high bits of unpacked vector u (0..7) from its high-bit vector: bits 2 (u % 4)
// and up of each byte, moved to bits 4-5.
template <int kU>
HWY_INLINE __m256i Q6High(__m256i h) {
  const __m256i m30 = _mm256_set1_epi8(0x30);
  constexpr int kShift = 4 - 2 * (kU % 4);
  if constexpr (kShift > 0) return _mm256_and_si256(_mm256_slli_epi16(h, kShift), m30);
  if constexpr (kShift == 0) return _mm256_and_si256(h, m30);
  return _mm256_and_si256(_mm256_srli_epi16(h, -kShift), m30);
}

// One 16-value half c (0, 1) of a Q6_K group: the integer sums of (q - 32) * a per row,
// started at -32 x the activations' sum.
template <int NT, int kC>
HWY_INLINE void Q6HalfSums(const uint8_t* grp, const KPanelFormat& f, const ActView* a, int64_t g,
                           __m256i* isum) {
  const __m256i h = Load32(grp + f.high_off + 32 * kC);
  for (int t = 0; t < NT; ++t) isum[t] = _mm256_set1_epi32(-32 * a[t].s16[2 * g + kC]);
  // Nibble vectors 2c and 2c + 1 hold unpacked vectors 4c..4c + 3.
  const uint8_t* vals = grp + f.values_off + 64 * kC;
  DotNibbleVector<NT>(Load32(vals), Q6High<0>(h), Q6High<1>(h), a, 32 * g + 16 * kC, isum);
  DotNibbleVector<NT>(Load32(vals + 32), Q6High<2>(h), Q6High<3>(h), a, 32 * g + 16 * kC + 8, isum);
}
#endif

// Zeroes the float accumulators of a K-panel call: [token * 8 + chunk of Lanes(DF)].
template <int NT>
HWY_INLINE void ZeroPanelAcc(VecArray<DF, NT * 8>& acc) {
  const DF df;
  for (int t = 0; t < NT; ++t) {
    for (size_t k = 0; k < 8; k += hn::Lanes(df)) acc.Set(t * 8 + k / hn::Lanes(df), hn::Zero(df));
  }
}
// f16 values k.. of the 8 rows' scales at p, as float lanes.
HWY_INLINE hn::Vec<DF> HalfLanes(const uint8_t* p, size_t k) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p) + k));
}

// Prefetch for group j (at grp) of the super-block at blk: every line (an eighth of the
// block, kPanelPrefetchBytes on) or the group's first 128 bytes, `ahead` bytes on
// (WeightPrefetch in matmul.h).
HWY_INLINE void PrefetchKGroup(bool every_line, const uint8_t* blk, size_t block_bytes, int64_t j, const uint8_t* grp,
                               size_t ahead) {
  if (every_line) return PrefetchGroup(blk + j * (block_bytes / 8), block_bytes / 8, kPanelPrefetchBytes, true);
  hwy::Prefetch(grp + ahead);
  hwy::Prefetch(grp + ahead + 64);
}

// 8 rows (one panel) x NT tokens: y[t * ldy + r] for r < 8, t < NT. ng: groups of 32 columns.
template <GgmlType kType, int NT>
HWY_NOINLINE void KPanelDot(const uint8_t* panel, int64_t ng, const ActView* a, float* y, int64_t ldy) {
  constexpr KPanelFormat f = KPanelFormatOf(kType);
  const DF df;
  const size_t L = hn::Lanes(df);  // 8 on x86; 8 / L chunks of lanes elsewhere
  using VF = hn::Vec<DF>;
  VecArray<DF, NT * 8> acc;  // [token * 8 + chunk of L lanes]
  ZeroPanelAcc<NT>(acc);
  const auto half = [&](const uint8_t* p, size_t k) { return HalfLanes(p, k); };
  const bool every_line = PrefetchEveryLine();
  for (int64_t sb = 0; sb < ng / 8; ++sb) {
    const uint8_t* blk = panel + sb * f.block_bytes;
    HWY_ALIGN uint8_t sc[64], mn[64];
    HWY_ALIGN int8_t xs[64];  // IQ4_XS
    if constexpr (f.has_min) DecodeScalesK4(blk + f.scales_off, sc, mn);
    if constexpr (f.nonlinear) DecodeScalesXs(blk + f.scales_off, xs);
    const auto* sc6 = reinterpret_cast<const int8_t*>(blk + f.scales_off);  // Q6_K: byte 8k + r
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t g = 8 * sb + j;  // group index in the row
      const uint8_t* grp = blk + f.groups_off + j * f.group_bytes;
      PrefetchKGroup(every_line, blk, f.block_bytes, j, grp, 4 * f.group_bytes);
#ifdef TLR_X86_256
      __m256i isum[NT];
      if constexpr (f.six_bit) {
        __m256i part[NT];
        Q6HalfSums<NT, 0>(grp, f, a, g, part);
        const __m256i s0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc6 + 16 * j)));
        for (int t = 0; t < NT; ++t) part[t] = _mm256_mullo_epi32(part[t], s0);
        Q6HalfSums<NT, 1>(grp, f, a, g, isum);
        const __m256i s1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc6 + 16 * j + 8)));
        for (int t = 0; t < NT; ++t) isum[t] = _mm256_add_epi32(part[t], _mm256_mullo_epi32(isum[t], s1));
      } else if constexpr (f.nonlinear) {
        for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
        DotIq4nlGroup<NT>(grp + f.values_off, a, g, isum);
      } else {
        for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
        DotNibbleGroup<NT, f.has_mask>(grp + f.values_off, grp + f.mask_off, a, g, isum);
      }
      constexpr size_t kChunks = 1;
      const auto isum_at = [&](int t, size_t) { return ToVI(isum[t]); };
#else
      // Portable: integer sums per row in plain loops, then the float part per chunk of lanes.
      HWY_ALIGN int32_t isum[NT][8];
      const uint8_t* vals = grp + f.values_off;
      for (int t = 0; t < NT; ++t) {
        const int8_t* q = a[t].qs + 32 * g;
        for (int r = 0; r < 8; ++r) {
          int32_t s[2] = {0, 0};  // Q6_K: the two 16-value halves
          for (int v = 0; v < 4; ++v) {
            uint32_t m_lo = 0, m_hi = 0;
            if constexpr (f.has_mask) {
              std::memcpy(&m_lo, grp + f.mask_off + 8 * v, 4);
              std::memcpy(&m_hi, grp + f.mask_off + 8 * v + 4, 4);
            }
            for (int i = 0; i < 4; ++i) {
              const int b = 4 * r + i;
              int lo = (vals[32 * v + b] & 0xF) | (((m_lo >> b) & 1) << 4);
              int hi = (vals[32 * v + b] >> 4) | (((m_hi >> b) & 1) << 4);
              if constexpr (f.nonlinear) {
                lo = kIq4nlValues[lo];
                hi = kIq4nlValues[hi];
              }
              if constexpr (f.six_bit) {  // unpacked vectors 2v, 2v + 1
                const uint8_t h = grp[f.high_off + 32 * (v / 2) + b];
                lo = lo - 32 + (((h >> (4 * (v % 2))) & 3) << 4);
                hi = hi - 32 + (((h >> (4 * (v % 2) + 2)) & 3) << 4);
              }
              s[v / 2] += lo * q[8 * v + i] + hi * q[8 * v + 4 + i];
            }
          }
          isum[t][r] = f.six_bit ? s[0] * sc6[16 * j + r] + s[1] * sc6[16 * j + 8 + r] : s[0] + s[1];
        }
      }
      const size_t kChunks = 8 / L;
      const DI di;
      const auto isum_at = [&](int t, size_t c) { return hn::Load(di, isum[t] + c * L); };
#endif
      for (size_t c = 0; c < kChunks; ++c) {
        const VF wd = half(blk, c * L);
        if constexpr (f.has_min) {
          const VF dsc = hn::Mul(wd, BytesToFloat(sc + 8 * j + c * L));
          const VF dmn = hn::Mul(half(blk + f.dmin_off, c * L), BytesToFloat(mn + 8 * j + c * L));
          for (int t = 0; t < NT; ++t) {
            VF acc_tc = hn::MulAdd(hn::ConvertTo(df, isum_at(t, c)), hn::Mul(dsc, hn::Set(df, a[t].d[g])), acc.Get(t * 8 + c));
            acc.Set(t * 8 + c, hn::NegMulAdd(dmn, hn::Set(df, a[t].s[g]), acc_tc));
          }
        } else if constexpr (f.nonlinear) {
          // d * (ls - 32) per row; with VNNI the codes went in +128 (DotIq4nlGroup), taken
          // back per token as 128 x the activation block's sum.
          const VF dsc = hn::Mul(wd, BytesToFloat(xs + 32 * (j % 2) + 8 * (j / 2) + c * L));
          constexpr float kOff = PanelOffsetScale<GgmlType::kIQ4_NL>();
          for (int t = 0; t < NT; ++t) {
            const VF isf = hn::ConvertTo(df, isum_at(t, c));
            if constexpr (kOff != 0.0f) {
              const VF v = hn::MulAdd(isf, hn::Set(df, a[t].d[g]), hn::Set(df, kOff * a[t].s[g]));
              acc.Set(t * 8 + c, hn::MulAdd(dsc, v, acc.Get(t * 8 + c)));
            } else {
              acc.Set(t * 8 + c, hn::MulAdd(isf, hn::Mul(dsc, hn::Set(df, a[t].d[g])), acc.Get(t * 8 + c)));
            }
          }
        } else {
          for (int t = 0; t < NT; ++t) {
            acc.Set(t * 8 + c, hn::MulAdd(hn::ConvertTo(df, isum_at(t, c)), hn::Mul(wd, hn::Set(df, a[t].d[g])), acc.Get(t * 8 + c)));
          }
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (size_t k = 0; k < 8; k += L) hn::StoreU(acc.Get(t * 8 + k / L), df, y + t * ldy + k);
  }
}


// ---- Q2_K and Q3_K (two-bit vectors; see panel_layout.h) ----
// Per group, two integer chains per row (its two 16-value sub-blocks) over the unsigned
// values q (Q2_K 0..3, Q3_K 0..7), each times its sub-block scale (int32 multiplies):
//   Q2_K: isum = sum_c sc_c * (q . a)_c, msum = sum_c m_c * s16_c (the 16 activations' sum);
//         acc += isum * (d * d_a), then acc -= msum * (dmin * d_a).
//   Q3_K: each chain starts at -4 x its s16, so it ends as the signed sum of (q - 4) * a;
//         isum = sum_c (sc_c - 32) * chain_c; acc += isum * (d * d_a).
// Every integer is exact (|isum| < 2^22).
#ifdef TLR_X86_256
// Q3_K: the 8 rows' sixteen scales minus 32, sc[8k + r], from the 12 transposed scale bytes
// (byte 8s + r = scales[s] of row r): Q3KScale on 32 bytes at a time.
HWY_INLINE void DecodeScalesQ3(const uint8_t* s, int8_t* sc) {
  const __m256i t0 = Load32(s), t1 = Load32(s + 32), t2 = Load32(s + 64);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
  auto store = [](int8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); };
  const __m256i hi0 = _mm256_slli_epi16(_mm256_and_si256(t2, _mm256_set1_epi8(0x03)), 4);
  const __m256i hi1 = _mm256_slli_epi16(_mm256_and_si256(t2, _mm256_set1_epi8(0x0C)), 2);
  const __m256i hi2 = _mm256_and_si256(t2, m30);
  const __m256i hi3 = _mm256_and_si256(_mm256_srli_epi16(t2, 2), m30);
  store(sc, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(t0, m4), hi0), k32));
  store(sc + 32, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(t1, m4), hi1), k32));
  store(sc + 64, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t0, 4), m4), hi2), k32));
  store(sc + 96, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t1, 4), m4), hi3), k32));
}

// Unpacked vector kU (values 4kU..4kU+3 of each row) of a group: two bits at 2 (kU % 4) of
// two-bit vector kU / 4, Q3_K's third bit (bit kU of the high-bit vector) at bit 2.
template <int NT, bool kQ3, int kU>
HWY_INLINE void Q23Vector(__m256i lows, __m256i high, const ActView* a, int64_t g, __m256i* isum) {
  constexpr int kS = 2 * (kU % 4);
  __m256i q = _mm256_and_si256(kS ? _mm256_srli_epi16(lows, kS) : lows, _mm256_set1_epi8(3));
  if constexpr (kQ3) {
    __m256i h;
    if constexpr (kU < 2) h = _mm256_slli_epi16(high, 2 - kU);
    else if constexpr (kU == 2) h = high;
    else h = _mm256_srli_epi16(high, kU - 2);
    q = _mm256_or_si256(q, _mm256_and_si256(h, _mm256_set1_epi8(4)));
  }
  for (int t = 0; t < NT; ++t) isum[t] = DpU8(isum[t], q, Broadcast4(a[t].qs + 32 * g + 4 * kU));
}

// Sub-block kC (0, 1) of group g: the chain of (q . a) per row (Q3_K: of (q - 4) . a).
template <int NT, bool kQ3, int kC>
HWY_INLINE void Q23HalfSums(const uint8_t* grp, const KPanelFormat& f, const ActView* a, int64_t g, __m256i* isum) {
  const __m256i lows = Load32(grp + f.values_off + 32 * kC);
  const __m256i high = kQ3 ? Load32(grp + f.high_off) : _mm256_setzero_si256();
  for (int t = 0; t < NT; ++t) {
    isum[t] = kQ3 ? _mm256_set1_epi32(-4 * a[t].s16[2 * g + kC]) : _mm256_setzero_si256();
  }
  Q23Vector<NT, kQ3, 4 * kC>(lows, high, a, g, isum);
  Q23Vector<NT, kQ3, 4 * kC + 1>(lows, high, a, g, isum);
  Q23Vector<NT, kQ3, 4 * kC + 2>(lows, high, a, g, isum);
  Q23Vector<NT, kQ3, 4 * kC + 3>(lows, high, a, g, isum);
}

// The 8 rows' bytes of sub-block k as int32 lanes (Q3_K: signed scales; Q2_K: raw bytes).
HWY_INLINE __m256i Bytes8Signed(const int8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
HWY_INLINE __m256i Bytes8Unsigned(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

#ifndef TLR_HAVE_VNNI512
// A Q2_K group without VNNI (AVX2, AVX-512 without VNNI): per sub-block the four maddubs
// products (values 0..3 times activations, at most 2 x 3 x 127 per int16 lane) are summed in
// int16 (at most 3048), then one madd with the rows' scales as int16 pairs gives the scaled
// int32 sum; the minimums' sum is one madd of the two sub-blocks' minimums against the pair
// of 16-value activation sums. The same exact integers as the VNNI path's multiplies, in 9
// instructions per sub-block and token instead of 13 (maddubs, madd with ones, add, mullo).
template <int NT>
HWY_INLINE void Q2GroupSums(const uint8_t* grp, const KPanelFormat& f, const uint8_t* scales, const ActView* a,
                            int64_t g, __m256i* isum, __m256i* msum) {
  const __m256i b0 = Bytes8Unsigned(scales), b1 = Bytes8Unsigned(scales + 8);
  const __m256i m4 = _mm256_set1_epi32(0x0F), m3 = _mm256_set1_epi8(3);
  const __m256i s0 = _mm256_and_si256(b0, m4), s1 = _mm256_and_si256(b1, m4);
  const __m256i sc[2] = {_mm256_or_si256(s0, _mm256_slli_epi32(s0, 16)), _mm256_or_si256(s1, _mm256_slli_epi32(s1, 16))};
  const __m256i mins = _mm256_or_si256(_mm256_srli_epi32(b0, 4), _mm256_slli_epi32(_mm256_srli_epi32(b1, 4), 16));
  for (int c = 0; c < 2; ++c) {
    const __m256i lows = Load32(grp + f.values_off + 32 * c);
    const __m256i q0 = _mm256_and_si256(lows, m3), q1 = _mm256_and_si256(_mm256_srli_epi16(lows, 2), m3);
    const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(lows, 4), m3), q3 = _mm256_and_si256(_mm256_srli_epi16(lows, 6), m3);
    for (int t = 0; t < NT; ++t) {
      const int8_t* qa = a[t].qs + 32 * g + 16 * c;
      __m256i p = _mm256_maddubs_epi16(q0, Broadcast4(qa));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q1, Broadcast4(qa + 4)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q2, Broadcast4(qa + 8)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q3, Broadcast4(qa + 12)));
      const __m256i scaled = _mm256_madd_epi16(p, sc[c]);
      isum[t] = c == 0 ? scaled : _mm256_add_epi32(isum[t], scaled);
    }
  }
  for (int t = 0; t < NT; ++t) {
    const uint32_t pair = static_cast<uint16_t>(a[t].s16[2 * g]) |
                          static_cast<uint32_t>(static_cast<uint16_t>(a[t].s16[2 * g + 1])) << 16;
    msum[t] = _mm256_madd_epi16(mins, _mm256_set1_epi32(static_cast<int32_t>(pair)));
  }
}
#endif
#endif

// 8 rows (one panel) x NT tokens of Q2_K / Q3_K: y[t * ldy + r] for r < 8, t < NT.
template <GgmlType kType, int NT>
HWY_NOINLINE void KPanelDot23(const uint8_t* panel, int64_t ng, const ActView* a, float* y, int64_t ldy) {
  constexpr KPanelFormat f = KPanelFormatOf(kType);
  constexpr bool kQ3 = kType == GgmlType::kQ3_K;
  static_assert(f.two_bit, "Q2_K and Q3_K only");
  const DF df;
  const size_t L = hn::Lanes(df);
  using VF = hn::Vec<DF>;
  VecArray<DF, NT * 8> acc;  // [token * 8 + chunk of L lanes]
  ZeroPanelAcc<NT>(acc);
  const auto half = [&](const uint8_t* p, size_t k) { return HalfLanes(p, k); };
  const bool every_line = PrefetchEveryLine();
  for (int64_t sb = 0; sb < ng / 8; ++sb) {
    const uint8_t* blk = panel + sb * f.block_bytes;
    const uint8_t* raw = blk + f.scales_off;  // byte 8k + r: scale byte k of row r
    HWY_ALIGN int8_t sc3[128];                // Q3_K: sc[8k + r] = scale k of row r, minus 32
#ifdef TLR_X86_256
    if constexpr (kQ3) DecodeScalesQ3(raw, sc3);
#else
    if constexpr (kQ3) {
      for (int r = 0; r < 8; ++r) {
        uint8_t row[12];
        for (int k = 0; k < 12; ++k) row[k] = raw[8 * k + r];
        for (int k = 0; k < 16; ++k) sc3[8 * k + r] = static_cast<int8_t>(Q3KScale(row, k) - 32);
      }
    }
#endif
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t g = 8 * sb + j;
      const uint8_t* grp = blk + f.groups_off + j * f.group_bytes;
      PrefetchKGroup(every_line, blk, f.block_bytes, j, grp, 8 * f.group_bytes);
#ifdef TLR_X86_256
      __m256i isum[NT], msum[NT];
      if constexpr (kQ3) {
        __m256i part[NT];
        Q23HalfSums<NT, kQ3, 0>(grp, f, a, g, part);
        Q23HalfSums<NT, kQ3, 1>(grp, f, a, g, isum);
        const __m256i s0 = Bytes8Signed(sc3 + 16 * j), s1 = Bytes8Signed(sc3 + 16 * j + 8);
        for (int t = 0; t < NT; ++t) {
          isum[t] = _mm256_add_epi32(_mm256_mullo_epi32(part[t], s0), _mm256_mullo_epi32(isum[t], s1));
        }
      } else {
#ifndef TLR_HAVE_VNNI512
        Q2GroupSums<NT>(grp, f, raw + 16 * j, a, g, isum, msum);
#else
        __m256i part[NT];
        Q23HalfSums<NT, kQ3, 0>(grp, f, a, g, part);
        Q23HalfSums<NT, kQ3, 1>(grp, f, a, g, isum);
        const __m256i b0 = Bytes8Unsigned(raw + 16 * j), b1 = Bytes8Unsigned(raw + 16 * j + 8);
        const __m256i m4 = _mm256_set1_epi32(0x0F);
        const __m256i s0 = _mm256_and_si256(b0, m4), s1 = _mm256_and_si256(b1, m4);
        const __m256i m0 = _mm256_srli_epi32(b0, 4), m1 = _mm256_srli_epi32(b1, 4);
        for (int t = 0; t < NT; ++t) {
          isum[t] = _mm256_add_epi32(_mm256_mullo_epi32(part[t], s0), _mm256_mullo_epi32(isum[t], s1));
          msum[t] = _mm256_add_epi32(_mm256_mullo_epi32(m0, _mm256_set1_epi32(a[t].s16[2 * g])),
                                     _mm256_mullo_epi32(m1, _mm256_set1_epi32(a[t].s16[2 * g + 1])));
        }
#endif
      }
      constexpr size_t kChunks = 1;
      const auto isum_at = [&](int t, size_t) { return ToVI(isum[t]); };
      const auto msum_at = [&](int t, size_t) { return ToVI(msum[t]); };
#else
      // Portable: integer sums per row in plain loops, then the float part per chunk of lanes.
      HWY_ALIGN int32_t isum[NT][8], msum[NT][8];
      const uint8_t* lows = grp + f.values_off;
      for (int t = 0; t < NT; ++t) {
        const int8_t* q = a[t].qs + 32 * g;
        for (int r = 0; r < 8; ++r) {
          int32_t s[2] = {0, 0};
          for (int i = 0; i < 32; ++i) {
            const int b = 4 * r + i % 4;
            int v = (lows[32 * (i / 16) + b] >> (2 * ((i % 16) / 4))) & 3;
            if constexpr (kQ3) v |= ((grp[f.high_off + b] >> (i / 4)) & 1) << 2;
            s[i / 16] += v * q[i];
          }
          isum[t][r] = 0;
          msum[t][r] = 0;
          for (int c = 0; c < 2; ++c) {
            const int k = 2 * static_cast<int>(j) + c;
            const int32_t s16 = a[t].s16[2 * g + c];
            if constexpr (kQ3) {
              isum[t][r] += (s[c] - 4 * s16) * sc3[8 * k + r];
            } else {
              isum[t][r] += s[c] * (raw[8 * k + r] & 0xF);
              msum[t][r] += (raw[8 * k + r] >> 4) * s16;
            }
          }
        }
      }
      const size_t kChunks = 8 / L;
      const DI di;
      const auto isum_at = [&](int t, size_t c) { return hn::Load(di, isum[t] + c * L); };
      const auto msum_at = [&](int t, size_t c) { return hn::Load(di, msum[t] + c * L); };
#endif
      for (size_t c = 0; c < kChunks; ++c) {
        const VF wd = half(blk, c * L);
        for (int t = 0; t < NT; ++t) {
          VF acc_tc = hn::MulAdd(hn::ConvertTo(df, isum_at(t, c)), hn::Mul(wd, hn::Set(df, a[t].d[g])), acc.Get(t * 8 + c));
          if constexpr (!kQ3) {
            const VF dmin = half(blk + f.dmin_off, c * L);
            acc_tc = hn::NegMulAdd(hn::ConvertTo(df, msum_at(t, c)), hn::Mul(dmin, hn::Set(df, a[t].d[g])), acc_tc);
          }
          acc.Set(t * 8 + c, acc_tc);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (size_t k = 0; k < 8; k += L) hn::StoreU(acc.Get(t * 8 + k / L), df, y + t * ldy + k);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
