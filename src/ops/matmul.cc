// SIMD kernels for MatMul (ops layer), compiled once per Highway target and dispatched at
// run time. See matmul.h for the contract.
//
// Quantized weights: each 32-weight block is unpacked to 32 small integers (unsigned for the
// types with an offset, signed for Q8_0 and Q6_K) and dotted with the token's 8-bit activation block; the
// 8 int32 partial sums become floats scaled by d_w * d_a and accumulate in a float vector.
// Offsets (Q4_0's -8, Q4_1's min, K-quant minimums) contribute offset_w * s_a per block,
// where s_a = d_a * sum(q_a). Up to four tokens share each unpacked weight block (prefill).
//
// x86 (AVX2, AVX-512, AVX-512 VNNI) unpacks in registers and uses maddubs / vpdpbusd; every
// other target unpacks through a small buffer and uses Highway's portable widening
// multiply-accumulate. Both compute the same integer sums.
#include <cmath>
#include <cstring>
#include <string>

#include "ops/matmul.h"
#include "ops/matmul_lowbit.h"
#include "ops/thread_pool.h"
#include "quant/quantize.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

#include "ops/matmul_quant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Float weights times float activations.
template <GgmlType kType, int NT>
HWY_INLINE void DotRowF(const uint8_t* row, int64_t n, const float* const* x, float* out) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  using V = hn::Vec<decltype(df)>;
  V acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = hn::Zero(df);
  int64_t i = 0;
  for (; i + static_cast<int64_t>(L) <= n; i += L) {
    V wv;
    if constexpr (kType == GgmlType::kF32) {
      wv = hn::LoadU(df, reinterpret_cast<const float*>(row) + i);
    } else if constexpr (kType == GgmlType::kF16) {
      const hn::Rebind<hwy::float16_t, decltype(df)> dh;
      wv = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i));
    } else {
      const hn::Rebind<hwy::bfloat16_t, decltype(df)> dh;
      wv = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(row) + i));
    }
    for (int t = 0; t < NT; ++t) acc[t] = hn::MulAdd(wv, hn::LoadU(df, x[t] + i), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = hn::GetLane(hn::SumOfLanes(df, acc[t]));
  for (; i < n; ++i) {  // tail (rows not a multiple of the vector length)
    float wf;
    if constexpr (kType == GgmlType::kF32) {
      wf = reinterpret_cast<const float*>(row)[i];
    } else if constexpr (kType == GgmlType::kF16) {
      wf = F16Table()[reinterpret_cast<const uint16_t*>(row)[i]];
    } else {
      wf = Bf16ToF32(reinterpret_cast<const uint16_t*>(row)[i]);
    }
    for (int t = 0; t < NT; ++t) out[t] += wf * x[t][i];
  }
}

