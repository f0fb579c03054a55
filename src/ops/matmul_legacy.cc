// MatMul kernels for the 32-element block types (ops layer): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// in the panel layout (matmul_panel-inl.h) or, when not repacked, in GGUF layout
// (matmul_quant-inl.h), compiled for every SIMD target. See matmul_kernels.h.
#include <algorithm>

#include "ops/matmul_kernels.h"
#include "ops/panel_layout.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_legacy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "ops/matmul_panel-inl.h"
#include "ops/matmul_quant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {

// Rows [r0, r1): whole panels straight into y; a panel cut by r0 or r1 through a small buffer
// (its 8 rows are computed and the wanted ones copied, so a row's result never depends on
// the range); rows after the last full panel in GGUF layout.
template <GgmlType kType>
void Rows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (!w.repacked) return QuantRows<kType>(w, in, y, ldy, r0, r1);
  const int64_t panel_end = w.n_rows / kPanelRows * kPanelRows;
  int64_t r = r0;
  while (r < std::min(r1, panel_end)) {
    const int64_t p = r / kPanelRows;
    if (r % kPanelRows == 0 && r + kPanelRows <= r1) {
      const int64_t p_end = std::min(r1, panel_end) / kPanelRows;
      PanelRows<kType>(w, in, y, ldy, p, p_end);
      r = p_end * kPanelRows;
      continue;
    }
    const int64_t hi = std::min(r1, (p + 1) * kPanelRows);
    const int64_t ng = in.n_cols / 32;
    const uint8_t* panel = w.data + p * kPanelRows * static_cast<int64_t>(w.row_bytes);
    for (int64_t t = 0; t < in.n_tokens; ++t) {
      float buf[kPanelRows];
      const ActView a{in.qs + t * in.n_cols, in.d + t * ng, in.s + t * ng};
      PanelDot<kType, 1>(panel, ng, &a, buf, 0);
      for (int64_t k = r; k < hi; ++k) y[t * ldy + k] = buf[k - p * kPanelRows];
    }
    r = hi;
  }
  if (r1 > panel_end) QuantRows<kType>(w, in, y, ldy, std::max(r0, panel_end), r1);
}

void LegacyRowsImpl(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  switch (w.type) {
    case GgmlType::kQ8_0: return Rows<GgmlType::kQ8_0>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ4_0: return Rows<GgmlType::kQ4_0>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ4_1: return Rows<GgmlType::kQ4_1>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ5_0: return Rows<GgmlType::kQ5_0>(w, in, y, ldy, r0, r1);
    case GgmlType::kQ5_1: return Rows<GgmlType::kQ5_1>(w, in, y, ldy, r0, r1);
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
