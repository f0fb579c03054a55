// Panel kernels for MatMul (ops layer), compiled once per Highway target (included by
// matmul_legacy.cc after hwy/foreach_target.h): Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 weights in the
// panel layout of panel_layout.h, times up to kPanelTokens tokens of Q8A activations.
//
// One call computes 8 rows x NT tokens. Per 32-column group the 8 rows' values are unpacked
// once (a few register ops per 32-byte vector) and every token dots them with its activation
// bytes broadcast 4 at a time; each 32-bit lane then holds one row's integer sum, so the
// block scales (8 at once), the float accumulation and the final store are one vector op per
// token for 8 rows. What a (row, token) pair computes does not depend on NT or on the other
// rows and tokens: the integer sums are exact and the float operations per lane are the same
// sequence, so a position's result is bit-identical in decode and in any batch (the decoder's
// speculation relies on that).
//
// x86 (AVX2 and up) uses maddubs or, with AVX-512 VNNI, vpdpbusd (Q8_0 then adds 128 to its
// signed weights and subtracts 128 x the activation block sum afterwards); other targets sum
// the bytes in plain integer loops and do the float part with Highway vectors.

#if defined(TLR_OPS_MATMUL_PANEL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TLR_OPS_MATMUL_PANEL_INL_H_
#undef TLR_OPS_MATMUL_PANEL_INL_H_
#else
#define TLR_OPS_MATMUL_PANEL_INL_H_
#endif

#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/matmul_quant-inl.h"
#include "ops/panel_layout.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Software prefetch distance. Decode streams the weights once per token and a few hundred
// bytes ahead is too close: ~2.5 KiB measured best for Q8_0 and Q4_0 panels at 2 threads
// (tg 70-82 -> 86-87 tok/s for Q8_0 against 1 KiB; 2 and 3 KiB for Q4_0 within noise).
constexpr int64_t kPanelPrefetchBytes = 2560;

// Activation bytes per token block in PanelRows: half of a 1 MiB L2 (pp512 of the 0.5B shape:
// 456-489 tok/s without blocking, 498-504 with 256 KiB or 512 KiB blocks).
constexpr int64_t kActBlockBytes = 512 << 10;

// Tokens per panel call: AVX-512 targets have 32 vector registers (8 tokens' integer and
// float accumulators fit), the others 16 or fewer.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kPanelTokens = 8;
#else
constexpr int kPanelTokens = 4;
#endif

// The offset term of a type, per group: coefficient (times the weight scale or minimum) of
// d_a * sum(q_a). Q8_0 has one only where VNNI makes its weights unsigned.
template <GgmlType kType>
constexpr float PanelOffsetScale() {
  if constexpr (kType == GgmlType::kQ4_0) return -8.0f;
  if constexpr (kType == GgmlType::kQ5_0) return -16.0f;
  if constexpr (kType == GgmlType::kQ8_0) {
#ifdef TLR_HAVE_VNNI512
    return -128.0f;
#else
    return 0.0f;
#endif
  }
  return 1.0f;  // Q4_1, Q5_1: the minimum itself
}

#ifdef TLR_X86_256
// acc + per-lane dot of 4 unsigned weight bytes with 4 signed activation bytes.
HWY_INLINE __m256i DpU8(__m256i acc, __m256i w, __m256i a) {
#ifdef TLR_HAVE_VNNI512
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a));
  return acc;
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)));
#endif
}
// The fifth bits of one nibble vector from its 32-bit mask: 0x10 where the bit is set.
HWY_INLINE __m256i FifthBits(const uint8_t* mask) {
  uint32_t m;
  std::memcpy(&m, mask, 4);
#if HWY_TARGET <= HWY_AVX3
  return _mm256_maskz_mov_epi8(static_cast<__mmask32>(m), _mm256_set1_epi8(0x10));
#else
  return Q5HighBits(m);
#endif
}
HWY_INLINE __m256i Broadcast4(const int8_t* a) {
  int32_t v;
  std::memcpy(&v, a, 4);
  return _mm256_set1_epi32(v);
}
#endif