template <GgmlType kType>
void RowsOfType(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  constexpr bool kFloat =
      kType == GgmlType::kF32 || kType == GgmlType::kF16 || kType == GgmlType::kBF16;
  const int64_t nb = in.n_cols / 32;
  // Blocks of rows outside, groups of 4 tokens inside: a block's weights stay in L1/L2 while
  // every token uses them (prefill reads each weight from memory once).
  constexpr int64_t kRowBlock = 16;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    for (int64_t t0 = 0; t0 < in.n_tokens; t0 += 4) {
      const int nt = static_cast<int>(std::min<int64_t>(4, in.n_tokens - t0));
      ActView aq[4];
      const float* af[4];
      for (int t = 0; t < nt; ++t) {
        if constexpr (!kFloat) aq[t] = {in.qs + (t0 + t) * in.n_cols, in.d + (t0 + t) * nb, in.s + (t0 + t) * nb};
        af[t] = in.x + (t0 + t) * in.ld;
      }
      for (int64_t r = rb; r < re; ++r) {
        float out[4] = {0, 0, 0, 0};
        const uint8_t* row = w.Row(r);
        if constexpr (kFloat) {
          switch (nt) {
            case 4: DotRowF<kType, 4>(row, in.n_cols, af, out); break;
            case 3: DotRowF<kType, 3>(row, in.n_cols, af, out); break;
            case 2: DotRowF<kType, 2>(row, in.n_cols, af, out); break;
            default: DotRowF<kType, 1>(row, in.n_cols, af, out); break;
          }
        } else if (kType == GgmlType::kQ4_0 && w.repacked) {
          switch (nt) {
            case 4: DotRowQ4_0R<4>(row, in.n_cols, aq, out); break;
            case 3: DotRowQ4_0R<3>(row, in.n_cols, aq, out); break;
            case 2: DotRowQ4_0R<2>(row, in.n_cols, aq, out); break;
            default: DotRowQ4_0R<1>(row, in.n_cols, aq, out); break;
          }
        } else {
          switch (nt) {
            case 4: DotRowQ<kType, 4>(row, in.n_cols, aq, out); break;
            case 3: DotRowQ<kType, 3>(row, in.n_cols, aq, out); break;
            case 2: DotRowQ<kType, 2>(row, in.n_cols, aq, out); break;
            default: DotRowQ<kType, 1>(row, in.n_cols, aq, out); break;
          }
        }
        for (int t = 0; t < nt; ++t) y[(t0 + t) * ldy + r] = out[t];
      }
    }
  }
}

void MatMulRowsImpl(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  switch (w.type) {
#define TLR_CASE(T) \
  case GgmlType::T: return RowsOfType<GgmlType::T>(w, in, y, ldy, r0, r1);
    TLR_CASE(kF32)
    TLR_CASE(kF16)
    TLR_CASE(kBF16)
    TLR_CASE(kQ8_0)
    TLR_CASE(kQ4_0)
    TLR_CASE(kQ4_1)
    TLR_CASE(kQ5_0)
    TLR_CASE(kQ5_1)
    TLR_CASE(kQ4_K)
    TLR_CASE(kQ5_K)
    TLR_CASE(kQ6_K)
#undef TLR_CASE
    default:
      return;
  }
}

void QuantizeQ8ARows(const float* x, int64_t ld, int64_t n_cols, int8_t* qs, float* ds,
                     float* ss, int64_t t0, int64_t t1) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  const int64_t nb = n_cols / 32;
  for (int64_t t = t0; t < t1; ++t) {
    const float* row = x + t * ld;
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = row + b * 32;
      float amax = 0;
      if (L <= 32) {
        auto m = hn::Zero(df);
        for (size_t i = 0; i < 32; i += L) m = hn::Max(m, hn::Abs(hn::LoadU(df, v + i)));
        amax = hn::GetLane(hn::MaxOfLanes(df, m));
      } else {
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      }
      const float d = amax / 127.0f;
      const float id = d > 0 ? 1.0f / d : 0.0f;
      int sum = 0;
      int8_t* q = qs + t * n_cols + b * 32;
      for (int j = 0; j < 32; ++j) {
        const int qi = static_cast<int>(std::lrintf(v[j] * id));
        q[j] = static_cast<int8_t>(qi);
        sum += qi;
      }
      ds[t * nb + b] = d;
      ss[t * nb + b] = d * static_cast<float>(sum);
    }
  }
}

