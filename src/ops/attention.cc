// Attention over a KV cache in its stored type (ops layer): the SIMD kernel behind
// Attention() in nn.h, compiled once per Highway target and dispatched at run time, and the
// (scalar) writers and readers of the cache layout it reads.
//
// For a group of up to kMaxGroup query heads that share one KV head, positions are visited in
// chunks of kAttentionChunk:
//   1. scores, one key tile (16 positions, transposed) at a time: for each dimension i, the
//      16 positions' values are one load (widened in registers: f16 by PromoteTo) and every
//      head adds q_h[i] times them to its 16 running dot products. No horizontal sums.
//      q8_0 keys: the query is rounded to q8_0 too (nn.h), each 32-dimension block's dot
//      products are exact integers, then times both block scales; with AVX-512 VNNI
//      (vpdpbusd) 4 dimensions of 16 positions per instruction.
//   2. online softmax: the chunk's maximum updates the running maximum m; the running sum and
//      the output so far are scaled by exp(m_old - m_new); p = exp(s - m_new);
//   3. values: each V row is widened once per pass (up to 4 heads of 64 dimensions, its
//      whole row) and added into every head's output with weight p. The output
//      accumulates in `out` itself, divided by the sum at the end. q8_0 values with
//      AVX-512 VNNI: int16 weights times the int8 values by vpdpwssd (ChunkValuesQ8Vnni).
// The next chunk's keys and values are prefetched into L2 while a chunk is worked on: at long
// contexts every decode step streams the whole cache from memory (see KvCache for its pages).
// Against a q8_0 cache at 2000 positions (qwen2.5-0.5b's 24 layers x 2 KV heads x 7 query
// heads, head_dim 64, 2 threads, attention_bench, alternated) the int8 scores, int16 value
// weights, a cheaper exp and the query rounded in vectors took a decode step's attention from
// 0.97 to 0.70 ms with the cache coming from memory (1.32 -> 0.82 ms on 1 thread from L3).
// The heads' accumulators are template-sized arrays so they stay in registers. Nothing is
// allocated; the chunk's scores live on the stack.
//
// The order of every sum depends only on the window [first, n_kv) and head_dim (chunks and
// tiles start at multiples of kAttentionChunk), never on the batch, on the thread that runs
// it or on the other heads of the group: a position's output is bit-identical alone or inside
// a batch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "ops/nn.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "ops/vec_array-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Query heads processed together: their score and output accumulators stay in registers.
constexpr int kMaxGroup = 8;
constexpr int64_t kChunk = kAttentionChunk;
static_assert(kChunk % kKeyTile == 0, "chunks are whole key tiles");

#undef TLR_ATTN_VNNI
#if HWY_TARGET == HWY_AVX3_DL && (HWY_COMPILER_GCC_ACTUAL || HWY_COMPILER_CLANG)
// AVX-512 VNNI (and VBMI) are part of AVX3_DL; Highway 1.0.3 has no int8 dot product op and
// does not enable the avx512vnni intrinsics, so vpdpbusd is written out (EVEX by its operands).
#define TLR_ATTN_VNNI 1
// acc + per-lane dot of the 4 unsigned bytes of each lane of u with the 4 signed bytes at s
// (broadcast from memory to every lane).
// The bytes are read by the instruction itself (an embedded broadcast, no separate load).
HWY_INLINE __m512i DpBroadcast(__m512i acc, __m512i u, const int8_t* s) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const int32_t*>(s)));
  return acc;
}
// vpermb indices taking 4 rows of 16 bytes ([row][t]) to 16 groups of 4 ([t][row]).
HWY_INLINE __m512i TransposeBytes4x16() {
  alignas(64) static constexpr uint8_t kIdx[64] = {
      0, 16, 32, 48, 1, 17, 33, 49, 2,  18, 34, 50, 3,  19, 35, 51, 4,  20, 36, 52, 5,  21,
      37, 53, 6, 22, 38, 54, 7, 23, 39, 55, 8, 24, 40, 56, 9,  25, 41, 57, 10, 26, 42, 58, 11, 27,
      43, 59, 12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};
  return _mm512_load_si512(kIdx);
}
#endif

// acc + v * w[0]. On 512-bit x86 the instruction broadcasts w itself ({1to16}): the compiler
// folds a broadcast into the multiply-add only when it is used once, the value loop uses
// each weight for two vectors, and a separate vbroadcastss costs Zen 4 a slot of the FMA
// pipes (14 multiply-adds with 7 broadcasts: 16.6 cycles, folded 14.0).
template <class D>
HWY_INLINE hn::Vec<D> MulAddBroadcast(D d, const float* w, hn::Vec<D> v, hn::Vec<D> acc) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && (HWY_COMPILER_GCC_ACTUAL || HWY_COMPILER_CLANG)
  if constexpr (hn::MaxLanes(d) == 16) {
    __m512 r = acc.raw;
    asm("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(r) : "v"(v.raw), "m"(*w));
    return hn::Vec<D>{r};
  }
#endif
  return hn::MulAdd(hn::Set(d, *w), v, acc);
}

