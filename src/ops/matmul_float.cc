// MatMul kernels for float weights (ops layer): F32, F16 and BF16 rows times float
// activations, compiled for every SIMD target. See matmul_kernels.h.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

#include "ops/matmul_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_float.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "ops/matmul_quant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows per register block and accumulation chains per (row, token) pair. With one chain
// a pair's multiply-adds wait on each other (4 cycles each): AVX-512's 16 lanes stay ahead
// of memory that way (Zen 5: F16 decode 94% of the roofline; two chains measured no faster
// there and halved prefill), AVX2's 8 lanes did not (Zen 3: F16 decode 74%, BF16 80%, from
// L2 one thread read F16 at 14 GB/s). So below AVX-512 every pair sums in two chains, and
// the register block is what leaves room for them: 32 registers (AVX-512: 4 rows x 6 tokens
// x 1 chain; NEON/SVE: 2 x 4 x 2), 16 on AVX2 (1 x 4 x 2). AVX-512 took 6 tokens over 4 once
// F16/BF16 prefill ran on widened rows (WidenedRows; Xeon, qwen2.5-0.5b F16 pp128, 2 threads,
// alternated: 253-255 -> 255-265 tok/s; 8 tokens: 233-236, 3 x 8 and 2 x 12 far slower).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kFloatRows = 4;
constexpr int kFloatTokens = 6;
constexpr int kFloatChains = 1;
#elif HWY_ARCH_X86
constexpr int kFloatRows = 1;
constexpr int kFloatTokens = 4;
constexpr int kFloatChains = 2;
#else
constexpr int kFloatRows = 2;
constexpr int kFloatTokens = 4;
constexpr int kFloatChains = 2;
#endif

constexpr int64_t kFloatPrefetchBytes = 2560;
// Decode prefetches F16 and BF16 rows too below AVX-512 (Zen 3, qwen2.5-0.5b F16, tg at 73%
// of the interleaved roofline without, 94-98% with); on Zen 5 it slowed F16 (106% -> 96%), and
// on Zen 4 too (matmul_bench 4864x896, alternated: F16 102% -> 94% of the read pass, BF16
// 101% -> 86%). On Intel's 512-bit hosts it pays: Emerald Rapids, matmul_bench 4864x896 f16,
// alternated 3 rounds, 1 thread 55-61% -> 80-86% of the read probe, 2 threads 56-62% -> 84-89%.
// So at 512 bits it follows kernels::prefetch_half_floats (false on AMD, set in matmul.cc).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kFloatPrefetchF32Only = true;
#else
constexpr bool kFloatPrefetchF32Only = false;
#endif

template <GgmlType kType, class D>
HWY_INLINE hn::Vec<D> LoadWeights(D df, const uint8_t* row, int64_t i) {
  if constexpr (kType == GgmlType::kF32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (kType == GgmlType::kF16) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i));
  } else {
    const hn::Rebind<hwy::bfloat16_t, D> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(row) + i));
  }
}

template <GgmlType kType>
HWY_INLINE float WeightAt(const uint8_t* row, int64_t i) {
  if constexpr (kType == GgmlType::kF32) return reinterpret_cast<const float*>(row)[i];
  if constexpr (kType == GgmlType::kF16) return F16Table()[reinterpret_cast<const uint16_t*>(row)[i]];
  return Bf16ToF32(reinterpret_cast<const uint16_t*>(row)[i]);
}

