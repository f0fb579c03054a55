// Attention over a KV cache in its stored type (ops layer): the SIMD kernel behind
// Attention() in nn.h, compiled once per Highway target and dispatched at run time, and the
// (scalar) writers and readers of the cache layout it reads.
//
// For a group of up to kMaxGroup query heads that share one KV head, positions are visited in
// chunks of kAttentionChunk:
//   1. scores, one key tile (16 positions, transposed) at a time: for each dimension i, the
//      16 positions' values are one load (widened in registers: f16 by PromoteTo, q8_0 int8 ->
//      int32 -> float, its block scale applied once per 32 dimensions) and every head adds
//      q_h[i] times them to its 16 running dot products. No horizontal sums.
//   2. online softmax: the chunk's maximum updates the running maximum m; the running sum and
//      the output so far are scaled by exp(m_old - m_new); p = exp(s - m_new);
//   3. values: each V row is widened once per vector slice and added into every head's
//      output with weight p. The output accumulates in `out` itself, divided by the sum at
//      the end.
// The heads' accumulators are template-sized arrays so they stay in registers. Nothing is
// allocated; the chunk's scores live on the stack.
//
// The order of every sum depends only on the window [first, n_kv) and head_dim (chunks and
// tiles start at multiples of kAttentionChunk), never on the batch, on the thread that runs it or on the other heads of the
// group: a position's output is bit-identical alone or inside a batch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ops/nn.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
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

// s[g * kChunk + t] = scale * q_g . K_t for the tile's 16 positions t (positions past the
// cache's size get finite garbage, masked later).
template <GgmlType kType, int kG, class D>
HWY_INLINE void TileScores(D d, const float* q, int64_t hd, const uint8_t* tile, float scale, float* s) {
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
  // Adds the dimensions [i0, i1) into part.
  auto dims = [&](int64_t i0, int64_t i1, Acc& part) HWY_ATTR {
    for (int64_t i = i0; i < i1; ++i) {
      VecArray<D, kMaxV> kv;
      for (int v = 0; v < kV; ++v) kv.Set(v, LoadKeyLanes<kType>(d, tile, hd, i, v * kL));
      for (int g = 0; g < kG; ++g) {
        const V qi = hn::Set(d, q[g * hd + i]);
        for (int v = 0; v < kV; ++v) part.Set(g * kV + v, hn::MulAdd(qi, kv.Get(v), part.Get(g * kV + v)));
      }
    }
  };
  if constexpr (kType == GgmlType::kQ8_0) {
    // Integer values per 32-dimension block, then times the 16 positions' block scales.
    const hn::Rebind<hwy::float16_t, D> dh;
    const auto* scales = reinterpret_cast<const hwy::float16_t*>(tile);
    for (int64_t b = 0; b < hd / 32; ++b) {
      Acc part;
      for (int g = 0; g < kG; ++g) {
        for (int v = 0; v < kV; ++v) part.Set(g * kV + v, hn::Zero(d));
      }
      dims(b * 32, b * 32 + 32, part);
      for (int v = 0; v < kV; ++v) {
        const V sc = hn::PromoteTo(d, hn::LoadU(dh, scales + b * kKeyTile + v * kL));
        for (int g = 0; g < kG; ++g) acc.Set(g * kV + v, hn::MulAdd(part.Get(g * kV + v), sc, acc.Get(g * kV + v)));
      }
    }
  } else {
    dims(0, hd, acc);
  }
  const V vs = hn::Set(d, scale);
  for (int g = 0; g < kG; ++g) {
    for (int v = 0; v < kV; ++v) hn::StoreU(hn::Mul(acc.Get(g * kV + v), vs), d, s + g * kChunk + v * kL);
  }
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
      auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, sg + t), vm));
      if (t + L > len) e = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(len - t)), e);
      hn::StoreU(e, d, sg + t);
      vsum = hn::Add(vsum, e);
    }
    l[g] = l[g] * alpha[g] + hn::GetLane(hn::SumOfLanes(d, vsum));
    m[g] = m_new;
  }
}

