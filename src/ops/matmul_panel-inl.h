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
//
// Also the routing every panel type shares (PanelLayoutRows: whole panels, panels cut by a
// row range, GGUF-layout tail rows), used with the K-quant kernels of matmul_kpanel-inl.h
// by matmul_kquant.cc.

#if defined(TLR_OPS_MATMUL_PANEL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TLR_OPS_MATMUL_PANEL_INL_H_
#undef TLR_OPS_MATMUL_PANEL_INL_H_
#else
#define TLR_OPS_MATMUL_PANEL_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>

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

// Activation bytes per token block in PanelLayoutRows: half of a 1 MiB L2 (pp512 of the 0.5B shape:
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
  if constexpr (kType == GgmlType::kQ8_0 || kType == GgmlType::kIQ4_NL) {
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
// One vector of nibbles (unpacked vectors 2j, 2j + 1: values 8j..8j+3 and 8j+4..8j+7 of
// each row, the bits above the nibbles OR-ed in from lo_bits / hi_bits) dotted with every
// token's activations from column `col` (= 8j in its group): isum[t] += one sum per row.
// The low halves go into isum_lo, the high ones into isum_hi (the same array, or a second
// one so that one token's dot products form two dependency chains instead of one).
template <int NT>
HWY_INLINE void DotNibbleVector(__m256i raw, __m256i lo_bits, __m256i hi_bits, const ActView* a, int64_t col,
                                __m256i* isum_lo, __m256i* isum_hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_or_si256(_mm256_and_si256(raw, m4), lo_bits);
  const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), hi_bits);
  for (int t = 0; t < NT; ++t) {
    const int8_t* q = a[t].qs + col;
    isum_lo[t] = DpU8(isum_lo[t], lo, Broadcast4(q));
    isum_hi[t] = DpU8(isum_hi[t], hi, Broadcast4(q + 4));
  }
}
template <int NT>
HWY_INLINE void DotNibbleVector(__m256i raw, __m256i lo_bits, __m256i hi_bits, const ActView* a, int64_t col,
                                __m256i* isum) {
  DotNibbleVector<NT>(raw, lo_bits, hi_bits, a, col, isum, isum);
}
// A whole group of 4- or 5-bit values (4 nibble vectors, fifth-bit masks when kMask) for
// group g of the row: isum[t] += one sum per row. One or two tokens (decode) sum in two
// chains: the 8 dot products of a group in one chain were latency-bound.
template <int NT, bool kMask>
HWY_INLINE void DotNibbleGroup(const uint8_t* vals, const uint8_t* masks, const ActView* a, int64_t g, __m256i* isum) {
  constexpr bool kSplit = NT <= 2;
  __m256i second[NT];
  for (int t = 0; t < NT; ++t) second[t] = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {
    const __m256i zero = _mm256_setzero_si256();
    DotNibbleVector<NT>(Load32(vals + 32 * j), kMask ? FifthBits(masks + 8 * j) : zero,
                        kMask ? FifthBits(masks + 8 * j + 4) : zero, a, 32 * g + 8 * j, isum, kSplit ? second : isum);
  }
  if constexpr (kSplit) {
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_add_epi32(isum[t], second[t]);
  }
}
#endif

