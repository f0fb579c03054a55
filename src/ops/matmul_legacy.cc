// MatMul kernels for the 32-element block types (ops layer): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1
// (and IQ4_NL's whole panels),
// in the panel layout (matmul_panel-inl.h) or, when not repacked, in GGUF layout
// (matmul_quant-inl.h), compiled for every SIMD target. See matmul_kernels.h.
#include "ops/matmul_kernels.h"
#include "ops/panel_layout.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_legacy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "ops/matmul_amx-inl.h"
#include "ops/matmul_panel-inl.h"
#include "ops/matmul_quant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {

#ifdef TLR_AMX
// Tokens from which Q8_0 runs on AMX tiles (16 per tile; decode and short speculation
// batches stay on the VNNI kernels).
constexpr int64_t kAmxMinTokens = 16;
#endif

template <GgmlType kType>
void Rows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
#ifdef TLR_AMX
  if constexpr (kType == GgmlType::kQ8_0) {
    if (w.repacked && in.n_tokens >= kAmxMinTokens && AmxUsable()) {
      r0 = AmxQ8Rows(w, in, y, ldy, r0, r1);
      if (r0 >= r1) return;
    }
  }
#endif
  const auto dot = [](auto nt, auto... args) { PanelDot<kType, decltype(nt)::value>(args...); };
#ifdef TLR_PANEL512
  // Two panels per call in 512-bit vectors. Q8_0 too: decode was memory-bound on one panel
  // already, but prefill is compute-bound, and one 512-bit vpdpbusd covers two panels' bytes.
  const auto dot2 = [](auto nt, auto... args) { PanelDot2<kType, decltype(nt)::value>(args...); };
  return PanelLayoutRows<kType>(w, in, y, ldy, r0, r1, dot, dot2);
#endif
  PanelLayoutRows<kType>(w, in, y, ldy, r0, r1, dot);
}

void LegacyRowsImpl(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  switch (w.type) {
    case GgmlType::kQ8_0: return Rows<GgmlType::kQ8_0>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ4_0: return Rows<GgmlType::kQ4_0>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ4_1: return Rows<GgmlType::kQ4_1>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ5_0: return Rows<GgmlType::kQ5_0>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ5_1: return Rows<GgmlType::kQ5_1>(w, in, y, ldy, r0, r1);
    case GgmlType::kIQ4_NL: return Rows<GgmlType::kIQ4_NL>(w, in, y, ldy, r0, r1);  // whole panels only
    default: return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr::kernels {
HWY_EXPORT(LegacyRowsImpl);
void LegacyRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(LegacyRowsImpl)(w, in, y, ldy, r0, r1);
}
}  // namespace tlr::kernels
#endif
