// Scalar references for MatMul (ops layer): what the SIMD kernels must compute, written
// straight from the block formats, with no SIMD and sums in double.
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/matmul.h"
#include "quant/quantize.h"

namespace tlr {
namespace {
// Row r of w in GGUF layout (unrepacked into `buf` when needed).
const uint8_t* GgufRow(const WeightView& w, int64_t r, std::vector<uint8_t>& buf) {
  if (!w.repacked) return w.Row(r);
  buf.resize(w.row_bytes);
  UnrepackRow(w, r, buf.data());
  return buf.data();
}
}  // namespace

void MatMulRowsRef(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0,
                   int64_t r1) {
  // Weights dequantized to float, activations as their Q8A values (d_a * q_a): the kernels'
  // sum_b [scale_w * d_a * sum(w_int * q_a) + offset_w * s_a] is exactly this, up to float
  // rounding and summation order.
  const int64_t n = w.n_cols;
  std::vector<float> wf(n);
  std::vector<double> af(n);
  std::vector<uint8_t> buf;
  for (int64_t t = 0; t < in.n_tokens; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      if (in.quantized()) {
        af[i] = static_cast<double>(in.d[t * (n / 32) + i / 32]) * in.qs[t * n + i];
      } else {
        af[i] = in.x[t * in.ld + i];
      }
    }
    for (int64_t r = r0; r < r1; ++r) {
      (void)Dequantize(w.type, GgufRow(w, r, buf), wf.data(), n);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(wf[i]) * af[i];
      y[t * ldy + r] = static_cast<float>(s);
    }
  }
}

void MatMulRowsDequant(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy,
                       int64_t r0, int64_t r1) {
  const int64_t n = w.n_cols;
  std::vector<float> wf(n);
  std::vector<uint8_t> buf;
  for (int64_t r = r0; r < r1; ++r) {
    (void)Dequantize(w.type, GgufRow(w, r, buf), wf.data(), n);
    for (int64_t t = 0; t < in.n_tokens; ++t) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(wf[i]) * in.x[t * in.ld + i];
      y[t * ldy + r] = static_cast<float>(s);
    }
  }
}

}  // namespace tlr