std::string TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr {

HWY_EXPORT(MatMulRowsImpl);
HWY_EXPORT(QuantizeQ8ARows);
HWY_EXPORT(TargetNameImpl);

bool MatMulSupports(GgmlType t) {
  if (LowBitSupports(t)) return true;  // Q2_K, Q3_K, IQ4_NL, IQ4_XS: matmul_lowbit.cc
  switch (t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

bool MatMulUsesQ8A(GgmlType t) {
  return MatMulSupports(t) && t != GgmlType::kF32 && t != GgmlType::kF16 && t != GgmlType::kBF16;
}

void MatMulInput::Prepare(GgmlType type, const float* xs, int64_t n_tok, int64_t cols, int64_t ldx,
                          ThreadPool* pool) {
  x = xs;
  n_tokens = n_tok;
  n_cols = cols;
  ld = ldx;
  qs = nullptr;
  d = s = nullptr;
  if (!MatMulUsesQ8A(type)) return;
  const size_t nq = static_cast<size_t>(n_tok * cols), ng = static_cast<size_t>(n_tok * (cols / 32));
  if (qs_storage_.size() < nq) qs_storage_.resize(nq);
  if (d_storage_.size() < ng) {
    d_storage_.resize(ng);
    s_storage_.resize(ng);
  }
  int8_t* q = qs_storage_.data();
  float* dd = d_storage_.data();
  float* sd = s_storage_.data();
  if (pool && n_tok > 1) {
    pool->ParallelFor(n_tok, 0, [&](int64_t b, int64_t e, int) {
      HWY_DYNAMIC_DISPATCH(QuantizeQ8ARows)(xs, ldx, cols, q, dd, sd, b, e);
    });
  } else {
    HWY_DYNAMIC_DISPATCH(QuantizeQ8ARows)(xs, ldx, cols, q, dd, sd, 0, n_tok);
  }
  qs = q;
  d = dd;
  s = sd;
}

void MatMulRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  if (LowBitSupports(w.type)) return MatMulRowsLowBit(w, in, y, ldy, r0, r1);
  HWY_DYNAMIC_DISPATCH(MatMulRowsImpl)(w, in, y, ldy, r0, r1);
}

void MatMulFused(std::span<const WeightView> ws, const MatMulInput& in, std::span<float* const> ys,
                 ThreadPool* pool) {
  // One parallel loop over the rows of all matrices: chunks never straddle two matrices.
  constexpr size_t kMax = 8;
  const size_t m = std::min(ws.size(), kMax);
  const int threads = pool ? pool->n_threads() : 1;
  int64_t total_rows = 0;
  for (size_t i = 0; i < m; ++i) total_rows += ws[i].n_rows;
  // Two chunks per thread: each thread streams long contiguous runs of rows (what the
  // hardware prefetcher wants; many small chunks measured ~10% slower for decode), with a
  // little slack for a core that runs slower.
  const int64_t chunk = std::max<int64_t>(16, total_rows / (2 * threads));
  int64_t first_chunk[kMax + 1];
  first_chunk[0] = 0;
  for (size_t i = 0; i < m; ++i) first_chunk[i + 1] = first_chunk[i] + (ws[i].n_rows + chunk - 1) / chunk;
  auto run = [&](int64_t b, int64_t e, int) {
    for (int64_t c = b; c < e; ++c) {
      size_t i = 0;
      while (c >= first_chunk[i + 1]) ++i;
      const int64_t r0 = (c - first_chunk[i]) * chunk;
      const int64_t r1 = std::min(ws[i].n_rows, r0 + chunk);
      MatMulRows(ws[i], in, ys[i], ws[i].n_rows, r0, r1);
    }
  };
  if (!pool || threads == 1) {
    run(0, first_chunk[m], 0);
  } else {
    pool->ParallelFor(first_chunk[m], 1, run);
  }
}

void MatMul(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, ThreadPool* pool) {
  // Two chunks per thread, as in MatMulFused.
  const int64_t chunk = std::max<int64_t>(16, w.n_rows / (2 * (pool ? pool->n_threads() : 1)));
  if (!pool || pool->n_threads() == 1) {
    MatMulRows(w, in, y, ldy, 0, w.n_rows);
    return;
  }
  pool->ParallelFor(w.n_rows, chunk, [&](int64_t b, int64_t e, int) { MatMulRows(w, in, y, ldy, b, e); });
}

std::vector<std::string> CompiledSimdTargets() {
  std::vector<std::string> names;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) names.push_back(hwy::TargetName(t));
  return names;
}

std::string ActiveSimdTarget() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

bool ForceSimdTarget(const std::string& name) {
  hwy::SetSupportedTargetsForTest(0);
  if (name.empty()) return true;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      return true;
    }
  }
  return false;
}

}  // namespace tlr
#endif  // HWY_ONCE