// sum + w[0] * x[0] + ... in order, out of line: one function for every weight type, so the
// compiler's choice to fuse a multiply and an add (-ffp-contract) is the same for a row read
// as F16 and for the same row widened to F32 (WidenedRows' results must be the same bits).
HWY_NOINLINE float AddProducts(float sum, const float* w, const float* x, int64_t n) {
  for (int64_t k = 0; k < n; ++k) sum += w[k] * x[k];
  return sum;
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The lane sums of 16 vectors at once, each the same bits as GetLane(SumOfLanes(v[i])) (the
// _mm512_reduce_add_ps tree: lane l + lane l+8, then + 4, + 2, + 1): one shuffle-and-add step
// per level over pairs of vectors, 15 adds and 30 shuffles for 16 sums where one at a time
// takes 4 shuffles, 4 adds and a broadcast each. Addition is commutative bit for bit, so only
// the pairs matter, not which side each is on. sums[i] is v[i]'s.
template <int kCount, class Get>
HWY_INLINE void SumsOfLanes16(const Get& get, float* sums) {
  const auto v = [&](int k) HWY_ATTR { return k < kCount ? get(k) : _mm512_setzero_ps(); };
  __m512 b[8], c[4], d[2];
  for (int j = 0; j < 8; ++j) {  // lanes l and l+8: [v2j low half | v2j+1 low half] + high halves
    b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v(2 * j), v(2 * j + 1), 0x44),
                         _mm512_shuffle_f32x4(v(2 * j), v(2 * j + 1), 0xEE));
  }
  for (int j = 0; j < 4; ++j) {  // then l and l+4: quarter q of c[j] holds v[4j + q]
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], 0xDD));
  }
  for (int j = 0; j < 2; ++j) {  // then l and l+2, inside each quarter
    d[j] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * j], c[2 * j + 1], 0x44),
                         _mm512_shuffle_ps(c[2 * j], c[2 * j + 1], 0xEE));
  }
  // then l and l+1: lane 4q + m of e is v[4m + q]'s sum
  const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
  // lane 4q + m to sums[4m + q]: a 4x4 transpose of the lanes
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(sums, _mm512_permutexvar_ps(order, e));
}
constexpr bool kTransposedSums = true;
#else
constexpr bool kTransposedSums = false;
#endif

// NR weight rows times NT tokens' float activations, out[t * NR + r]. Each (row, token) pair
// has its own accumulator and the same sequence of operations whatever NR and NT are, so a
// result does not depend on the batch (decode and prefill agree bit for bit).
// Columns [i0, i1) of rows of n: a long row is taken in chunks (i0 and, but for the last chunk,
// i1 multiples of C vectors), the accumulators carried between them in `carry` (NR * NT * C
// vectors; unused for a whole row): the same operations in the same order as one pass. out is
// written by the chunk that ends at n.
template <GgmlType kType, int NR, int NT>
HWY_INLINE void DotRowsF(const uint8_t* const* rows, int64_t i0, int64_t i1, int64_t n, const float* const* x,
                         float* carry, float* out) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  using V = hn::Vec<decltype(df)>;
  constexpr int C = kFloatChains;
  VecArray<decltype(df), NR * NT * C> acc;  // [(r * NT + t) * C + chain]
  // Unrolled: as a loop GCC turns it into a memset of the array in memory (rep stos, 5% of a
  // 4864x256 prefill) and then reads the registers back from there.