#ifdef TLR_X86_256
// acc + per-lane dot of 4 signed weight bytes with 4 signed activation bytes (VNNI: the
// weights made unsigned by the caller's table, +128, and the offset term takes it back;
// else |w| times a with w's sign).
HWY_INLINE __m256i DpS8(__m256i acc, __m256i w, __m256i a) {
#ifdef TLR_HAVE_VNNI512
  return DpU8(acc, w, a);
#else
  return DpU8(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
#endif
}
// IQ4_NL: a group's 4 nibble vectors, codes looked up in kIq4nlValues (+128 with VNNI) by
// a byte shuffle, then dotted like Q8_0's bytes: isum[t] += one sum per row.
struct Iq4Table {
  alignas(16) int8_t v[16];
};
constexpr Iq4Table MakeIq4Table() {
  Iq4Table t{};
  for (int i = 0; i < 16; ++i) {
#ifdef TLR_HAVE_VNNI512
    t.v[i] = static_cast<int8_t>(kIq4nlValues[i] + 128 - 256 * (kIq4nlValues[i] >= 0));
#else
    t.v[i] = kIq4nlValues[i];
#endif
  }
  return t;
}
template <int NT>
HWY_INLINE void DotIq4nlGroup(const uint8_t* vals, const ActView* a, int64_t g, __m256i* isum) {
  static constexpr Iq4Table kTable = MakeIq4Table();
  const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kTable.v)));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    const __m256i raw = Load32(vals + 32 * j);
    const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, m4));
    const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
    for (int t = 0; t < NT; ++t) {
      const int8_t* q = a[t].qs + 32 * g + 8 * j;
      isum[t] = DpS8(DpS8(isum[t], lo, Broadcast4(q)), hi, Broadcast4(q + 4));
    }
  }
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
  VecArray<DF, NT * 8> acc, off;  // [token * 8 + chunk of L lanes]
  for (int t = 0; t < NT; ++t) {
    for (size_t k = 0; k < 8; k += L) {
      acc.Set(t * 8 + k / L, hn::Zero(df));
      off.Set(t * 8 + k / L, hn::Zero(df));
    }
  }
#endif
  const bool every_line = PrefetchEveryLine();
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* grp = panel + g * f.group_bytes;
    PrefetchGroup(grp, f.group_bytes, kPanelPrefetchBytes, every_line);
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
    } else if constexpr (f.nonlinear) {
      DotIq4nlGroup<NT>(vals, a, g, isum);
    } else {
      DotNibbleGroup<NT, f.has_mask>(vals, grp + f.mask_off, a, g, isum);
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
              int lo = (v[i] & 0xF) | (((m_lo >> (4 * r + i)) & 1) << 4);
              int hi = (v[i] >> 4) | (((m_hi >> (4 * r + i)) & 1) << 4);
              if constexpr (f.nonlinear) {
                lo = kIq4nlValues[lo];
                hi = kIq4nlValues[hi];
              }
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
        const size_t i = t * 8 + k / L;
        VF acc_i = acc.Get(i), off_i = off.Get(i);
        PanelFloatStep<kType>(wd, wo, hn::Load(di, isum[t] + k), a[t].d[g], a[t].s[g], acc_i, off_i);
        acc.Set(i, acc_i);
        off.Set(i, off_i);
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
      VF out = acc.Get(t * 8 + k / L);
      if constexpr (kOff != 0.0f) out = hn::MulAdd(off.Get(t * 8 + k / L), hn::Set(df, kOff), out);
      hn::StoreU(out, df, y + t * ldy + k);
    }
#endif
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#include "ops/matmul_panel512-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {

// Calls fn(std::integral_constant<int, NT>()) with NT = nt (1..kPanelTokens): the panel
// kernels take their token count as a template parameter.
template <class Fn>
HWY_INLINE void WithTokenCount(int nt, const Fn& fn) {
  switch (nt) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    case 8: return fn(std::integral_constant<int, 8>());
    case 7: return fn(std::integral_constant<int, 7>());
    case 6: return fn(std::integral_constant<int, 6>());
    case 5: return fn(std::integral_constant<int, 5>());
#endif
    case 4: return fn(std::integral_constant<int, 4>());
    case 3: return fn(std::integral_constant<int, 3>());
    case 2: return fn(std::integral_constant<int, 2>());
    default: return fn(std::integral_constant<int, 1>());
  }
}

// Token t's activations as a panel kernel reads them.
HWY_INLINE ActView PanelAct(const MatMulInput& in, int64_t t) {
  const int64_t ng = in.n_cols / 32;
  return {in.qs + t * in.n_cols, in.d + t * ng, in.s + t * ng, in.s16 ? in.s16 + t * 2 * ng : nullptr};
}

// Rows [r0, r1) of a matrix of type kType, in the panel layout if w.repacked (else GGUF
// layout, QuantRows), for every token of `in`. dot(std::integral_constant<int, NT>(), panel,
// ng, a, y, ldy) is the type's panel kernel: 8 rows x NT tokens (a[0..NT)) into y[t * ldy + r].
// Whole panels go straight into y, a few tokens at a time while the panel stays in L1; a
// panel cut by r0 or r1 goes through a small buffer (its 8 rows are computed and the wanted
// ones copied, so a row's result never depends on the range); rows after the last full
// panel are in GGUF layout.
// The non-linear types' rows in GGUF layout are for the low-bit kernels (matmul.cc splits
// the range); PanelLayoutRows then only sees whole panels.
template <GgmlType kType>
constexpr bool kTailsInLowBit = kType == GgmlType::kIQ4_NL || kType == GgmlType::kIQ4_XS ||
                                kType == GgmlType::kQ2_K || kType == GgmlType::kQ3_K;