// Float part, shared by both integer paths: acc[t] += isum * (d_w * d_a) and the offset
// accumulation, one lane per row.
template <GgmlType kType>
HWY_INLINE void PanelFloatStep(const hn::Vec<DF> wd, const hn::Vec<DF> wo, const hn::Vec<DI> isum,
                               float da, float sa, hn::Vec<DF>& acc, hn::Vec<DF>& off) {
  const DF df;
  acc = hn::MulAdd(hn::ConvertTo(df, isum), hn::Mul(wd, hn::Set(df, da)), acc);
  if constexpr (PanelOffsetScale<kType>() != 0.0f) off = hn::MulAdd(wo, hn::Set(df, sa), off);
}

// 8 rows (one panel) x NT tokens: y[t * ldy + r] for r < 8, t < NT.
template <GgmlType kType, int NT>
HWY_NOINLINE void PanelDot(const uint8_t* panel, int64_t ng, const ActView* a, float* y, int64_t ldy) {
  constexpr PanelFormat f = PanelFormatOf(kType);
  constexpr bool kQ8 = kType == GgmlType::kQ8_0;
  const DF df;
  const DI di;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const size_t L = hn::Lanes(df);  // 8 on x86; 8 / L chunks of lanes elsewhere
  using VF = hn::Vec<DF>;
#ifdef TLR_X86_256
  // One vector of 8 lanes per token: plain arrays the compiler keeps in registers.
  VF acc[NT], off[NT];
  for (int t = 0; t < NT; ++t) acc[t] = off[t] = hn::Zero(df);
#else
  VF acc[NT][8], off[NT][8];  // [token][chunk of L lanes]
  for (int t = 0; t < NT; ++t) {
    for (size_t k = 0; k < 8; k += L) acc[t][k / L] = off[t][k / L] = hn::Zero(df);
  }
#endif
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* grp = panel + g * f.group_bytes;
    hwy::Prefetch(grp + kPanelPrefetchBytes);
    const uint8_t* vals = grp + f.values_off;
#ifdef TLR_X86_256
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    if constexpr (kQ8) {
      for (int c = 0; c < 8; ++c) {
        const __m256i w = Load32(vals + 32 * c);
#ifdef TLR_HAVE_VNNI512
        const __m256i wu = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
        for (int t = 0; t < NT; ++t) isum[t] = DpU8(isum[t], wu, Broadcast4(a[t].qs + 32 * g + 4 * c));
#else
        const __m256i wabs = _mm256_sign_epi8(w, w);
        for (int t = 0; t < NT; ++t) {
          isum[t] = DpU8(isum[t], wabs, _mm256_sign_epi8(Broadcast4(a[t].qs + 32 * g + 4 * c), w));
        }
#endif
      }
    } else {
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      for (int j = 0; j < 4; ++j) {
        const __m256i raw = Load32(vals + 32 * j);
        __m256i lo = _mm256_and_si256(raw, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if constexpr (f.has_mask) {
          lo = _mm256_or_si256(lo, FifthBits(grp + f.mask_off + 8 * j));
          hi = _mm256_or_si256(hi, FifthBits(grp + f.mask_off + 8 * j + 4));
        }
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = a[t].qs + 32 * g + 8 * j;
          isum[t] = DpU8(DpU8(isum[t], lo, Broadcast4(q)), hi, Broadcast4(q + 4));
        }
      }
    }
    const VF wd = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(grp)));
    const VF wo = f.has_min ? hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(grp + f.min_off)))
                            : wd;
    for (int t = 0; t < NT; ++t) {
      PanelFloatStep<kType>(wd, wo, ToVI(isum[t]), a[t].d[g], a[t].s[g], acc[t], off[t]);
    }
