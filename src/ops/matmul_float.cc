// MatMul kernels for float weights (ops layer): F32, F16 and BF16 rows times float
// activations, compiled for every SIMD target. See matmul_kernels.h.
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

// One weight row times NT tokens' float activations.
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
void Rows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  RowBlocks(w, in, y, ldy, r0, r1, [&](const uint8_t* row, int nt, int64_t t0, float* out) {
    const float* af[4];
    for (int t = 0; t < nt; ++t) af[t] = in.x + (t0 + t) * in.ld;
    switch (nt) {
      case 4: DotRowF<kType, 4>(row, in.n_cols, af, out); break;
      case 3: DotRowF<kType, 3>(row, in.n_cols, af, out); break;
      case 2: DotRowF<kType, 2>(row, in.n_cols, af, out); break;
      default: DotRowF<kType, 1>(row, in.n_cols, af, out); break;
    }
  });
}

void FloatRowsImpl(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  switch (w.type) {
    case GgmlType::kF32: return Rows<GgmlType::kF32>(w, in, y, ldy, r0, r1);
    case GgmlType::kF16: return Rows<GgmlType::kF16>(w, in, y, ldy, r0, r1);
    case GgmlType::kBF16: return Rows<GgmlType::kBF16>(w, in, y, ldy, r0, r1);
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
