// MatMul kernels for K-quant weights (ops layer): Q4_K, Q5_K and Q6_K rows in the panel
// layout (matmul_kpanel-inl.h) or, when not repacked, in GGUF layout (matmul_quant-inl.h),
// and the whole panels of IQ4_XS, Q2_K and Q3_K (their other rows go to matmul_lowbit.cc),
// times Q8A activations, compiled for every SIMD target. See matmul_kernels.h.
#include "ops/matmul_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_kquant.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "ops/matmul_kpanel-inl.h"
#include "ops/matmul_kpanel512-inl.h"
#include "ops/matmul_panel-inl.h"
#include "ops/matmul_quant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {

template <GgmlType kType>
void Rows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if constexpr (KPanelFormatOf(kType).two_bit) {
    const auto dot = [](auto nt, auto... args) { KPanelDot23<kType, decltype(nt)::value>(args...); };
#ifdef TLR_PANEL512
    const auto dot2 = [](auto nt, auto... args) { KPanelDot23x2<kType, decltype(nt)::value>(args...); };
    PanelLayoutRows<kType>(w, in, y, ldy, r0, r1, dot, dot2);
#else
    PanelLayoutRows<kType>(w, in, y, ldy, r0, r1, dot);
#endif
  } else {
    const auto dot = [](auto nt, auto... args) { KPanelDot<kType, decltype(nt)::value>(args...); };
#ifdef TLR_PANEL512
    const auto dot2 = [](auto nt, auto... args) { KPanelDot2<kType, decltype(nt)::value>(args...); };
    PanelLayoutRows<kType>(w, in, y, ldy, r0, r1, dot, dot2);
#else
    PanelLayoutRows<kType>(w, in, y, ldy, r0, r1, dot);
#endif
  }
}

void KQuantRowsImpl(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  switch (w.type) {
    case GgmlType::kQ4_K: return Rows<GgmlType::kQ4_K>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ5_K: return Rows<GgmlType::kQ5_K>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ6_K: return Rows<GgmlType::kQ6_K>(w, in, y, ldy, r0, r1);
    case GgmlType::kIQ4_XS: return Rows<GgmlType::kIQ4_XS>(w, in, y, ldy, r0, r1);  // whole panels only
    case GgmlType::kQ2_K: return Rows<GgmlType::kQ2_K>(w, in, y, ldy, r0, r1);      // whole panels only
    case GgmlType::kQ3_K: return Rows<GgmlType::kQ3_K>(w, in, y, ldy, r0, r1);      // whole panels only
    default: return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr::kernels {
HWY_EXPORT(KQuantRowsImpl);
void KQuantRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(KQuantRowsImpl)(w, in, y, ldy, r0, r1);
}
}  // namespace tlr::kernels
#endif