#pragma GCC unroll 64
  for (int k = 0; k < NR * NT * C; ++k) acc.Set(k, i0 == 0 ? hn::Zero(df) : hn::Load(df, carry + k * L));
  int64_t i = i0;
  constexpr size_t kBytes = kType == GgmlType::kF32 ? 4 : 2;
  const bool half_prefetch = kernels::prefetch_half_floats.load(std::memory_order_relaxed);
  // Vector j of the row goes to chain j % C; the chains are added at the end. The order
  // depends only on n, so every (row, token) pair sums the same way in any block.
  const auto step = [&](int c) HWY_ATTR {
    // Decode: software prefetch as in the quantized kernels (F32, matmul_bench 4864x896, 2
    // threads, alternated: 83% -> 100% of the read probe; F16/BF16 see kFloatPrefetchF32Only).
    if constexpr (NT == 1) {
      if (kType == GgmlType::kF32 || !kFloatPrefetchF32Only || half_prefetch) {
        for (int r = 0; r < NR; ++r) hwy::Prefetch(rows[r] + i * kBytes + kFloatPrefetchBytes);
      }
    }
    VecArray<decltype(df), NR> wv;
    for (int r = 0; r < NR; ++r) wv.Set(r, LoadWeights<kType>(df, rows[r], i));
    for (int t = 0; t < NT; ++t) {
      const V xv = hn::LoadU(df, x[t] + i);
      for (int r = 0; r < NR; ++r) {
        const int k = (r * NT + t) * C + c;
        acc.Set(k, hn::MulAdd(wv.Get(r), xv, acc.Get(k)));
      }
    }
    i += static_cast<int64_t>(L);
  };
  while (i + static_cast<int64_t>(C * L) <= i1) {
    for (int c = 0; c < C; ++c) step(c);
  }
  for (int c = 0; i + static_cast<int64_t>(L) <= i1; ++c) step(c);
  if (i1 < n) {
#pragma GCC unroll 64
    for (int k = 0; k < NR * NT * C; ++k) hn::Store(acc.Get(k), df, carry + k * L);
    return;
  }
  // A batch's register block sums its lanes 16 pairs at a time where the target can (the same
  // bits as one at a time, which decode keeps).
  constexpr int kPairs = NR * NT;
  [[maybe_unused]] float block_sums[(kPairs + 15) / 16 * 16];
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kTransposedSums && C == 1 && kPairs >= 8) {
    SumsOfLanes16<kPairs < 16 ? kPairs : 16>([&](int k) HWY_ATTR { return acc.Get(k).raw; }, block_sums);
    if constexpr (kPairs > 16) {
      SumsOfLanes16<kPairs - 16>([&](int k) HWY_ATTR { return acc.Get(16 + k).raw; }, block_sums + 16);
    }
  }
#endif
  for (int r = 0; r < NR; ++r) {
    for (int t = 0; t < NT; ++t) {
      float sum;
      if constexpr (kTransposedSums && C == 1 && kPairs >= 8) {
        sum = block_sums[r * NT + t];
      } else {
        V total = acc.Get((r * NT + t) * C);
        for (int c = 1; c < C; ++c) total = hn::Add(total, acc.Get((r * NT + t) * C + c));
        sum = hn::GetLane(hn::SumOfLanes(df, total));
      }
      if (i < n) {  // the tail (fewer than L elements)
        float wt[HWY_MAX_BYTES / sizeof(float)];
        for (int64_t k = i; k < n; ++k) wt[k - i] = WeightAt<kType>(rows[r], k);
        sum = AddProducts(sum, wt, x[t] + i, n - i);
      }
      out[t * NR + r] = sum;
    }
  }
}

// nt (1..NT) tokens: the register block compiled for exactly that many.
template <GgmlType kType, int NR, int NT = kFloatTokens>
HWY_INLINE void DotRowsFTokens(const uint8_t* const* rows, int64_t i0, int64_t i1, int64_t n, const float* const* x,
                               int nt, float* carry, float* out) {
  if constexpr (NT == 1) {
    return DotRowsF<kType, NR, 1>(rows, i0, i1, n, x, carry, out);
  } else {
    if (nt == NT) return DotRowsF<kType, NR, NT>(rows, i0, i1, n, x, carry, out);
    return DotRowsFTokens<kType, NR, NT - 1>(rows, i0, i1, n, x, nt, carry, out);
  }
}

// Columns per chunk for a batch over rows longer than twice this (FFN down projections), and
// as long as it leaves room in L1 for the activations of a block of tokens and the carried
// accumulators. matmul_bench --tokens 128 f16, one thread, 896x4864: 78 GFLOP/s in one pass,
// 88 in chunks of 256 columns, 94-95 in chunks of 512 or 1024; 4864x896: 113 in one pass, 115
// in chunks of 448 and 82 in chunks of 224 (carrying costs more than it saves on short rows).
constexpr int64_t kFloatChunkCols = 512;

