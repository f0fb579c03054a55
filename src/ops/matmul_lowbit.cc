// SIMD kernels for the low-bit weight types Q2_K, Q3_K, IQ4_NL and IQ4_XS (ops layer), compiled
// once per Highway target and dispatched at run time. See matmul_lowbit.h for the contract.
//
// Every kernel dots one weight row with up to four tokens at once (prefill shares each
// unpacked group), keeps two float accumulation chains per token (even and odd groups, so
// the float adds of consecutive groups overlap), and does the same operations in the same
// order for each token whatever the number of tokens: a (row, token) result never depends
// on the batch.
//
// x86 (AVX2, AVX-512, AVX-512 VNNI) unpacks 32 weights per register:
//   - Q2_K / Q3_K: 2- or 3-bit unsigned codes u (shift + mask, the Q3_K high bit from hmask),
//     maddubs(u, a) then madd with the two 16-element sub-block scales: one int32 vector per
//     32-element group, times d_a, and d once per super-block. The affine part (Q2_K's
//     -dmin * m, Q3_K's -4 * sc)
//     needs the sums of every 16 activations: they are computed once per token and column
//     window into a stack buffer (ActSums16) and enter once per super-block as one madd.
//   - IQ4_NL / IQ4_XS: a byte shuffle looks the 4-bit codes up in the 16-value table; the
//     signed values use the sign trick (|w| times a with w's sign) with vpdpbusd or maddubs
//     (IQ4_XS: maddubs, then madd with its 6-bit sub-block scale).
// Other targets unpack each group to int8 and int16 half-scales and use Highway's widening
// multiply-accumulate (or plain scalar code).
#include "ops/matmul_lowbit.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_lowbit.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/vec_array-inl.h"

HWY_BEFORE_NAMESPACE();
// Compiled once per target: forget the previous pass's feature macros.
#undef TLR_LB_X86
#undef TLR_LB_VNNI
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define TLR_LB_X86 1
#endif
#if HWY_TARGET == HWY_AVX3_DL && (HWY_COMPILER_GCC_ACTUAL || HWY_COMPILER_CLANG)
// AVX-512 VNNI; vpdpbusd is written with an explicit EVEX encoding (see matmul_quant-inl.h:
// Highway 1.0.3 also enables the VEX avxvnni feature for this target, which e.g. Zen 4 lacks).
#define TLR_LB_VNNI 1
#endif

namespace tlr {
namespace HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 8>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

// One token's view of a column window: Q8A values and scales, and (Q2_K, Q3_K on x86) the
// sums of every 16 consecutive values.
struct Act {
  const int8_t* qs;      // [n]
  const float* d;        // [n / 32]
  const int16_t* sums;   // [n / 16]
};

// Sums of each 16 consecutive activations (n a multiple of 256 for the types using them).
HWY_INLINE void ActSums16(const int8_t* q, int64_t n, int16_t* out) {
#ifdef TLR_LB_X86
  // Per 256 values: pair sums (maddubs), quad sums (madd), then horizontal adds leave the
  // 16-sums of groups 0-3 and 4-7 in a lane order that two permutes and a pack restore.
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n; i += 256, q += 256, out += 16) {
    __m256i quads[8];
    for (int g = 0; g < 8; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * g));
      quads[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16);
    }
    __m256i half[2];
    for (int k = 0; k < 2; ++k) {  // [g0h0 g1h0 g2h0 g3h0 | g0h1 g1h1 g2h1 g3h1] for groups 4k..4k+3
      const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(quads[4 * k], quads[4 * k + 1]),
                                          _mm256_hadd_epi32(quads[4 * k + 2], quads[4 * k + 3]));
      // -> [g0h0 g0h1 g1h0 g1h1 | g2h0 g2h1 g3h0 g3h1]: natural order of the 16-sums.
      half[k] = _mm256_shuffle_epi32(_mm256_permute4x64_epi64(h, 0xD8), 0xD8);
    }
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(half[0], half[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), packed);
  }
#else
  for (int64_t h = 0; h < n / 16; ++h) {
    int s = 0;
    for (int k = 0; k < 16; ++k) s += q[16 * h + k];
    out[h] = static_cast<int16_t>(s);
  }