// Prefetch of the cache line at p into L2 (prefetcht1; PLDL2KEEP on Arm). The cache streams
// from memory at long contexts and a prefetch into L1 holds one of L1's few miss buffers
// for the whole trip to DRAM (perf put samples on the prefetches themselves); into L2 the
// buffer frees at once. Against prefetches into L1, with the cache in huge pages
// (attention_bench, 24 layers, 2 threads, steps of the two alternated, Zen 4): q8_0 median
// 1.07 -> 0.88 ms; f16 with the whole-row values below 1.40 -> 1.33 ms.
HWY_INLINE void PrefetchL2(const uint8_t* p) { __builtin_prefetch(p, 0, 2); }

// Values [i, i + Lanes(d)) of a stored value row as floats. For q8_0, Lanes(d) divides 32
// and i is a multiple of it, so a vector never straddles two blocks.
template <GgmlType kType, class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const uint8_t* row, int64_t i) {
  if constexpr (kType == GgmlType::kF32) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (kType == GgmlType::kF16) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i));
  } else {
    static_assert(kType == GgmlType::kQ8_0);
    const uint8_t* block = row + (i / 32) * sizeof(BlockQ8_0);
    const hn::CappedTag<float, 1> d1;
    const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
    const float scale = hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(block))));
    const hn::Rebind<int8_t, D> d8;
    const hn::Rebind<int32_t, D> d32;
    const auto q8 = hn::LoadU(d8, reinterpret_cast<const int8_t*>(block + 2) + (i % 32));
    return hn::Mul(hn::ConvertTo(d, hn::PromoteTo(d32, q8)), hn::Set(d, scale));
  }
}

// Lanes [lane, lane + Lanes(d)) of dimension i of a key tile, as floats (q8_0: the int8
// values, unscaled).
template <GgmlType kType, class D>
HWY_INLINE hn::Vec<D> LoadKeyLanes(D d, const uint8_t* tile, int64_t hd, int64_t i, int64_t lane) {
  if constexpr (kType == GgmlType::kF32) {
    return hn::LoadU(d, reinterpret_cast<const float*>(tile) + i * kKeyTile + lane);
  } else if constexpr (kType == GgmlType::kF16) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(tile) + i * kKeyTile + lane));
  } else {
    static_assert(kType == GgmlType::kQ8_0);
    const hn::Rebind<int8_t, D> d8;
    const hn::Rebind<int32_t, D> d32;
    const int8_t* qs = reinterpret_cast<const int8_t*>(tile + (hd / 32) * kKeyTile * 2);
    return hn::ConvertTo(d, hn::PromoteTo(d32, hn::LoadU(d8, qs + i * kKeyTile + lane)));
  }
}

// The query of a q8_0 cache's group, rounded to q8_0 per 32 dimensions (QuantizeQueryQ8):
// scores against q8_0 keys are then exact integer dot products per block, times both scales.
struct QueryQ8 {
  HWY_ALIGN float qf[kMaxGroup * kMaxQ8HeadDim];  // [g][i] the integers, as floats
  float d[kMaxGroup * kMaxQ8HeadDim / 32];        // [g][block] the scales
#if TLR_ATTN_VNNI
  HWY_ALIGN int8_t qi[kMaxGroup * kMaxQ8HeadDim];  // [g][i] the integers
  int32_t corr[kMaxGroup * kMaxQ8HeadDim / 32];    // [g][block] -128 * their sum
#endif
};

// s[g * kChunk + t] = scale * q_g . K_t for the tile's 16 positions t (positions past the
// cache's size get finite garbage, masked later). q8_0 keys: q is unused and qq holds the
// rounded query. pf (or null): pf_bytes to prefetch, one cache line per dimension of the
// float loop (the rest, and all of a q8_0 tile, before it). Spread rather than in one burst
// of 32 prefetches per f16 tile before it (perf put 5% of the kernel's samples on the
// burst); with the folded broadcasts of MulAddBroadcast, attention_bench f16 (2000
// positions, 2 threads, from memory), alternated x3 on Zen 4: min 1.57-1.68 -> 1.30-1.43 ms.
template <GgmlType kType, int kG, class D>
HWY_INLINE void TileScores(D d, const float* q, const QueryQ8* qq, int64_t hd, const uint8_t* tile, float scale,
                           float* s, const uint8_t* pf, size_t pf_bytes) {
  using V = hn::Vec<D>;
#if HWY_HAVE_SCALABLE
  // Scalable vectors (SVE): MaxLanes is only a bound; the tile goes Lanes(d) positions at a
  // time, at least 4 floats (SVE's 128-bit minimum) unless the tag caps it lower.
  const int64_t kL = static_cast<int64_t>(hn::Lanes(d));
  const int kV = static_cast<int>(kKeyTile / kL);
  constexpr int kMaxV = static_cast<int>(kKeyTile / std::min<int64_t>(4, hn::MaxLanes(d)));
#else
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(d));
  constexpr int kV = static_cast<int>(kKeyTile / kL);
  constexpr int kMaxV = kV;