// Decode in S streams: rows r, r + q, r + 2q, ... (q = a 1/S of the range) together, each in
// its own accumulator with DotRowsF's operations in DotRowsF's order (the same bits as one row
// at a time). One stream left F16 and BF16 decode at 79-86% of the read probe on Intel hosts
// (F32 88%): the four far-apart streams keep more DRAM pages open at once (Emerald Rapids,
// matmul_bench 4864x896, one thread, alternated: f16 79-80% -> 98-101%, bf16 79-80% -> 98-100%,
// f32 88-89% -> 104-107%; 2 threads f16 83% -> 96-97%; 8 streams no better than 4; 4 adjacent
// rows 64%). Not measured on AMD hosts, which keep one (kernels::float_decode_streams).
constexpr int kFloatDecodeStreams = 4;

template <GgmlType kType, int S>
void DecodeStreams(const WeightView& w, const MatMulInput& in, float* y, int64_t r0, int64_t r1) {
  const int64_t n = in.n_cols;
  const int64_t q = (r1 - r0) / S;
  const float* xs[1] = {in.x};
  for (int64_t r = r0; r < r0 + q; ++r) {
    const uint8_t* rows[S];
    for (int k = 0; k < S; ++k) rows[k] = w.Row(r + k * q);
    float out[S];
    DotRowsF<kType, S, 1>(rows, 0, n, n, xs, nullptr, out);
    for (int k = 0; k < S; ++k) y[r + k * q] = out[k];
  }
  for (int64_t r = r0 + S * q; r < r1; ++r) {
    const uint8_t* rows[1] = {w.Row(r)};
    float out[1];
    DotRowsF<kType, 1, 1>(rows, 0, n, n, xs, nullptr, out);
    y[r] = out[0];
  }
}

// Blocks of 16 rows outside (they stay in L1/L2 while every token uses them), register blocks
// of kFloatRows rows x kFloatTokens tokens inside. A batch over long rows goes a chunk of
// columns at a time inside each block of tokens, so the block's activations stay in L1 while
// the 16 rows' register blocks run over them (the accumulators wait in `carry`, in L1 too).
template <GgmlType kType>
void Rows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  constexpr int64_t kRowBlock = 16;
  const hn::ScalableTag<float> df;
  const auto L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t n = in.n_cols;
  const int64_t group = kFloatChains * L;
  const int64_t kc = in.n_tokens == 1 || n <= 2 * kFloatChunkCols ? n : std::max(group, kFloatChunkCols / group * group);
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  // Per thread, sized once: no allocation per call once warm.
  thread_local std::unique_ptr<float[], Free> carry_buf;
  float* carry = nullptr;
  if (kc < n) {
    if (!carry_buf) {
      carry_buf.reset(static_cast<float*>(::operator new[](
          static_cast<size_t>(kRowBlock * kFloatTokens * group) * sizeof(float), std::align_val_t(64))));
    }
    carry = carry_buf.get();
  }
  if (in.n_tokens == 1 && r1 - r0 >= 16 * kFloatDecodeStreams &&
      kernels::float_decode_streams.load(std::memory_order_relaxed) > 1) {
    return DecodeStreams<kType, kFloatDecodeStreams>(w, in, y, r0, r1);
  }
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    for (int64_t t0 = 0; t0 < in.n_tokens; t0 += kFloatTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kFloatTokens, in.n_tokens - t0));
      const float* xs[kFloatTokens];
      for (int t = 0; t < nt; ++t) xs[t] = in.x + (t0 + t) * in.ld;
      for (int64_t k0 = 0; k0 < n;) {
        const int64_t k1 = n - k0 > kc ? k0 + kc : n;
        for (int64_t r = rb; r < re;) {
          // One token (decode) streams one row at a time: a single sequential read of the
          // matrix is what the prefetchers handle best, and memory bounds decode anyway.
          const int nr = nt == 1 ? 1 : static_cast<int>(std::min<int64_t>(kFloatRows, re - r));
          const uint8_t* rows[kFloatRows];
          for (int k = 0; k < nr; ++k) rows[k] = w.Row(r + k);
          // Row r's carried accumulators start at row slot r - rb (a block of nr rows uses nr slots).
          float* c = carry ? carry + (r - rb) * kFloatTokens * group : nullptr;
          float out[kFloatTokens * kFloatRows];  // every entry read below is written
          const bool block = nr == kFloatRows && nr > 1;
          if (block) {
            DotRowsFTokens<kType, kFloatRows>(rows, k0, k1, n, xs, nt, c, out);
          } else {
            for (int k = 0; k < nr; ++k) {
              DotRowsFTokens<kType, 1>(rows + k, k0, k1, n, xs, nt, c ? c + k * kFloatTokens * group : nullptr,
                                       out + k * kFloatTokens);
            }
          }
          if (k1 == n) {
            for (int t = 0; t < nt; ++t) {
              for (int k = 0; k < nr; ++k) y[(t0 + t) * ldy + r + k] = block ? out[t * kFloatRows + k] : out[k * kFloatTokens + t];
            }
          }
          r += nr;
        }
        k0 = k1;
      }
    }
  }
}

