// Quantized-weight row kernels for MatMul (ops layer), compiled once per Highway target: this
// file is included by matmul.cc after hwy/foreach_target.h and re-included for every target.
// Weights are unpacked 32 at a time (in registers on x86, through a small buffer elsewhere)
// and dotted with the token's 8-bit activations; see matmul.cc for the whole picture.

// Per-target include guard (Highway's -inl.h convention).
#if defined(TLR_OPS_MATMUL_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TLR_OPS_MATMUL_QUANT_INL_H_
#undef TLR_OPS_MATMUL_QUANT_INL_H_
#else
#define TLR_OPS_MATMUL_QUANT_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "quant/blocks.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "quant/quantize.h"
#include "ops/vec_array-inl.h"

#ifndef TLR_OPS_MATMUL_F16_TABLE
#define TLR_OPS_MATMUL_F16_TABLE
namespace tlr {
// f16 -> f32 for block scales: a table is faster than converting one value at a time.
inline const float* F16Table() {
  static const float* table = [] {
    auto* t = new float[65536];
    for (uint32_t i = 0; i < 65536; ++i) t[i] = F16ToF32(static_cast<uint16_t>(i));
    return t;
  }();
  return table;
}
}  // namespace tlr
#endif

HWY_BEFORE_NAMESPACE();
// This file is compiled once per target: forget the previous pass's feature macros.
#undef TLR_X86_256
#undef TLR_HAVE_VNNI512
#if HWY_TARGET == HWY_AVX3_DL && (HWY_COMPILER_GCC_ACTUAL || HWY_COMPILER_CLANG)
// AVX3_DL implies AVX-512 VNNI. Highway 1.0.3 also enables the VEX "avxvnni" feature for
// this target, which e.g. Zen 4 lacks, so the compiler may encode vpdpbusd with VEX and the
// CPU would fault: the instruction is written out with an explicit EVEX encoding instead.
#define TLR_HAVE_VNNI512 1
#endif
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Software prefetch of the weight bytes [p, p + bytes) of a group that a decode kernel will
// read `ahead` bytes on in its stream: every cache line of it, or only the first when the CPU's
// hardware prefetcher covers the rest (WeightPrefetch in matmul.h: measured per CPU).
HWY_INLINE void PrefetchGroup(const uint8_t* p, size_t bytes, size_t ahead, bool every_line) {
  if (!every_line) {
    hwy::Prefetch(p + ahead);
    return;
  }
  for (size_t b = 0; b < bytes; b += 64) hwy::Prefetch(p + ahead + b);
}
HWY_INLINE bool PrefetchEveryLine() { return kernels::prefetch_every_line.load(std::memory_order_relaxed); }

using DF = hn::CappedTag<float, 8>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define TLR_X86_256 1
// 32 unsigned bytes (< 128 for every type here) times 32 signed bytes -> 8 int32 sums.
HWY_INLINE __m256i DotU8(__m256i w, __m256i a) {
#ifdef TLR_HAVE_VNNI512
  __m256i acc = _mm256_setzero_si256();
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a));
  return acc;
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
#endif
}
// Signed weights: |w| * (a with w's sign).
HWY_INLINE __m256i DotI8(__m256i w, __m256i a) {
  return DotU8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}
// Signed weights with an int16 scale per 16 elements (Q6_K): lanes 0-3 use s0, 4-7 use s1.
HWY_INLINE __m256i DotI8Scaled16(__m256i w, __m256i a, int16_t s0, int16_t s1) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(p, _mm256_setr_m128i(_mm_set1_epi16(s0), _mm_set1_epi16(s1)));
}
HWY_INLINE __m256i Load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
// 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high nibbles.
HWY_INLINE __m256i Nibbles(const uint8_t* qs) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_setr_m128i(x, _mm_srli_epi16(x, 4)), _mm256_set1_epi8(0x0F));
}
// The 5th bits of a Q5 group: byte j is 0x10 where bit j of qh is set. Each byte picks the
// qh byte holding its bit (the 32 bits are broadcast to every 4 bytes of both 128-bit lanes,
// so an in-lane byte shuffle reaches bytes 0-3), then tests its own bit with a mask.
HWY_INLINE __m256i Q5HighBits(uint32_t qh) {
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), pick);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}
HWY_INLINE VI ToVI(__m256i v) { return VI{v}; }
#endif