#endif
  using Acc = VecArray<D, kG * kMaxV>;  // [g * kV + v]
  Acc acc;
  for (int g = 0; g < kG; ++g) {
    for (int v = 0; v < kV; ++v) acc.Set(g * kV + v, hn::Zero(d));
  }
  // Adds the dimensions [i0, i1) of the query qv into part.
  auto dims = [&](const float* qv, int64_t i0, int64_t i1, Acc& part) HWY_ATTR {
    for (int64_t i = i0; i < i1; ++i) {
      if constexpr (kType != GgmlType::kQ8_0) {
        if (pf && static_cast<size_t>(i) * 64 < pf_bytes) PrefetchL2(pf + i * 64);
      }
      VecArray<D, kMaxV> kv;
      for (int v = 0; v < kV; ++v) kv.Set(v, LoadKeyLanes<kType>(d, tile, hd, i, v * kL));
      for (int g = 0; g < kG; ++g) {
        const V qi = hn::Set(d, qv[g * hd + i]);
        for (int v = 0; v < kV; ++v) part.Set(g * kV + v, hn::MulAdd(qi, kv.Get(v), part.Get(g * kV + v)));
      }
    }
  };
  if (pf) {
    const size_t spread = kType == GgmlType::kQ8_0 ? 0 : static_cast<size_t>(hd) * 64;
    for (size_t b = spread; b < pf_bytes; b += 64) PrefetchL2(pf + b);
  }
  if constexpr (kType == GgmlType::kQ8_0) {
    // Per 32-dimension block the integer dot product (exact in float as in int32: at most
    // 32 * 127 * 127 < 2^24), then times the query's block scale and the 16 positions'.
    const hn::Rebind<hwy::float16_t, D> dh;
    const auto* scales = reinterpret_cast<const hwy::float16_t*>(tile);
    const int64_t nb = hd / 32;
    for (int64_t b = 0; b < nb; ++b) {
      Acc part;
#if TLR_ATTN_VNNI
      if constexpr (kL == 16) {
        // 4 dimensions of the 16 positions per load, regrouped by position (vpermb) and made
        // unsigned (+128, undone by corr) for vpdpbusd against the query's 4 bytes.
        const int8_t* qs = reinterpret_cast<const int8_t*>(tile + nb * kKeyTile * 2) + b * 32 * kKeyTile;
        const __m512i perm = TransposeBytes4x16();
        const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
        __m512i isum[kG];
        for (int g = 0; g < kG; ++g) isum[g] = _mm512_set1_epi32(qq->corr[g * nb + b]);
        for (int64_t i = 0; i < 32; i += 4) {
          const __m512i raw = _mm512_loadu_si512(qs + i * kKeyTile);
          const __m512i ku = _mm512_xor_si512(_mm512_permutexvar_epi8(perm, raw), bias);
          for (int g = 0; g < kG; ++g) isum[g] = DpBroadcast(isum[g], ku, qq->qi + g * hd + b * 32 + i);
        }
        for (int g = 0; g < kG; ++g) part.Set(g, V{_mm512_cvtepi32_ps(isum[g])});
      } else
#endif
      {
        for (int g = 0; g < kG; ++g) {
          for (int v = 0; v < kV; ++v) part.Set(g * kV + v, hn::Zero(d));
        }
        dims(qq->qf, b * 32, b * 32 + 32, part);
      }
      for (int v = 0; v < kV; ++v) {
        const V sc = hn::PromoteTo(d, hn::LoadU(dh, scales + b * kKeyTile + v * kL));
        for (int g = 0; g < kG; ++g) {
          const V w = hn::Mul(part.Get(g * kV + v), hn::Set(d, qq->d[g * nb + b]));
          acc.Set(g * kV + v, hn::MulAdd(w, sc, acc.Get(g * kV + v)));
        }
      }
    }
  } else {
    (void)qq;
    dims(q, 0, hd, acc);
  }
  const V vs = hn::Set(d, scale);
  for (int g = 0; g < kG; ++g) {
    for (int v = 0; v < kV; ++v) hn::StoreU(hn::Mul(acc.Get(g * kV + v), vs), d, s + g * kChunk + v * kL);
  }
}