#endif
}

// out[t] = sum of the lanes of acc0[t] (+ acc1[t] when given), minus off[t] when given.
template <int NT>
HWY_INLINE void Finish(const VF* acc0, const VF* acc1, const float* off, float* out) {
  const DF df;
  for (int t = 0; t < NT; ++t) {
    out[t] = hn::GetLane(hn::SumOfLanes(df, acc1 ? hn::Add(acc0[t], acc1[t]) : acc0[t]));
    if (off) out[t] -= off[t];
  }
}

#ifdef TLR_LB_X86
HWY_INLINE __m256i L32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE VF Cvt(__m256i v) { return hn::ConvertTo(DF(), VI{v}); }
HWY_INLINE float Half(uint16_t h) { return _cvtsh_ss(h); }

// 32 unsigned bytes (< 128) times 32 signed bytes -> 8 int32 sums of 4 products.
HWY_INLINE __m256i DotU8(__m256i w, __m256i a) {
#ifdef TLR_LB_VNNI
  __m256i acc = _mm256_setzero_si256();
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a));
  return acc;
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
#endif
}

// pshufb indices giving the int16 lanes [s[2c] x 8 | s[2c + 1] x 8] of group c's two halves:
// from the 16 unsigned scale bytes in both 128-bit lanes (Q2_K: zero extension), and from
// the 8 int16 scales of c's 128-element half in both lanes (Q3_K's signed scales, extended
// once per super-block).
struct ScaleShuffles {
  alignas(32) uint8_t zext[8][32];
  alignas(32) uint8_t word[8][32];
};
constexpr ScaleShuffles MakeScaleShuffles() {
  ScaleShuffles s{};
  for (int c = 0; c < 8; ++c) {
    for (int i = 0; i < 16; ++i) {
      s.zext[c][i] = (i & 1) ? 0x80 : static_cast<uint8_t>(2 * c);
      s.zext[c][16 + i] = (i & 1) ? 0x80 : static_cast<uint8_t>(2 * c + 1);
      s.word[c][i] = static_cast<uint8_t>(2 * ((2 * c) % 8) + (i & 1));
      s.word[c][16 + i] = static_cast<uint8_t>(2 * ((2 * c + 1) % 8) + (i & 1));
    }
  }
  return s;
}
constexpr ScaleShuffles kScaleShuffles = MakeScaleShuffles();

// The high bit of Q3_K chunk C (bit C of each hmask byte) moved to bit 2.
template <int C>
HWY_INLINE __m256i Q3HighBit(__m256i hm) {
  const __m256i b = _mm256_and_si256(hm, _mm256_set1_epi8(static_cast<char>(1 << C)));
  if constexpr (C < 2) return _mm256_slli_epi16(b, 2 - C);
  else if constexpr (C == 2) return b;
  else return _mm256_srli_epi16(b, C - 2);
}

// One 32-element group C (0..7) of a Q2_K / Q3_K super-block for NT tokens: the codes u
// (2 bits at bit 2 * (C % 4) of `q`, the 32 qs bytes of its 128-element half; Q3_K's third
// bit from hmask), maddubs with the activations, madd with the int16 scales of its two
// halves, then s[t] += isum * d_a(group).
// `scales`: Q2_K: the 16 scale bytes in both 128-bit lanes; Q3_K: the 8 int16 scales of C's
// 128-element half in both lanes.
template <bool kQ3, int C, int NT>
HWY_INLINE void GroupQ23K(__m256i q, __m256i hm, __m256i scales, const Act* a, int64_t sb, VF* s) {
  const DF df;
  __m256i u = _mm256_and_si256(C % 4 ? _mm256_srli_epi16(q, 2 * (C % 4)) : q, _mm256_set1_epi8(3));
  if constexpr (kQ3) u = _mm256_or_si256(u, Q3HighBit<C>(hm));
  const __m256i sc16 = _mm256_shuffle_epi8(scales, L32(kQ3 ? kScaleShuffles.word[C] : kScaleShuffles.zext[C]));
  for (int t = 0; t < NT; ++t) {
    const __m256i p = _mm256_maddubs_epi16(u, L32(a[t].qs + 256 * sb + 32 * C));
    s[t] = hn::MulAdd(Cvt(_mm256_madd_epi16(p, sc16)), hn::Set(df, a[t].d[8 * sb + C]), s[t]);
  }
}