// Portable integer dot of 32 weights (as int8 values) with 32 activations.
HWY_INLINE VI DotPortable(const int8_t* w, const int8_t* a) {
  const DI di;
#if HWY_TARGET == HWY_SCALAR
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += w[i] * a[i];
  return hn::Set(di, s);
#else
  const hn::Repartition<int16_t, DI> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  VI sum0 = hn::Zero(di), sum1 = hn::Zero(di);
  for (size_t k = 0; k < 32; k += hn::Lanes(d16)) {
    const auto w16 = hn::PromoteTo(d16, hn::LoadU(d8, w + k));
    const auto a16 = hn::PromoteTo(d16, hn::LoadU(d8, a + k));
    sum0 = hn::ReorderWidenMulAccumulate(di, w16, a16, sum0, sum1);
  }
  return hn::Add(sum0, sum1);
#endif
}

// Per-type unpacking of one 32-element group to int8 (portable path and the types without a
// register unpack). `sub` is the 32-element group index inside a K-quant super-block.
// Returns the weight scale and writes the offset coefficient: the group's dot is
// scale * d_a * isum + offset * s_a.
struct Group {
  float scale, offset;
};

HWY_INLINE Group UnpackQ5_0(const uint8_t* b, bool has_min, int8_t* w) {
  const float* f16 = F16Table();
  const Q5Fields q = ParseQ5(b, has_min);
  const uint32_t qh = q.qh;
  const uint8_t* qs = q.qs;
  for (int j = 0; j < 16; ++j) {
    w[j] = static_cast<int8_t>((qs[j] & 0xF) | (((qh >> j) << 4) & 0x10));
    w[j + 16] = static_cast<int8_t>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
  }
  const float d = f16[q.d];
  return {d, has_min ? f16[q.m] : -16.0f * d};
}

HWY_INLINE Group UnpackQ5K(const BlockQ5_K& x, int sub, int8_t* w) {
  const float* f16 = F16Table();
  const uint8_t* ql = x.qs + 32 * (sub / 2);
  const int shift = (sub & 1) * 4;
  const uint8_t hbit = static_cast<uint8_t>(1u << sub);
  for (int l = 0; l < 32; ++l) {
    w[l] = static_cast<int8_t>(((ql[l] >> shift) & 0xF) | ((x.qh[l] & hbit) ? 16 : 0));
  }
  uint8_t sc, m;
  ScaleMinK4(sub, x.scales, &sc, &m);
  return {f16[x.d] * sc, -f16[x.dmin] * m};
}