// Several tokens of F16 or BF16 weights: each block of rows is widened to F32 once into a
// buffer that stays in L1/L2, and the F32 kernel runs every token over it. Inside the register
// block a half-precision load costs a conversion on the ports the multiply-adds use (4 of 16
// multiply-adds' worth at 4 rows x 4 tokens); widened once per block, it is paid once for all
// the tokens (Xeon, qwen2.5-0.5b F16 pp128, 2 threads, alternated: 220 -> 244 tok/s at 4 x 4).
// The widening is exact and the F32 kernel sums in the same order, so results are bit-identical
// to converting in registers, which one token at a time still does (it reads each row once).
template <GgmlType kType>
void WidenedRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  constexpr int64_t kRowBlock = 16;
  using Half = std::conditional_t<kType == GgmlType::kF16, hwy::float16_t, hwy::bfloat16_t>;
  const hn::ScalableTag<float> df;
  const hn::Rebind<Half, decltype(df)> dh;
  const int64_t n = w.n_cols;
  const auto L = static_cast<int64_t>(hn::Lanes(df));
  // Per thread, grown to the widest matrix seen: no allocation per call once warm.
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  thread_local std::unique_ptr<float[], Free> buf;
  thread_local size_t capacity = 0;
  if (capacity < static_cast<size_t>(kRowBlock * n)) {
    capacity = static_cast<size_t>(kRowBlock * n);
    buf.reset(static_cast<float*>(::operator new[](capacity * sizeof(float), std::align_val_t(64))));
  }
  WeightView f32{GgmlType::kF32, reinterpret_cast<const uint8_t*>(buf.get()), 0, n, static_cast<size_t>(n) * 4};
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    for (int64_t r = rb; r < re; ++r) {
      const auto* src = reinterpret_cast<const Half*>(w.Row(r));
      float* dst = buf.get() + (r - rb) * n;
      int64_t i = 0;
      for (; i + L <= n; i += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, src + i)), df, dst + i);
      for (; i < n; ++i) dst[i] = WeightAt<kType>(w.Row(r), i);
    }
    f32.n_rows = re - rb;
    Rows<GgmlType::kF32>(f32, in, y + rb, ldy, 0, re - rb);
  }
}

void FloatRowsImpl(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  // Below 4 tokens reading the matrix bounds the product and widening would only add traffic.
  const bool widen = in.n_tokens >= 4;
  switch (w.type) {
    case GgmlType::kF32: return Rows<GgmlType::kF32>(w, in, y, ldy, r0, r1);
    case GgmlType::kF16:
      return widen ? WidenedRows<GgmlType::kF16>(w, in, y, ldy, r0, r1) : Rows<GgmlType::kF16>(w, in, y, ldy, r0, r1);
    case GgmlType::kBF16:
      return widen ? WidenedRows<GgmlType::kBF16>(w, in, y, ldy, r0, r1) : Rows<GgmlType::kBF16>(w, in, y, ldy, r0, r1);
    default: return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr::kernels {
HWY_EXPORT(FloatRowsImpl);
void FloatRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(FloatRowsImpl)(w, in, y, ldy, r0, r1);
}
}  // namespace tlr::kernels
#endif