// Q2_K and Q3_K: x = d * sc_h * u - dm * m_h per 16-element half h, with
//   Q2_K: u in 0..3, sc_h, m_h in 0..15, dm = dmin;
//   Q3_K: u in 0..7, sc_h in -32..31, m_h = 4 * sc_h, dm = d.
// Per super-block and token: two chains (even / odd groups) of isum * d_a, times d once; the
// affine part from the 16-sums in one madd.
template <bool kQ3, int NT>
HWY_INLINE void RowQ23K(const uint8_t* row, int64_t n_sb, const Act* a, float* out) {
  const DF df;
  VF acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = hn::Zero(df);
  using B = std::conditional_t<kQ3, BlockQ3_K, BlockQ2_K>;
  const auto* x = reinterpret_cast<const B*>(row);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < n_sb; ++sb) {
    const B& b = x[sb];
    hwy::Prefetch(reinterpret_cast<const uint8_t*>(&b) + 1024);
    __m128i sc8;        // the 16 sub-block scales, one byte each
    __m256i mins16;     // the 16 offsets m_h as int16
    VF vd, vdm;
    __m256i hm = _mm256_setzero_si256();
    if constexpr (kQ3) {
      // 6-bit scales: low nibbles of bytes 0-7 (sub-blocks 0-7) and their high nibbles
      // (8-15), high 2 bits from bytes 8-11 (bit 2 * (j / 4) of byte 8 + j % 4).
      uint64_t lo;
      uint32_t hi;
      std::memcpy(&lo, b.scales, 8);
      std::memcpy(&hi, b.scales + 8, 4);
      const __m128i l8 = _mm_cvtsi64_si128(static_cast<int64_t>(lo));
      const __m128i low = _mm_and_si128(_mm_unpacklo_epi64(l8, _mm_srli_epi16(l8, 4)), m4);
      const __m128i high = _mm_and_si128(
          _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(hi)), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
      sc8 = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
      mins16 = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc8), 2);
      vd = vdm = hn::Set(df, Half(b.d));
      hm = L32(b.hmask);
    } else {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
      sc8 = _mm_and_si128(raw, m4);
      mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
      vd = hn::Set(df, Half(b.d));
      vdm = hn::Set(df, Half(b.dmin));
    }
    VF s0[NT], s1[NT];
    for (int t = 0; t < NT; ++t) {
      const __m256i msum = _mm256_madd_epi16(mins16, L32(a[t].sums + 16 * sb));  // lane = group
      acc[t] = hn::NegMulAdd(hn::Mul(Cvt(msum), hn::LoadU(df, a[t].d + 8 * sb)), vdm, acc[t]);
      s0[t] = s1[t] = hn::Zero(df);
    }
    __m256i sc_a, sc_b;  // the scales for groups 0-3 and 4-7 (see GroupQ23K)
    if constexpr (kQ3) {
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
      sc_a = _mm256_permute4x64_epi64(sc16, 0x44);
      sc_b = _mm256_permute4x64_epi64(sc16, 0xEE);
    } else {
      sc_a = sc_b = _mm256_broadcastsi128_si256(sc8);
    }
    const __m256i q0 = L32(b.qs), q1 = L32(b.qs + 32);
    GroupQ23K<kQ3, 0, NT>(q0, hm, sc_a, a, sb, s0);
    GroupQ23K<kQ3, 1, NT>(q0, hm, sc_a, a, sb, s1);
    GroupQ23K<kQ3, 2, NT>(q0, hm, sc_a, a, sb, s0);
    GroupQ23K<kQ3, 3, NT>(q0, hm, sc_a, a, sb, s1);
    GroupQ23K<kQ3, 4, NT>(q1, hm, sc_b, a, sb, s0);
    GroupQ23K<kQ3, 5, NT>(q1, hm, sc_b, a, sb, s1);
    GroupQ23K<kQ3, 6, NT>(q1, hm, sc_b, a, sb, s0);
    GroupQ23K<kQ3, 7, NT>(q1, hm, sc_b, a, sb, s1);
    for (int t = 0; t < NT; ++t) acc[t] = hn::MulAdd(hn::Add(s0[t], s1[t]), vd, acc[t]);
  }
  Finish<NT>(acc, nullptr, nullptr, out);
}

