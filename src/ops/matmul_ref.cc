// Scalar references for MatMul (ops layer): what the SIMD kernels must compute, written
// straight from the block formats, with no SIMD and sums in double.
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/matmul.h"
#include "quant/quantize.h"

namespace tlr {
bool CanRepack(GgmlType type) { return type == GgmlType::kQ4_0; }

void RepackMatrix(const WeightView& w, uint8_t* dst) {
  const int64_t ng = w.n_cols / 32;
  for (int64_t r = 0; r < w.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ4_0*>(w.Row(r));
    uint8_t* out = dst + r * w.row_bytes;
    for (int64_t g = 0; g < ng; ++g) std::memcpy(out + 2 * g, &blocks[g].d, 2);
    uint8_t* nib = out + 2 * ng;
    auto value = [&](int64_t g, int i) {  // the i-th 4-bit value of block g
      return i < 16 ? blocks[g].qs[i] & 0xF : blocks[g].qs[i - 16] >> 4;
    };
    int64_t g = 0;
    for (; g + 1 < ng; g += 2, nib += 32) {
      for (int i = 0; i < 32; ++i) nib[i] = static_cast<uint8_t>(value(g, i) | (value(g + 1, i) << 4));
    }
    if (g < ng) std::memcpy(nib, blocks[g].qs, 16);
  }
}

void UnrepackRow(const WeightView& w, int64_t r, uint8_t* out) {
  const int64_t ng = w.n_cols / 32;
  const uint8_t* row = w.Row(r);
  auto* blocks = reinterpret_cast<BlockQ4_0*>(out);
  const uint8_t* nib = row + 2 * ng;
  int64_t g = 0;
  for (; g + 1 < ng; g += 2, nib += 32) {
    for (int h = 0; h < 2; ++h) {
      std::memcpy(&blocks[g + h].d, row + 2 * (g + h), 2);
      for (int i = 0; i < 16; ++i) {
        const int lo = (nib[i] >> (4 * h)) & 0xF, hi = (nib[i + 16] >> (4 * h)) & 0xF;
        blocks[g + h].qs[i] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
  if (g < ng) {
    std::memcpy(&blocks[g].d, row + 2 * g, 2);
    std::memcpy(blocks[g].qs, nib, 16);
  }
}

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