// exp(x) for x <= 0 (or -inf). With AVX-512: 2^(x log2 e) as 2^f (|f| <= 1/2, a degree-6
// polynomial, Cephes' exp2f coefficients: relative error 1.7e-7) times 2^n by vscalefps, 11
// instructions against Highway's Exp's ~20 (the softmax was a quarter of the kernel's time);
// below 2^-149 the result is 0, as exp's is.
template <class D>
HWY_INLINE hn::Vec<D> ExpNonPositive(D d, hn::Vec<D> x) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(d) == 16) {
    const __m512 t = _mm512_max_ps(_mm512_mul_ps(x.raw, _mm512_set1_ps(1.44269504088896341f)), _mm512_set1_ps(-150.0f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return hn::Vec<D>{_mm512_scalef_ps(p, n)};
  }
#endif
  return hn::Exp(d, x);
}

// Software prefetch of rows [j, j + n) of a cache view into L2.
HWY_INLINE void PrefetchRows(const KvView& v, int64_t j, int64_t n) {
  const uint8_t* r = v.Row(j);
  for (size_t b = 0; b < static_cast<size_t>(n) * v.row_bytes; b += 64) PrefetchL2(r + b);
}

// Online softmax over one chunk of scores (s[g * kChunk + t], t < len; lanes up to the next
// whole tile hold finite garbage): updates the running max m and sum l, returns in alpha
// the factor the output so far must be scaled by, and turns s into the weights p (0 past len).
template <int kG, class D>
HWY_INLINE void ChunkSoftmax(D d, int64_t len, float* s, float* m, float* l, float* alpha) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int g = 0; g < kG; ++g) {
    float* sg = s + g * kChunk;
    auto vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
    int64_t t = 0;
    for (; t + L <= len; t += L) vmax = hn::Max(vmax, hn::LoadU(d, sg + t));
    if (t < len) {
      vmax = hn::Max(vmax, hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(len - t)), hn::LoadU(d, sg + t), vmax));
    }
    const float m_new = std::max(m[g], hn::GetLane(hn::MaxOfLanes(d, vmax)));
    alpha[g] = m[g] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m[g] - m_new);
    const auto vm = hn::Set(d, m_new);
    auto vsum = hn::Zero(d);
    for (t = 0; t < len; t += L) {
      auto e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, sg + t), vm));
      if (t + L > len) e = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(len - t)), e);
      hn::StoreU(e, d, sg + t);
      vsum = hn::Add(vsum, e);
    }
    l[g] = l[g] * alpha[g] + hn::GetLane(hn::SumOfLanes(d, vsum));
    m[g] = m_new;
  }
}

#if TLR_ATTN_VNNI
// acc + per-lane dot of the 2 int16 of each lane of v with the 2 int16 at w (broadcast).
HWY_INLINE __m512i DpWordsBroadcast(__m512i acc, __m512i v, const int16_t* w) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(v), "m"(*reinterpret_cast<const int32_t*>(w)));
  return acc;
}