HWY_INLINE __m256i Iq4Table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
}

// One IQ4_NL block g for NT tokens: codes looked up in the table, |w| times a with w's sign.
template <int NT>
HWY_INLINE void BlockIQ4NL(const BlockIQ4_NL& b, int64_t g, __m256i table, const Act* a, VF* acc) {
  const DF df;
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i codes =
      _mm256_and_si256(_mm256_setr_m128i(raw, _mm_srli_epi16(raw, 4)), _mm256_set1_epi8(0x0F));
  const __m256i w = _mm256_shuffle_epi8(table, codes);
  const __m256i aw = _mm256_sign_epi8(w, w);
  const float dw = Half(b.d);
  for (int t = 0; t < NT; ++t) {
    const __m256i isum = DotU8(aw, _mm256_sign_epi8(L32(a[t].qs + 32 * g), w));
    acc[t] = hn::MulAdd(Cvt(isum), hn::Set(df, dw * a[t].d[g]), acc[t]);
  }
}

// IQ4_NL: 32-element blocks, x = d * kIq4nlValues[code], codes laid out like Q4_0. Blocks go
// in pairs with one accumulator each.
template <int NT>
HWY_INLINE void RowIQ4NL(const uint8_t* row, int64_t n_groups, const Act* a, float* out) {
  const DF df;
  VF acc0[NT], acc1[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = hn::Zero(df);
  const auto* x = reinterpret_cast<const BlockIQ4_NL*>(row);
  const __m256i table = Iq4Table();
  int64_t g = 0;
  for (; g + 1 < n_groups; g += 2) {
    hwy::Prefetch(reinterpret_cast<const uint8_t*>(x + g) + 1024);
    BlockIQ4NL<NT>(x[g], g, table, a, acc0);
    BlockIQ4NL<NT>(x[g + 1], g + 1, table, a, acc1);
  }
  if (g < n_groups) BlockIQ4NL<NT>(x[g], g, table, a, acc0);
  Finish<NT>(acc0, acc1, nullptr, out);
}

// pshufb indices broadcasting int16 lane c of a 128-bit lane to all its 8 lanes.
struct WordBroadcasts {
  alignas(32) uint8_t idx[8][32];
};
constexpr WordBroadcasts MakeWordBroadcasts() {
  WordBroadcasts w{};
  for (int c = 0; c < 8; ++c) {
    for (int i = 0; i < 32; ++i) w.idx[c][i] = static_cast<uint8_t>(2 * c + (i & 1));
  }
  return w;
}
constexpr WordBroadcasts kWordBroadcasts = MakeWordBroadcasts();

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales, x = d * (ls - 32) * kIq4nlValues[code]. The
// sub-block scale multiplies inside the integer dot (maddubs, then madd with ls - 32), so
// per super-block and token two chains of isum * d_a are scaled by d once.
template <int NT>
HWY_INLINE void RowIQ4XS(const uint8_t* row, int64_t n_sb, const Act* a, float* out) {
  const DF df;
  VF acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = hn::Zero(df);
  const auto* x = reinterpret_cast<const BlockIQ4_XS*>(row);
  const __m256i table = Iq4Table(), m4 = _mm256_set1_epi8(0x0F);
  const __m256i lo_shift = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i hi_shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  for (int64_t sb = 0; sb < n_sb; ++sb) {
    const BlockIQ4_XS& b = x[sb];
    hwy::Prefetch(reinterpret_cast<const uint8_t*>(&b) + 1024);
    uint32_t sl;
    std::memcpy(&sl, b.scales_l, 4);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sl)), lo_shift),
                                        _mm256_set1_epi32(0xF));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b.scales_h), hi_shift),
                                        _mm256_set1_epi32(3));
    const __m256i ls32 = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    // int16 ls - 32 of the 8 sub-blocks in both 128-bit lanes.
    const __m128i ls16 = _mm256_castsi256_si128(
        _mm256_permute4x64_epi64(_mm256_packs_epi32(ls32, ls32), 0x08));
    const __m256i ls_bcast = _mm256_broadcastsi128_si256(ls16);
    VF s0[NT], s1[NT];
    for (int t = 0; t < NT; ++t) s0[t] = s1[t] = hn::Zero(df);
    for (int p = 0; p < 4; ++p) {
      // 32 bytes = codes of sub-blocks 2p (low 128 bits) and 2p + 1; regroup after lookup.
      const __m256i raw = L32(b.qs + 32 * p);
      const __m256i wl = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, m4));
      const __m256i wh = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
      const __m256i w0 = _mm256_permute2x128_si256(wl, wh, 0x20);
      const __m256i w1 = _mm256_permute2x128_si256(wl, wh, 0x31);
      const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
      const __m256i l0 = _mm256_shuffle_epi8(ls_bcast, L32(kWordBroadcasts.idx[2 * p]));
      const __m256i l1 = _mm256_shuffle_epi8(ls_bcast, L32(kWordBroadcasts.idx[2 * p + 1]));
      for (int t = 0; t < NT; ++t) {
        const int8_t* q = a[t].qs + 256 * sb + 64 * p;
        const float* da = a[t].d + 8 * sb + 2 * p;
        const __m256i p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(L32(q), w0));
        const __m256i p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(L32(q + 32), w1));
        s0[t] = hn::MulAdd(Cvt(_mm256_madd_epi16(p0, l0)), hn::Set(df, da[0]), s0[t]);
        s1[t] = hn::MulAdd(Cvt(_mm256_madd_epi16(p1, l1)), hn::Set(df, da[1]), s1[t]);
      }
    }
    const VF vd = hn::Set(df, Half(b.d));
    for (int t = 0; t < NT; ++t) acc[t] = hn::MulAdd(hn::Add(s0[t], s1[t]), vd, acc[t]);
  }
  Finish<NT>(acc, nullptr, nullptr, out);
}