// The least distance between the two panels of a two-panel kernel call.
constexpr size_t kPanelPairMinBytes = 32 << 10;

// No two-panel kernel (PanelLayoutRows' default).
struct NoPanelDot2 {};

template <GgmlType kType, class PanelDotFn, class PanelDot2Fn = NoPanelDot2>
void PanelLayoutRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0,
                     int64_t r1, const PanelDotFn& dot, const PanelDot2Fn& dot2 = {}) {
  if constexpr (!kTailsInLowBit<kType>) {
    if (!w.repacked) return QuantRows<kType>(w, in, y, ldy, r0, r1);
  }
  const int64_t ng = in.n_cols / 32;
  const size_t panel_bytes = static_cast<size_t>(kPanelRows) * w.row_bytes;
  const int64_t panel_end = w.n_rows / kPanelRows * kPanelRows;
  // Tokens in blocks whose activations stay in L2 while every whole panel of the range passes
  // over them; each block reads the range's weights once more (from L3 or memory), which
  // costs far less than streaming all tokens' activations from L3 once per panel.
  const int64_t block = std::max<int64_t>(kPanelTokens, kActBlockBytes / in.n_cols / kPanelTokens * kPanelTokens);
  int64_t r = r0;
  while (r < std::min(r1, panel_end)) {
    const int64_t p = r / kPanelRows;
    if (r % kPanelRows == 0 && r + kPanelRows <= r1) {
      const int64_t p_end = std::min(r1, panel_end) / kPanelRows;
      // With a two-panel kernel, panel p + i goes with p + half + i: two streams far enough
      // apart to read at full speed (see PanelDot2); an odd last panel goes alone.
      int64_t half = 0;
      if constexpr (!std::is_same_v<PanelDot2Fn, NoPanelDot2>) {
        half = (p_end - p) / 2;
        if (static_cast<size_t>(half) * panel_bytes < kPanelPairMinBytes) half = 0;
      }
      for (int64_t tb = 0; tb < in.n_tokens; tb += block) {
        const int64_t te = std::min(in.n_tokens, tb + block);
        for (int64_t q = p; q < p_end;) {
          const bool two = q < p + half;
          for (int64_t t0 = tb; t0 < te; t0 += kPanelTokens) {
            const int nt = static_cast<int>(std::min<int64_t>(kPanelTokens, te - t0));
            ActView a[kPanelTokens];
            for (int t = 0; t < nt; ++t) a[t] = PanelAct(in, t0 + t);
            const uint8_t* panel = w.data + q * panel_bytes;
            float* out = y + t0 * ldy + q * kPanelRows;
            if constexpr (!std::is_same_v<PanelDot2Fn, NoPanelDot2>) {
              if (two) {
                WithTokenCount(nt, [&](auto n) {
                  dot2(n, panel, panel + half * panel_bytes, ng, a, out, out + half * kPanelRows, ldy);
                });
                continue;
              }
            }
            WithTokenCount(nt, [&](auto n) { dot(n, panel, ng, a, out, ldy); });
          }
          q = two && q + 1 == p + half ? p + 2 * half : q + 1;
        }
      }
      r = p_end * kPanelRows;
      continue;
    }
    const int64_t hi = std::min(r1, (p + 1) * kPanelRows);
    for (int64_t t = 0; t < in.n_tokens; ++t) {
      float buf[kPanelRows];
      const ActView a = PanelAct(in, t);
      dot(std::integral_constant<int, 1>(), w.data + p * panel_bytes, ng, &a, buf, 0);
      for (int64_t k = r; k < hi; ++k) y[t * ldy + k] = buf[k - p * kPanelRows];
    }
    r = hi;
  }
  if constexpr (!kTailsInLowBit<kType>) {
    if (r1 > panel_end) QuantRows<kType>(w, in, y, ldy, std::max(r0, panel_end), r1);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