// Q6_K: 32 signed weights of group `sub` (0..7) and the int8 scales of its two halves.
HWY_INLINE void UnpackQ6K(const BlockQ6_K& x, int sub, int8_t* w, int16_t* s0, int16_t* s1) {
  const int half = sub / 4;        // which 128-element half of the super-block
  const int quarter = sub % 4;     // which 32-element run inside it
  const uint8_t* ql = x.ql + 64 * half + (quarter & 1) * 32;
  const uint8_t* qh = x.qh + 32 * half;
  const int lshift = (quarter >= 2) ? 4 : 0;
  const int hshift = 2 * quarter;
  for (int l = 0; l < 32; ++l) {
    w[l] = static_cast<int8_t>((((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32);
  }
  *s0 = x.scales[8 * half + 2 * quarter];
  *s1 = x.scales[8 * half + 2 * quarter + 1];
}

HWY_INLINE float Half(uint16_t h) {
#ifdef TLR_X86_256
  return _cvtsh_ss(h);
#else
  return F16Table()[h];
#endif
}

// One 32-weight group, unpacked: the weights (in a register on x86, in `w` elsewhere), and
// the coefficients of its dot product: scale * d_a * isum + offset * s_a.
struct Unpacked {
#ifdef TLR_X86_256
  __m256i v;
#endif
  HWY_ALIGN int8_t w[32];
  float scale, offset;
  int16_t s0, s1;  // Q6_K: int scales of the two 16-element halves
};

// One token's quantized activations (structure of arrays, see MatMulInput) and one group.
struct ActView {
  const int8_t* qs;
  const float* d;
  const float* s;
  const int16_t* s16 = nullptr;  // sums of 16 q (MatMulInput::s16), for the Q6_K panels
};
struct ActGroup {
  const int8_t* qs;
  float d, s;
};
HWY_INLINE ActGroup At(const ActView& a, int64_t g) { return {a.qs + 32 * g, a.d[g], a.s[g]}; }

// Decoded scales of the current K-quant super-block, so its 8 groups decode them once.
struct SuperBlockCache {
  int64_t index = -1;
  float scale[8], offset[8];
};

template <GgmlType kType>
HWY_INLINE void Fetch(const uint8_t* row, int64_t g, Unpacked& u, SuperBlockCache& cache) {
  if constexpr (kType == GgmlType::kQ8_0) {
    const auto& x = reinterpret_cast<const BlockQ8_0*>(row)[g];
    u.scale = Half(x.d);
    u.offset = 0;
#ifdef TLR_X86_256
    u.v = Load32(x.qs);
#else
    std::memcpy(u.w, x.qs, 32);
#endif
  } else if constexpr (kType == GgmlType::kQ4_0 || kType == GgmlType::kQ4_1) {
    constexpr bool kMin = kType == GgmlType::kQ4_1;
    using B = std::conditional_t<kMin, BlockQ4_1, BlockQ4_0>;
    const auto& x = reinterpret_cast<const B*>(row)[g];
    u.scale = Half(x.d);
    if constexpr (kMin) u.offset = Half(x.m);
    else u.offset = u.scale;  // times kOffsetScale<kType> = -8, applied once per row
#ifdef TLR_X86_256
    u.v = Nibbles(x.qs);
#else
    for (int j = 0; j < 16; ++j) {
      u.w[j] = static_cast<int8_t>(x.qs[j] & 0xF);
      u.w[j + 16] = static_cast<int8_t>(x.qs[j] >> 4);
    }
#endif
  } else if constexpr (kType == GgmlType::kQ5_0 || kType == GgmlType::kQ5_1) {
    constexpr bool kMin = kType == GgmlType::kQ5_1;
    constexpr size_t kBytes = kMin ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
#ifdef TLR_X86_256
    // In registers: the nibbles as for Q4_0, OR the 5th bits.
    const Q5Fields q = ParseQ5(row + g * kBytes, kMin);
    u.scale = Half(q.d);
    u.offset = kMin ? Half(q.m) : u.scale;  // Q5_0: times -16, applied once per row
    u.v = _mm256_or_si256(Nibbles(q.qs), Q5HighBits(q.qh));
#else
    const Group gr = UnpackQ5_0(row + g * kBytes, kMin, u.w);
    u.scale = gr.scale;
    u.offset = kMin ? gr.offset : gr.scale;  // Q5_0: times -16, applied once per row
#endif
  } else if constexpr (kType == GgmlType::kQ4_K) {
    const auto& x = reinterpret_cast<const BlockQ4_K*>(row)[g / 8];
    const int sub = static_cast<int>(g % 8);
    if (cache.index != g / 8) {
      cache.index = g / 8;
      const float d = Half(x.d), dmin = Half(x.dmin);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        ScaleMinK4(j, x.scales, &sc, &m);
        cache.scale[j] = d * sc;
        cache.offset[j] = -dmin * m;
      }
    }
    u.scale = cache.scale[sub];
    u.offset = cache.offset[sub];
    const uint8_t* qs = x.qs + 32 * (sub / 2);
#ifdef TLR_X86_256
    const __m256i raw = Load32(qs);
    const __m256i mask = _mm256_set1_epi8(0x0F);
    u.v = (sub & 1) ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask) : _mm256_and_si256(raw, mask);
#else
    const int shift = (sub & 1) * 4;
    for (int l = 0; l < 32; ++l) u.w[l] = static_cast<int8_t>((qs[l] >> shift) & 0xF);
#endif
  } else if constexpr (kType == GgmlType::kQ5_K) {
    const Group gr = UnpackQ5K(reinterpret_cast<const BlockQ5_K*>(row)[g / 8], g % 8, u.w);
    u.scale = gr.scale;
    u.offset = gr.offset;
#ifdef TLR_X86_256
    u.v = Load32(u.w);
#endif
  } else if constexpr (kType == GgmlType::kQ6_K) {
    const auto& x = reinterpret_cast<const BlockQ6_K*>(row)[g / 8];
    UnpackQ6K(x, static_cast<int>(g % 8), u.w, &u.s0, &u.s1);
    u.scale = Half(x.d);
    u.offset = 0;
#ifdef TLR_X86_256
    u.v = Load32(u.w);
#endif
  }
}

// Types whose offset is a constant multiple of the scale (Q4_0: -8, Q5_0: -16) accumulate
// scale * s_a and multiply the sum once per row: one multiply fewer per group.
template <GgmlType kType>
constexpr float kOffsetScale = kType == GgmlType::kQ4_0 ? -8.0f : kType == GgmlType::kQ5_0 ? -16.0f : 1.0f;

// Bytes of weight data per 32-element group (rounded down for Q6_K).
template <GgmlType kType>
constexpr size_t kGroupBytes = GgmlType::kQ8_0 == kType ? 34 : GgmlType::kQ4_1 == kType ? 20
                               : (GgmlType::kQ5_0 == kType || GgmlType::kQ5_K == kType) ? 22
                               : GgmlType::kQ5_1 == kType ? 24 : GgmlType::kQ6_K == kType ? 26 : 18;

// Integer dot of an unpacked group with 32 activation bytes, as int32 lanes.
template <GgmlType kType>
HWY_INLINE VI DotGroup(const Unpacked& u, const int8_t* a) {
#ifdef TLR_X86_256
  const __m256i av = Load32(a);
  if constexpr (kType == GgmlType::kQ8_0) return ToVI(DotI8(u.v, av));
  else if constexpr (kType == GgmlType::kQ6_K) return ToVI(DotI8Scaled16(u.v, av, u.s0, u.s1));
  else return ToVI(DotU8(u.v, av));
#else
  if constexpr (kType == GgmlType::kQ6_K) {
#if HWY_TARGET == HWY_SCALAR
    int32_t si = 0;
    for (int i = 0; i < 32; ++i) si += (i < 16 ? u.s0 : u.s1) * u.w[i] * a[i];
    return hn::Set(DI(), si);
#else
    // Scale the weights to int16 per half, then widen-multiply.
    const DI di;
    const hn::Repartition<int16_t, DI> d16;
    const hn::Rebind<int8_t, decltype(d16)> d8;
    VI s = hn::Zero(di), s_hi = hn::Zero(di);
    for (size_t k = 0; k < 32; k += hn::Lanes(d16)) {
      const auto w16 = hn::Mul(hn::PromoteTo(d16, hn::LoadU(d8, u.w + k)),
                               hn::Set(d16, k < 16 ? u.s0 : u.s1));
      s = hn::ReorderWidenMulAccumulate(di, w16, hn::PromoteTo(d16, hn::LoadU(d8, a + k)), s, s_hi);
    }
    return hn::Add(s, s_hi);
#endif
  } else {
    return DotPortable(u.w, a);
  }
#endif
}

#ifdef TLR_X86_256
// Q4_K on x86: per super-block, decode the 8 scales once and split each 32-byte load of
// nibbles into its two groups.
template <int NT>
HWY_INLINE void DotRowQ4K(const uint8_t* row, int64_t n_cols, const ActView* a, float* out) {
  const DF df;
  VF acc0[NT], acc1[NT], offv[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = offv[t] = hn::Zero(df);
  const auto* x = reinterpret_cast<const BlockQ4_K*>(row);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  HWY_ALIGN float scf[8], mnf[8], scale[NT][8];
  for (int64_t sb = 0; sb < n_cols / 256; ++sb) {
    hwy::Prefetch(reinterpret_cast<const uint8_t*>(x + sb) + 1024);
    const float d = Half(x[sb].d), dmin = Half(x[sb].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      ScaleMinK4(j, x[sb].scales, &sc, &mn);
      scf[j] = d * sc;
      mnf[j] = dmin * mn;
    }
    // The 8 groups' weight scale times activation scale, and the minimum term, per token:
    // one vector op each instead of one scalar op per group.
    const VF vsc = hn::Load(df, scf), vmn = hn::Load(df, mnf);
    for (int t = 0; t < NT; ++t) {
      hn::Store(hn::Mul(vsc, hn::LoadU(df, a[t].d + sb * 8)), df, scale[t]);
      offv[t] = hn::MulAdd(vmn, hn::LoadU(df, a[t].s + sb * 8), offv[t]);
    }
    for (int j = 0; j < 4; ++j) {
      const __m256i raw = Load32(x[sb].qs + 32 * j);
      const __m256i lo = _mm256_and_si256(raw, mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
      for (int t = 0; t < NT; ++t) {
        const int8_t* q = a[t].qs + 32 * (sb * 8 + 2 * j);
        acc0[t] = hn::MulAdd(hn::ConvertTo(df, ToVI(DotU8(lo, Load32(q)))), hn::Set(df, scale[t][2 * j]), acc0[t]);
        acc1[t] = hn::MulAdd(hn::ConvertTo(df, ToVI(DotU8(hi, Load32(q + 32)))), hn::Set(df, scale[t][2 * j + 1]), acc1[t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[t], acc1[t]))) -
             hn::GetLane(hn::SumOfLanes(df, offv[t]));
  }
}

// Q6_K on x86: per 128-element half of a super-block, three 32-byte loads (two of low
// nibbles, one of high bits) unpack to its four groups of signed 6-bit weights; the int8
// sub-block scales multiply inside the integer dot (DotI8Scaled16).
template <int NT>
HWY_INLINE void DotRowQ6K(const uint8_t* row, int64_t n_cols, const ActView* a, float* out) {
  const DF df;
  VF acc0[NT], acc1[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = hn::Zero(df);
  const auto* x = reinterpret_cast<const BlockQ6_K*>(row);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
  HWY_ALIGN float scale[NT][8];
  for (int64_t sb = 0; sb < n_cols / 256; ++sb) {
    hwy::Prefetch(reinterpret_cast<const uint8_t*>(x + sb) + 1024);
    const VF vd = hn::Set(df, Half(x[sb].d));
    for (int t = 0; t < NT; ++t) hn::Store(hn::Mul(vd, hn::LoadU(df, a[t].d + sb * 8)), df, scale[t]);
    const int8_t* sc = x[sb].scales;
    for (int half = 0; half < 2; ++half) {
      const __m256i l0 = Load32(x[sb].ql + 64 * half), l1 = Load32(x[sb].ql + 64 * half + 32);
      const __m256i h = Load32(x[sb].qh + 32 * half);
      __m256i w[4];
      w[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
      w[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
      w[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
      w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
      for (int qq = 0; qq < 4; ++qq) {
        const __m256i wq = _mm256_sub_epi8(w[qq], k32);
        const int j = 4 * half + qq;  // group within the super-block
        for (int t = 0; t < NT; ++t) {
          const VI isum = ToVI(DotI8Scaled16(wq, Load32(a[t].qs + 32 * (sb * 8 + j)), sc[2 * j], sc[2 * j + 1]));
          VF& acc = (qq & 1) ? acc1[t] : acc0[t];
          acc = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, scale[t][j]), acc);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[t], acc1[t])));
}
#endif

// Sums NT tokens' dot products with one weight row of a quantized type. Groups go in pairs
// with separate accumulators so the float adds of consecutive groups do not wait on each
// other (a single chain of FMAs would bound a decode step by FMA latency, not memory).
template <GgmlType kType, int NT>
HWY_INLINE void DotRowQ(const uint8_t* row, int64_t n_cols, const ActView* a, float* out) {
#ifdef TLR_X86_256
  if constexpr (kType == GgmlType::kQ4_K) return DotRowQ4K<NT>(row, n_cols, a, out);
  if constexpr (kType == GgmlType::kQ6_K) return DotRowQ6K<NT>(row, n_cols, a, out);
#endif
  const DF df;
  VecArray<DF, NT> acc0, acc1;
  float off0[NT], off1[NT];
  for (int t = 0; t < NT; ++t) {
    acc0.Set(t, hn::Zero(df));
    acc1.Set(t, hn::Zero(df));
    off0[t] = off1[t] = 0;
  }
  const int64_t ng = n_cols / 32;
  Unpacked u0, u1;
  SuperBlockCache cache;
  int64_t g = 0;
  for (; g + 1 < ng; g += 2) {
    // Software prefetch ~1 KiB ahead: a row of a few hundred bytes is over before the
    // hardware prefetcher ramps up, and decode is one long stream of such rows.
    hwy::Prefetch(row + g * kGroupBytes<kType> + 1024);
    Fetch<kType>(row, g, u0, cache);
    Fetch<kType>(row, g + 1, u1, cache);
    for (int t = 0; t < NT; ++t) {
      const ActGroup a0 = At(a[t], g);
      const ActGroup a1 = At(a[t], g + 1);
      acc0.Set(t, hn::MulAdd(hn::ConvertTo(df, DotGroup<kType>(u0, a0.qs)), hn::Set(df, u0.scale * a0.d), acc0.Get(t)));
      acc1.Set(t, hn::MulAdd(hn::ConvertTo(df, DotGroup<kType>(u1, a1.qs)), hn::Set(df, u1.scale * a1.d), acc1.Get(t)));
      off0[t] += u0.offset * a0.s;
      off1[t] += u1.offset * a1.s;
    }
  }
  if (g < ng) {
    Fetch<kType>(row, g, u0, cache);
    for (int t = 0; t < NT; ++t) {
      const ActGroup a0 = At(a[t], g);
      acc0.Set(t, hn::MulAdd(hn::ConvertTo(df, DotGroup<kType>(u0, a0.qs)), hn::Set(df, u0.scale * a0.d), acc0.Get(t)));
      off0[t] += u0.offset * a0.s;
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0.Get(t), acc1.Get(t)))) +
             kOffsetScale<kType> * (off0[t] + off1[t]);
  }
}

// Rows [r0, r1) of a matrix in GGUF layout times every token of `in`: blocks of rows outside,
// groups of up to 4 tokens inside, so a block's weights stay in L1/L2 while every token uses
// them. dot(row, nt, t0, out) computes tokens t0..t0+nt-1 against one row.
template <class Dot>
HWY_INLINE void RowBlocks(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy,
                          int64_t r0, int64_t r1, const Dot& dot) {
  constexpr int64_t kRowBlock = 16;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    for (int64_t t0 = 0; t0 < in.n_tokens; t0 += 4) {
      const int nt = static_cast<int>(std::min<int64_t>(4, in.n_tokens - t0));
      for (int64_t r = rb; r < re; ++r) {
        float out[4] = {0, 0, 0, 0};
        dot(w.Row(r), nt, t0, out);
        for (int t = 0; t < nt; ++t) y[(t0 + t) * ldy + r] = out[t];
      }
    }
  }
}

// The same for a quantized type with its DotRowQ kernel.
template <GgmlType kType>
HWY_INLINE void QuantRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy,
                          int64_t r0, int64_t r1) {
  const int64_t nb = in.n_cols / 32;
  RowBlocks(w, in, y, ldy, r0, r1, [&](const uint8_t* row, int nt, int64_t t0, float* out) {
    ActView aq[4];
    for (int t = 0; t < nt; ++t) {
      aq[t] = {in.qs + (t0 + t) * in.n_cols, in.d + (t0 + t) * nb, in.s + (t0 + t) * nb};
    }
    switch (nt) {
      case 4: DotRowQ<kType, 4>(row, in.n_cols, aq, out); break;
      case 3: DotRowQ<kType, 3>(row, in.n_cols, aq, out); break;
      case 2: DotRowQ<kType, 2>(row, in.n_cols, aq, out); break;
      default: DotRowQ<kType, 1>(row, in.n_cols, aq, out); break;
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