#else  // portable path

HWY_INLINE float Half(uint16_t h) { return F16ToF32(h); }

// Integer dot of 32 int8 weights with 32 activations, the first 16 products scaled by s0
// and the last 16 by s1 (|w * s| < 2^15).
HWY_INLINE VI DotScaled(const int8_t* w, const int8_t* a, int16_t s0, int16_t s1) {
  const DI di;
#if HWY_TARGET == HWY_SCALAR
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += (i < 16 ? s0 : s1) * w[i] * a[i];
  return hn::Set(di, s);
#else
  const hn::Repartition<int16_t, DI> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  VI sum0 = hn::Zero(di), sum1 = hn::Zero(di);
  for (size_t k = 0; k < 32; k += hn::Lanes(d16)) {
    const auto w16 = hn::Mul(hn::PromoteTo(d16, hn::LoadU(d8, w + k)), hn::Set(d16, k < 16 ? s0 : s1));
    sum0 = hn::ReorderWidenMulAccumulate(di, w16, hn::PromoteTo(d16, hn::LoadU(d8, a + k)), sum0, sum1);
  }
  return hn::Add(sum0, sum1);
#endif
}

// One unpacked 32-element group: int8 weights, int16 scales of its two halves and the float
// factor of the group's integer dot (times the activation scale).
struct Group {
  HWY_ALIGN int8_t w[32];
  int16_t s0, s1;
  float scale;
};