// ChunkValues for q8_0 values with AVX-512 VNNI, one 32-value block b at a time: each
// weight times the position's block scale, p_t * d_t, is rounded to an int16 on a scale of
// the chunk's largest block scale (p <= 1; kQ8WeightSteps steps), and vpdpwssd adds two
// positions' int16 weight times int8 value products per lane, exactly, in int32. A
// weight's error is at most half a step (f16 storage of the values already rounds each by
// up to 1/2048 of itself; q8_0 by 1/254 of its block's largest): 14 instructions per
// position for 7 heads of 64 dimensions instead of 28 multiply-adds plus conversions.
template <int kG>
HWY_INLINE void ChunkValuesQ8Vnni(const float* p, const float* alpha, const KvView& v, int64_t j0, int64_t len,
                                  int64_t hd, bool first, int64_t next, float* out) {
  const hn::CappedTag<float, 16> d;
  const int64_t even = (len + 1) / 2 * 2;
  HWY_ALIGN float dv[kChunk];
  HWY_ALIGN int16_t w[kG][kChunk + 16];
  // Lanes of the two accumulators (dimensions 8k..8k+3 and 8k+4..8k+7 of 128-bit lane k)
  // back to dimension order.
  alignas(64) static constexpr int32_t kLo[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
  alignas(64) static constexpr int32_t kHi[16] = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
  const __m512i idx_lo = _mm512_load_si512(kLo), idx_hi = _mm512_load_si512(kHi);
  const __m512i lane_index = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t b = 0; b < hd / 32; ++b) {
    const size_t off = static_cast<size_t>(b) * sizeof(BlockQ8_0);
    // The block's scales of 16 positions by one gather (rows are row_bytes apart).
    const int64_t padded = (len + 15) / 16 * 16;
    const uint8_t* scales = v.Row(j0) + off;
    for (int64_t t = 0; t < padded; t += 16) {
      const __mmask16 m = static_cast<__mmask16>(len - t >= 16 ? 0xFFFF : (1u << (len - t)) - 1);
      const __m512i at = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(t)), lane_index),
                                            _mm512_set1_epi32(static_cast<int32_t>(v.row_bytes)));
      const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, at, scales, 1);
      _mm512_store_ps(dv + t, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
    }
    // The largest block scale: p <= 1, so every p * d is at most this.
    auto vtop = hn::Zero(d);
    for (int64_t t = 0; t < padded; t += 16) vtop = hn::Max(vtop, hn::Abs(hn::Load(d, dv + t)));
    const float top = hn::GetLane(hn::MaxOfLanes(d, vtop));
    const float step = top / kQ8WeightSteps;
    const auto inv = hn::Set(d, top > 0.0f ? kQ8WeightSteps / top : 0.0f);
    for (int g = 0; g < kG; ++g) {
      const float* pg = p + g * kChunk;
      // p is 0 past len (ChunkSoftmax), so is dv: whole vectors, |p * d * inv| <= 32767.
      for (int64_t t = 0; t < even; t += 16) {
        const __m512i q = _mm512_cvtps_epi32(hn::Mul(hn::Mul(hn::Load(d, pg + t), hn::Load(d, dv + t)), inv).raw);
        _mm256_store_si256(reinterpret_cast<__m256i*>(w[g] + t), _mm512_cvtsepi32_epi16(q));
      }
    }
    __m512i lo[kG], hi[kG];
    for (int g = 0; g < kG; ++g) lo[g] = hi[g] = _mm512_setzero_si512();
    for (int64_t t = 0; t < even; t += 2) {
      if (b == 0 && t < next) PrefetchRows(v, j0 + kChunk + t, std::min<int64_t>(2, next - t));
      const int8_t* r0 = reinterpret_cast<const int8_t*>(v.Row(j0 + t) + off + 2);
      const int8_t* r1 = t + 1 < len ? reinterpret_cast<const int8_t*>(v.Row(j0 + t + 1) + off + 2) : r0;
      const __m512i a = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0)));
      const __m512i c = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1)));
      const __m512i pl = _mm512_unpacklo_epi16(a, c), ph = _mm512_unpackhi_epi16(a, c);
      for (int g = 0; g < kG; ++g) {
        lo[g] = DpWordsBroadcast(lo[g], pl, w[g] + t);
        hi[g] = DpWordsBroadcast(hi[g], ph, w[g] + t);
      }
    }
    for (int g = 0; g < kG; ++g) {
      const __m512 fl = _mm512_cvtepi32_ps(lo[g]), fh = _mm512_cvtepi32_ps(hi[g]);
      const auto sg = hn::Set(d, step);
      float* o = out + g * hd + b * 32;
      for (int k = 0; k < 2; ++k) {
        const hn::Vec<decltype(d)> x{_mm512_permutex2var_ps(fl, k == 0 ? idx_lo : idx_hi, fh)};
        const auto prev = first ? hn::Zero(d) : hn::Mul(hn::LoadU(d, o + 16 * k), hn::Set(d, alpha[g]));
        hn::StoreU(hn::MulAdd(x, sg, prev), d, o + 16 * k);
      }
    }
  }
}
#endif

// ChunkValues for the heads [g0, g0 + kGB), kS vectors of the head dimension at a time.
template <GgmlType kType, int kGB, int kS, class D>
HWY_INLINE void ValuesBlock(D d, const float* p, const float* alpha, const KvView& v, int64_t j0, int64_t len,
                            int64_t hd, bool first, int64_t next, int g0, float* out) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < hd; i += kS * L) {
    VecArray<D, kGB * kS> o;  // [g * kS + k]
    for (int g = 0; g < kGB; ++g) {
      const float* og = out + (g0 + g) * hd + i;
      for (int k = 0; k < kS; ++k) {
        o.Set(g * kS + k, first ? hn::Zero(d) : hn::Mul(hn::LoadU(d, og + k * L), hn::Set(d, alpha[g0 + g])));
      }
    }
    const bool prefetch = i == 0 && g0 == 0;
    for (int64_t t = 0; t < len; ++t) {
      if (prefetch && t < next) PrefetchRows(v, j0 + kChunk + t, 1);
      const uint8_t* row = v.Row(j0 + t);
      VecArray<D, kS> vv;
      for (int k = 0; k < kS; ++k) vv.Set(k, LoadRow<kType>(d, row, i + k * L));
      for (int g = 0; g < kGB; ++g) {
        const float* w = p + (g0 + g) * kChunk + t;
        for (int k = 0; k < kS; ++k) o.Set(g * kS + k, MulAddBroadcast(d, w, vv.Get(k), o.Get(g * kS + k)));
      }
    }
    for (int g = 0; g < kGB; ++g) {
      for (int k = 0; k < kS; ++k) hn::StoreU(o.Get(g * kS + k), d, out + (g0 + g) * hd + i + k * L);
    }
  }
}