// out_g = alpha_g * out_g + sum_t p[g * kChunk + t] * V_{j0 + t}, kS vectors of the head
// dimension at a time (the chunk's V rows stay in L1 across slices). `first`: out holds no
// earlier chunk (it may be uninitialised).
template <GgmlType kType, int kG, int kS, class D>
HWY_INLINE void ChunkValues(D d, const float* p, const float* alpha, const KvView& v, int64_t j0, int64_t len,
                            int64_t hd, bool first, float* out) {
  using V = hn::Vec<D>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < hd; i += kS * L) {
    VecArray<D, kG * kS> o;  // [g * kS + k]
    for (int g = 0; g < kG; ++g) {
      for (int k = 0; k < kS; ++k) {
        o.Set(g * kS + k, first ? hn::Zero(d) : hn::Mul(hn::LoadU(d, out + g * hd + i + k * L), hn::Set(d, alpha[g])));
      }
    }
    for (int64_t t = 0; t < len; ++t) {
      const uint8_t* row = v.Row(j0 + t);
      VecArray<D, kS> vv;
      for (int k = 0; k < kS; ++k) vv.Set(k, LoadRow<kType>(d, row, i + k * L));
      for (int g = 0; g < kG; ++g) {
        const V pg = hn::Set(d, p[g * kChunk + t]);
        for (int k = 0; k < kS; ++k) o.Set(g * kS + k, hn::MulAdd(pg, vv.Get(k), o.Get(g * kS + k)));
      }
    }
    for (int g = 0; g < kG; ++g) {
      for (int k = 0; k < kS; ++k) hn::StoreU(o.Get(g * kS + k), d, out + g * hd + i + k * L);
    }
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
  // Two vectors per value slice where the registers allow (AVX-512 has 32) and head_dim does.
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const bool wide = hn::MaxLanes(d) >= 16 && (hd / L) % 2 == 0;
  HWY_ALIGN float s[kG * kChunk];
  // A sliding window starts at the chunk holding `first`; its earlier positions score -inf.
  const int64_t start = first / kChunk * kChunk;
  for (int64_t j0 = start; j0 < n_kv; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n_kv - j0);
    for (int64_t t = 0; t < len; t += kKeyTile) {
      // The next chunk's keys and values come from memory while this one computes (at long
      // contexts the cache is far larger than the caches: each token streams all of it).
      if (j0 + kChunk + t < n_kv) {
        const uint8_t* next_k = k.Tile(j0 + kChunk + t);
        const uint8_t* next_v = v.Row(j0 + kChunk + t);
        for (size_t b = 0; b < kKeyTile * k.row_bytes; b += 64) hwy::Prefetch(next_k + b);
        for (size_t b = 0; b < kKeyTile * v.row_bytes; b += 64) hwy::Prefetch(next_v + b);
      }
      TileScores<kType, kG>(d, q, hd, k.Tile(j0 + t), scale, s + t);
    }
    for (int64_t t = 0; t < first - j0; ++t) {
      for (int g = 0; g < kG; ++g) s[g * kChunk + t] = -std::numeric_limits<float>::infinity();
    }
    ChunkSoftmax<kG>(d, len, s, m, l, alpha);
    if (wide) {
      ChunkValues<kType, kG, 2>(d, s, alpha, v, j0, len, hd, j0 == start, out);
    } else {
      ChunkValues<kType, kG, 1>(d, s, alpha, v, j0, len, hd, j0 == start, out);
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
    if (head_dim % 32 == 0) return Status::Ok();
    return Status::Error("a q8_0 KV cache needs a head dimension that is a multiple of 32 (this model's is " +
                         std::to_string(head_dim) + "); use f16");
  }
  return Status::Error("KV cache type " + std::string(GgmlTraits(type).name) + " is not supported (f32, f16, q8_0)");
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