template <GgmlType kType>
HWY_INLINE void Unpack(const uint8_t* row, int64_t g, Group& u) {
  if constexpr (kType == GgmlType::kIQ4_NL) {
    const auto& b = reinterpret_cast<const BlockIQ4_NL*>(row)[g];
    for (int j = 0; j < 16; ++j) {
      u.w[j] = kIq4nlValues[b.qs[j] & 0xF];
      u.w[j + 16] = kIq4nlValues[b.qs[j] >> 4];
    }
    u.s0 = u.s1 = 1;
    u.scale = Half(b.d);
  } else if constexpr (kType == GgmlType::kIQ4_XS) {
    const auto& b = reinterpret_cast<const BlockIQ4_XS*>(row)[g / 8];
    const int c = static_cast<int>(g % 8);
    const uint8_t* qs = b.qs + 16 * c;
    for (int j = 0; j < 16; ++j) {
      u.w[j] = kIq4nlValues[qs[j] & 0xF];
      u.w[j + 16] = kIq4nlValues[qs[j] >> 4];
    }
    u.s0 = u.s1 = 1;
    u.scale = Half(b.d) * static_cast<float>(Iq4XsScale(b, c) - 32);
  } else {
    constexpr bool kQ3 = kType == GgmlType::kQ3_K;
    using B = std::conditional_t<kQ3, BlockQ3_K, BlockQ2_K>;
    const B& b = reinterpret_cast<const B*>(row)[g / 8];
    const int c = static_cast<int>(g % 8);
    const uint8_t* qs = b.qs + 32 * (c / 4);
    const int shift = 2 * (c % 4);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[l] >> shift) & 3;
      if constexpr (kQ3) q = (q | (((b.hmask[l] >> c) & 1) << 2)) - 4;
      u.w[l] = static_cast<int8_t>(q);
    }
    if constexpr (kQ3) {
      u.s0 = static_cast<int16_t>(Q3KScale(b.scales, 2 * c) - 32);
      u.s1 = static_cast<int16_t>(Q3KScale(b.scales, 2 * c + 1) - 32);
    } else {
      u.s0 = b.scales[2 * c] & 0xF;
      u.s1 = b.scales[2 * c + 1] & 0xF;
    }
    u.scale = Half(b.d);
  }
}

// Q2_K's minimums for the super-block starting at group g: sum over its 16 halves of
// m_h * sum16_h * d_a, times dmin.
HWY_INLINE float Q2KMinTerm(const BlockQ2_K& b, const Act& a, int64_t g) {
  float s = 0;
  for (int c = 0; c < 8; ++c) {
    const int16_t* bs = a.sums + 2 * (g + c);
    const int m = (b.scales[2 * c] >> 4) * bs[0] + (b.scales[2 * c + 1] >> 4) * bs[1];
    s += static_cast<float>(m) * a.d[g + c];
  }
  return s * Half(b.dmin);
}

template <GgmlType kType, int NT>
HWY_INLINE void GroupPortable(const uint8_t* row, int64_t g, const Act* a, Group& u, VecArray<DF, NT>& acc) {
  const DF df;
  Unpack<kType>(row, g, u);
  for (int t = 0; t < NT; ++t) {
    const VI isum = DotScaled(u.w, a[t].qs + 32 * g, u.s0, u.s1);
    acc.Set(t, hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, u.scale * a[t].d[g]), acc.Get(t)));
  }
}

// Groups in pairs with one accumulator each (the K types have an even number of groups).
template <GgmlType kType, int NT>
HWY_INLINE void RowPortable(const uint8_t* row, int64_t n_groups, const Act* a, float* out) {
  const DF df;
  VecArray<DF, NT> acc0, acc1;
  float off[NT] = {};
  for (int t = 0; t < NT; ++t) {
    acc0.Set(t, hn::Zero(df));
    acc1.Set(t, hn::Zero(df));
  }
  Group u;
  int64_t g = 0;
  for (; g + 1 < n_groups; g += 2) {
    if ((g & 7) == 0) {
      hwy::Prefetch(row + g * 16 + 1024);
      if constexpr (kType == GgmlType::kQ2_K) {
        const auto& b = reinterpret_cast<const BlockQ2_K*>(row)[g / 8];
        for (int t = 0; t < NT; ++t) off[t] += Q2KMinTerm(b, a[t], g);
      }
    }
    GroupPortable<kType, NT>(row, g, a, u, acc0);
    GroupPortable<kType, NT>(row, g + 1, a, u, acc1);
  }
  if (g < n_groups) GroupPortable<kType, NT>(row, g, a, u, acc0);
  for (int t = 0; t < NT; ++t) {  // as Finish, from VecArrays
    out[t] = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0.Get(t), acc1.Get(t)))) - off[t];
  }
}
#endif  // TLR_LB_X86

// Whether the kernel of `type` reads the 16-element activation sums on this target.
constexpr bool NeedsSums(GgmlType type) {
#ifdef TLR_LB_X86
  return type == GgmlType::kQ2_K || type == GgmlType::kQ3_K;
#else
  return type == GgmlType::kQ2_K;
#endif
}