// out_g = alpha_g * out_g + sum_t p[g * kChunk + t] * V_{j0 + t}, kS vectors of the head
// dimension at a time (the chunk's V rows stay in L1/L2 across passes). `first`: out holds
// no earlier chunk (it may be uninitialised). kS = 4 (AVX-512 and a head_dim that is a
// multiple of 64: 128 bytes of f16, two whole cache lines) takes the heads 4 at a time (16
// accumulators): with 2 vectors per pass over all heads, the first pass read one line of
// each row and the second the other, and the hardware prefetcher, which follows the first
// pass, fetched every other line. attention_bench f16, 24 layers, 2 threads, from memory in
// huge pages, alternated steps on Zen 4: median 1.52 -> 1.40 ms (with L2 prefetches 1.33);
// head_dim 128 (qwen2.5-1.5b's shape), 3.37 -> 2.95 ms with both. The same sums in the
// same order: bit-identical.
template <GgmlType kType, int kG, int kS, class D>
HWY_INLINE void ChunkValues(D d, const float* p, const float* alpha, const KvView& v, int64_t j0, int64_t len,
                            int64_t hd, bool first, int64_t next, float* out) {
#if TLR_ATTN_VNNI
  if constexpr (kType == GgmlType::kQ8_0 && hn::MaxLanes(d) == 16) {
    return ChunkValuesQ8Vnni<kG>(p, alpha, v, j0, len, hd, first, next, out);
  }
#endif
  if constexpr (kS >= 4 && kG > 4) {
    ValuesBlock<kType, 4, kS>(d, p, alpha, v, j0, len, hd, first, next, 0, out);
    ValuesBlock<kType, kG - 4, kS>(d, p, alpha, v, j0, len, hd, first, next, 4, out);
  } else {
    ValuesBlock<kType, kG, kS>(d, p, alpha, v, j0, len, hd, first, next, 0, out);
  }
}

// kG query heads (q and out: kG consecutive head vectors) against one KV head.
template <GgmlType kType, int kG, class D>
void AttendGroup(D d, const float* q, const KvView& k, const KvView& v, int64_t first, int64_t n_kv, int64_t hd,
                 float scale, float* out) {
  float m[kG], l[kG], alpha[kG];
  for (int g = 0; g < kG; ++g) {
    m[g] = -std::numeric_limits<float>::infinity();
    l[g] = 0.0f;
  }
  // Two or four vectors per value pass where the registers allow (AVX-512 has 32) and
  // head_dim does (ChunkValues).
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const bool wide = hn::MaxLanes(d) >= 16 && (hd / L) % 2 == 0;
  const bool wider = wide && (hd / L) % 4 == 0;
  HWY_ALIGN float s[kG * kChunk];
  // q8_0 keys: the query rounded once for all positions.
  QueryQ8 qq_storage;
  QueryQ8* qq = nullptr;
  if constexpr (kType == GgmlType::kQ8_0) {
    qq = &qq_storage;
    const int64_t nb = hd / 32;
    const int64_t L = static_cast<int64_t>(hn::Lanes(d));
    for (int g = 0; g < kG; ++g) {
      for (int64_t b = 0; b < nb; ++b) {
        // QuantizeQueryQ8's rounding in vectors (the same operations: |x| max, 127 / amax,
        // x * that rounded to nearest even); blocks with a zero, NaN or infinity go to it.
        const float* x = q + g * hd + b * 32;
        float* qf = qq->qf + g * hd + b * 32;
        auto vmax = hn::Zero(d);
        auto finite = hn::FirstN(d, hn::Lanes(d));
        for (int64_t i = 0; i < 32; i += L) {
          const auto xi = hn::LoadU(d, x + i);
          finite = hn::And(finite, hn::IsFinite(xi));
          vmax = hn::Max(vmax, hn::Abs(xi));
        }
        const float amax = hn::GetLane(hn::MaxOfLanes(d, vmax));
        if (hn::AllTrue(d, finite) && amax > 0.0f) {
          qq->d[g * nb + b] = amax / 127.0f;
          const auto id = hn::Set(d, 127.0f / amax);
          for (int64_t i = 0; i < 32; i += L) {
            hn::StoreU(hn::ConvertTo(d, hn::NearestInt(hn::Mul(hn::LoadU(d, x + i), id))), d, qf + i);
          }
        } else {
          int8_t qs[32];
          qq->d[g * nb + b] = QuantizeQueryQ8(x, qs);
          for (int i = 0; i < 32; ++i) qf[i] = qs[i];
        }
        int8_t qi[32];
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) {
          qi[i] = static_cast<int8_t>(qf[i]);
          sum += qi[i];
        }
#if TLR_ATTN_VNNI
        std::memcpy(qq->qi + g * hd + b * 32, qi, 32);
        qq->corr[g * nb + b] = -128 * sum;
#else
        (void)sum;
#endif
      }
    }
  }
  // A sliding window starts at the chunk holding `first`; its earlier positions score -inf.
  const int64_t start = first / kChunk * kChunk;
  for (int64_t j0 = start; j0 < n_kv; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n_kv - j0);
    for (int64_t t = 0; t < len; t += kKeyTile) {
      // The next chunk's keys come from memory while this one's are scored (at long contexts
      // the cache is far larger than the caches: each token streams all of it); its values
      // while this one's are added (ChunkValues).
      const uint8_t* next_k = j0 + kChunk + t < n_kv ? k.Tile(j0 + kChunk + t) : nullptr;
      TileScores<kType, kG>(d, q, qq, hd, k.Tile(j0 + t), scale, s + t, next_k, kKeyTile * k.row_bytes);
    }
    for (int64_t t = 0; t < first - j0; ++t) {
      for (int g = 0; g < kG; ++g) s[g * kChunk + t] = -std::numeric_limits<float>::infinity();
    }
    ChunkSoftmax<kG>(d, len, s, m, l, alpha);
    // The next chunk's values are prefetched while this one's are added (its keys while
    // this one's are scored), spread over the loop rather than in one burst.
    const int64_t next = std::max<int64_t>(0, std::min(kChunk, n_kv - j0 - kChunk));
    if (wider) {
      ChunkValues<kType, kG, 4>(d, s, alpha, v, j0, len, hd, j0 == start, next, out);
    } else if (wide) {
      ChunkValues<kType, kG, 2>(d, s, alpha, v, j0, len, hd, j0 == start, next, out);
    } else {
      ChunkValues<kType, kG, 1>(d, s, alpha, v, j0, len, hd, j0 == start, next, out);
    }
  }
  for (int g = 0; g < kG; ++g) {
    const auto inv = hn::Set(d, 1.0f / l[g]);
    for (int64_t i = 0; i < hd; i += L) hn::StoreU(hn::Mul(hn::LoadU(d, out + g * hd + i), inv), d, out + g * hd + i);
  }
}