#else
    // Portable: integer sums per row in plain loops, then the float part per chunk of lanes.
    HWY_ALIGN int32_t isum[NT][8];
    for (int t = 0; t < NT; ++t) {
      const int8_t* q = a[t].qs + 32 * g;
      for (int r = 0; r < 8; ++r) {
        int32_t s = 0;
        if constexpr (kQ8) {
          for (int c = 0; c < 8; ++c) {
            for (int i = 0; i < 4; ++i) s += static_cast<int8_t>(vals[32 * c + 4 * r + i]) * q[4 * c + i];
          }
        } else {
          for (int j = 0; j < 4; ++j) {
            const uint8_t* v = vals + 32 * j + 4 * r;
            uint32_t m_lo = 0, m_hi = 0;
            if constexpr (f.has_mask) {
              std::memcpy(&m_lo, grp + f.mask_off + 8 * j, 4);
              std::memcpy(&m_hi, grp + f.mask_off + 8 * j + 4, 4);
            }
            for (int i = 0; i < 4; ++i) {
              const int lo = (v[i] & 0xF) | (((m_lo >> (4 * r + i)) & 1) << 4);
              const int hi = (v[i] >> 4) | (((m_hi >> (4 * r + i)) & 1) << 4);
              s += lo * q[8 * j + i] + hi * q[8 * j + 4 + i];
            }
          }
        }
        isum[t][r] = s;
      }
    }
    for (size_t k = 0; k < 8; k += L) {
      const VF wd = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(grp) + k));
      const VF wo = f.has_min
                        ? hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(grp + f.min_off) + k))
                        : wd;
      for (int t = 0; t < NT; ++t) {
        PanelFloatStep<kType>(wd, wo, hn::Load(di, isum[t] + k), a[t].d[g], a[t].s[g], acc[t][k / L],
                              off[t][k / L]);
      }
    }
#endif
  }
  constexpr float kOff = PanelOffsetScale<kType>();
  for (int t = 0; t < NT; ++t) {
#ifdef TLR_X86_256
    VF out = acc[t];
    if constexpr (kOff != 0.0f) out = hn::MulAdd(off[t], hn::Set(df, kOff), out);
    hn::StoreU(out, df, y + t * ldy);
#else
    for (size_t k = 0; k < 8; k += L) {
      VF out = acc[t][k / L];
      if constexpr (kOff != 0.0f) out = hn::MulAdd(off[t][k / L], hn::Set(df, kOff), out);
      hn::StoreU(out, df, y + t * ldy + k);
    }
#endif
  }
}

// Panel rows [p0, p1) of a repacked matrix times every token of `in`.
template <GgmlType kType>
void PanelRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t p0, int64_t p1) {
  const int64_t ng = in.n_cols / 32;
  const size_t panel_bytes = static_cast<size_t>(kPanelRows) * w.row_bytes;
  // Tokens in blocks whose activations stay in L2 while every panel of the range passes
  // over them; each block reads the range's weights once more (from L3 or memory), which
  // costs far less than streaming all tokens' activations from L3 once per panel.
  const int64_t block = std::max<int64_t>(kPanelTokens, kActBlockBytes / in.n_cols / kPanelTokens * kPanelTokens);
  for (int64_t tb = 0; tb < in.n_tokens; tb += block) {
  const int64_t te = std::min(in.n_tokens, tb + block);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* panel = w.data + p * panel_bytes;
    for (int64_t t0 = tb; t0 < te; t0 += kPanelTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kPanelTokens, te - t0));
      ActView a[kPanelTokens];
      for (int t = 0; t < nt; ++t) a[t] = {in.qs + (t0 + t) * in.n_cols, in.d + (t0 + t) * ng, in.s + (t0 + t) * ng};
      float* yp = y + t0 * ldy + p * kPanelRows;
      switch (nt) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
        case 8: PanelDot<kType, 8>(panel, ng, a, yp, ldy); break;
        case 7: PanelDot<kType, 7>(panel, ng, a, yp, ldy); break;
        case 6: PanelDot<kType, 6>(panel, ng, a, yp, ldy); break;
        case 5: PanelDot<kType, 5>(panel, ng, a, yp, ldy); break;
#endif
        case 4: PanelDot<kType, 4>(panel, ng, a, yp, ldy); break;
        case 3: PanelDot<kType, 3>(panel, ng, a, yp, ldy); break;
        case 2: PanelDot<kType, 2>(panel, ng, a, yp, ldy); break;
        default: PanelDot<kType, 1>(panel, ng, a, yp, ldy); break;
      }
    }
  }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