template <GgmlType kType, int NT>
HWY_INLINE void DotRow(const uint8_t* row, int64_t n_cols, const Act* a, float* out) {
#ifdef TLR_LB_X86
  if constexpr (kType == GgmlType::kQ2_K) RowQ23K<false, NT>(row, n_cols / 256, a, out);
  else if constexpr (kType == GgmlType::kQ3_K) RowQ23K<true, NT>(row, n_cols / 256, a, out);
  else if constexpr (kType == GgmlType::kIQ4_NL) RowIQ4NL<NT>(row, n_cols / 32, a, out);
  else RowIQ4XS<NT>(row, n_cols / 256, a, out);
#else
  RowPortable<kType, NT>(row, n_cols / 32, a, out);
#endif
}

// Columns per window: the activation sums of 4 tokens over a window live on the stack
// (16 KiB). Rows longer than this (none in today's models) are summed window by window.
constexpr int64_t kWindow = 32768;
// Rows per block: a block's weights stay in cache while every group of 4 tokens uses them.
constexpr int64_t kRowBlock = 32;

template <GgmlType kType>
void Rows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const auto& tr = GgmlTraits(kType);
  const int64_t n = in.n_cols, nb = n / 32;
  HWY_ALIGN int16_t sums[4][kWindow / 16];
  int64_t sums_t0 = -1, sums_c0 = -1;  // which tokens and window `sums` holds
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    for (int64_t t0 = 0; t0 < in.n_tokens; t0 += 4) {
      const int nt = static_cast<int>(std::min<int64_t>(4, in.n_tokens - t0));
      for (int64_t r = rb; r < re; ++r) {
        float total[4] = {0, 0, 0, 0};
        for (int64_t c0 = 0; c0 < n; c0 += kWindow) {
          const int64_t cn = std::min(kWindow, n - c0);
          if (NeedsSums(kType) && (sums_t0 != t0 || sums_c0 != c0)) {
            for (int t = 0; t < nt; ++t) ActSums16(in.qs + (t0 + t) * n + c0, cn, sums[t]);
            sums_t0 = t0;
            sums_c0 = c0;
          }
          Act act[4];
          for (int t = 0; t < nt; ++t) {
            act[t] = {in.qs + (t0 + t) * n + c0, in.d + (t0 + t) * nb + c0 / 32, sums[t]};
          }
          const uint8_t* row = w.Row(r) + c0 / tr.block_size * tr.type_size;
          float part[4];
          switch (nt) {
            case 4: DotRow<kType, 4>(row, cn, act, part); break;
            case 3: DotRow<kType, 3>(row, cn, act, part); break;
            case 2: DotRow<kType, 2>(row, cn, act, part); break;
            default: DotRow<kType, 1>(row, cn, act, part); break;
          }
          for (int t = 0; t < nt; ++t) total[t] += part[t];
        }
        for (int t = 0; t < nt; ++t) y[(t0 + t) * ldy + r] = total[t];
      }
    }
  }
}

}  // namespace

void MatMulRowsLowBitImpl(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy,
                          int64_t r0, int64_t r1) {
  switch (w.type) {
    case GgmlType::kQ2_K: return Rows<GgmlType::kQ2_K>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ3_K: return Rows<GgmlType::kQ3_K>(w, in, y, ldy, r0, r1);
    case GgmlType::kIQ4_NL: return Rows<GgmlType::kIQ4_NL>(w, in, y, ldy, r0, r1);
    case GgmlType::kIQ4_XS: return Rows<GgmlType::kIQ4_XS>(w, in, y, ldy, r0, r1);
    default: return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr {

HWY_EXPORT(MatMulRowsLowBitImpl);

bool LowBitSupports(GgmlType t) {
  return t == GgmlType::kQ2_K || t == GgmlType::kQ3_K || t == GgmlType::kIQ4_NL ||
         t == GgmlType::kIQ4_XS;
}

void MatMulRowsLowBit(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy,
                      int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsLowBitImpl)(w, in, y, ldy, r0, r1);
}

}  // namespace tlr
#endif  // HWY_ONCE