template <GgmlType kType, class D>
void AttendHeads(D d, const float* q, int64_t n_q, const KvView& k, const KvView& v, int64_t first, int64_t n_kv,
                 int64_t hd, float scale, float* out) {
  for (int64_t g0 = 0; g0 < n_q; g0 += kMaxGroup) {
    const float* qg = q + g0 * hd;
    float* og = out + g0 * hd;
    switch (std::min<int64_t>(kMaxGroup, n_q - g0)) {
#define TLR_CASE(G) \
  case G: AttendGroup<kType, G>(d, qg, k, v, first, n_kv, hd, scale, og); break;
      TLR_CASE(1)
      TLR_CASE(2)
      TLR_CASE(3)
      TLR_CASE(4)
      TLR_CASE(5)
      TLR_CASE(6)
      TLR_CASE(7)
      TLR_CASE(8)
#undef TLR_CASE
    }
  }
}

template <class D>
void AttendTyped(D d, const float* q, int64_t n_q, const KvView& k, const KvView& v, int64_t first, int64_t n_kv,
                 int64_t hd, float scale, float* out) {
  switch (k.type) {
    case GgmlType::kF32: return AttendHeads<GgmlType::kF32>(d, q, n_q, k, v, first, n_kv, hd, scale, out);
    case GgmlType::kF16: return AttendHeads<GgmlType::kF16>(d, q, n_q, k, v, first, n_kv, hd, scale, out);
    case GgmlType::kQ8_0: return AttendHeads<GgmlType::kQ8_0>(d, q, n_q, k, v, first, n_kv, hd, scale, out);
    default: return;
  }
}

void AttentionImpl(const float* q, int64_t n_q, const KvView& k, const KvView& v, int64_t first, int64_t n_kv,
                   int64_t hd, float scale, float* out) {
  // Full vectors (up to 16 lanes) when head_dim allows; one lane at a time otherwise (head
  // dims that are not a multiple of 16 only occur in toy models).
  if (hd % 16 == 0) {
    AttendTyped(hn::CappedTag<float, 16>(), q, n_q, k, v, first, n_kv, hd, scale, out);
  } else {
    AttendTyped(hn::CappedTag<float, 1>(), q, n_q, k, v, first, n_kv, hd, scale, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr {
HWY_EXPORT(AttentionImpl);

Status CheckKvType(GgmlType type, int64_t head_dim) {
  if (type == GgmlType::kF32 || type == GgmlType::kF16) return Status::Ok();
  if (type == GgmlType::kQ8_0) {
    if (head_dim % 32 == 0 && head_dim <= kMaxQ8HeadDim) return Status::Ok();
    return Status::Error("a q8_0 KV cache needs a head dimension that is a multiple of 32 and at most " +
                         std::to_string(kMaxQ8HeadDim) + " (this model's is " + std::to_string(head_dim) +
                         "); use f16");
  }
  return Status::Error("KV cache type " + std::string(GgmlTraits(type).name) + " is not supported (f32, f16, q8_0)");
}

float QuantizeQueryQ8(const float* x, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < 32; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite || amax == 0.0f) {
    std::fill(q, q + 32, int8_t{0});
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float id = 127.0f / amax;
  for (int i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  return amax / 127.0f;
}

void AttentionQuery(GgmlType type, const float* q, int64_t hd, float* out) {
  if (type != GgmlType::kQ8_0) {
    std::copy(q, q + hd, out);
    return;
  }
  for (int64_t b = 0; b < hd / 32; ++b) {
    int8_t qi[32];
    const float d = QuantizeQueryQ8(q + b * 32, qi);
    for (int i = 0; i < 32; ++i) out[b * 32 + i] = d * qi[i];
  }
}

size_t KvRowBytes(GgmlType type, int64_t head_dim) {
  const auto& tr = GgmlTraits(type);
  return static_cast<size_t>(head_dim / tr.block_size) * tr.type_size;
}

void StoreKey(GgmlType type, uint8_t* base, size_t row_bytes, int64_t hd, int64_t pos, const float* k) {
  uint8_t* tile = base + static_cast<size_t>(pos / kKeyTile * kKeyTile) * row_bytes;
  const int64_t t = pos % kKeyTile;
  switch (type) {
    case GgmlType::kF32:
      for (int64_t i = 0; i < hd; ++i) reinterpret_cast<float*>(tile)[i * kKeyTile + t] = k[i];
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < hd; ++i) reinterpret_cast<uint16_t*>(tile)[i * kKeyTile + t] = F32ToF16(k[i]);
      return;
    case GgmlType::kQ8_0: {
      int8_t* qs = reinterpret_cast<int8_t*>(tile + (hd / 32) * kKeyTile * 2);
      for (int64_t b = 0; b < hd / 32; ++b) {
        BlockQ8_0 block;
        (void)Quantize(GgmlType::kQ8_0, k + b * 32, &block, 32);
        reinterpret_cast<uint16_t*>(tile)[b * kKeyTile + t] = block.d;
        for (int64_t i = 0; i < 32; ++i) qs[(b * 32 + i) * kKeyTile + t] = block.qs[i];
      }
      return;
    }
    default:
      return;
  }
}

void LoadKey(const KvView& keys, int64_t hd, int64_t pos, float* out) {
  const uint8_t* tile = keys.Tile(pos);
  const int64_t t = pos % kKeyTile;
  switch (keys.type) {
    case GgmlType::kF32:
      for (int64_t i = 0; i < hd; ++i) out[i] = reinterpret_cast<const float*>(tile)[i * kKeyTile + t];
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < hd; ++i) out[i] = F16ToF32(reinterpret_cast<const uint16_t*>(tile)[i * kKeyTile + t]);
      return;
    case GgmlType::kQ8_0: {
      const int8_t* qs = reinterpret_cast<const int8_t*>(tile + (hd / 32) * kKeyTile * 2);
      for (int64_t b = 0; b < hd / 32; ++b) {
        const float d = F16ToF32(reinterpret_cast<const uint16_t*>(tile)[b * kKeyTile + t]);
        for (int64_t i = 0; i < 32; ++i) out[b * 32 + i] = qs[(b * 32 + i) * kKeyTile + t] * d;
      }
      return;
    }
    default:
      return;
  }
}

void StoreValue(GgmlType type, uint8_t* base, size_t row_bytes, int64_t hd, int64_t pos, const float* v) {
  (void)Quantize(type, v, base + static_cast<size_t>(pos) * row_bytes, hd);
}

void LoadValue(const KvView& values, int64_t hd, int64_t pos, float* out) {
  (void)Dequantize(values.type, values.Row(pos), out, hd);
}

void Attention(const float* q, int64_t n_q, const KvView& k, const KvView& v, int64_t n_kv, int64_t head_dim,
               float scale, float* out, int64_t first) {
  first = std::max<int64_t>(first, 0);
  if (n_kv <= first) {
    std::fill(out, out + n_q * head_dim, 0.0f);
    return;
  }
  HWY_DYNAMIC_DISPATCH(AttentionImpl)(q, n_q, k, v, first, n_kv, head_dim, scale, out);
}

}  // namespace tlr
#endif  // HWY_ONCE
