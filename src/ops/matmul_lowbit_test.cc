// Kernel tests (kernel label) for the low-bit MatMul kernels (Q2_K, Q3_K, IQ4_NL, IQ4_XS) on
// every SIMD target compiled in, against the scalar references with tolerances derived from
// the data:
//   - vs MatMulRowsRef (same Q8A activations, sums in double): float rounding only, bounded by
//     8 * eps * (groups + 8) * sum |w_i * a_i|;
//   - vs MatMulRowsDequant (float activations): plus the activation quantization error,
//     bounded by the sum over blocks of d_a / 2 * sum |w_i|;
//   - batch invariance: a (row, token) result is bit-identical whatever the other tokens of
//     the call and whatever row range it computes.
#include "ops/matmul_lowbit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ops/matmul.h"
#include "quant/quantize.h"

namespace tlr {
namespace {

// Random weights of `type`: half the rows quantized from Gaussian floats, half random block
// bytes with sane f16 scales (every code, every sub-block scale and sign).
std::vector<uint8_t> RandomLowBitWeights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const auto& tr = GgmlTraits(type);
  const size_t row_bytes = cols / tr.block_size * tr.type_size;
  std::vector<uint8_t> data(rows * row_bytes);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  std::vector<float> f(cols);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = data.data() + r * row_bytes;
    if (r % 2 == 0) {
      for (auto& v : f) v = normal(rng);
      EXPECT_TRUE(Quantize(type, f.data(), row, cols).ok());
      continue;
    }
    for (size_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(rng());
    for (size_t off = 0; off < row_bytes; off += tr.type_size) {
      auto put = [&](size_t at, float v) {
        const uint16_t h = F32ToF16(v);
        std::memcpy(row + off + at, &h, 2);
      };
      switch (type) {
        case GgmlType::kQ2_K: put(80, scale(rng)); put(82, scale(rng)); break;
        case GgmlType::kQ3_K: put(108, (rng() & 1 ? 1 : -1) * scale(rng)); break;
        default: put(0, (rng() & 1 ? 1 : -1) * scale(rng)); break;  // IQ4_NL, IQ4_XS
      }
    }
  }
  return data;
}

// Activations: Gaussian rows, plus a row of zeros and a row of +-1 (every value quantizes to
// +-127, the extreme of the integer products).
std::vector<float> Activations(int64_t n_tokens, int64_t cols, int64_t ld, std::mt19937& rng) {
  std::vector<float> x(n_tokens * ld, 0.0f);
  std::normal_distribution<float> act(0.0f, 1.0f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < cols; ++i) {
      float& v = x[t * ld + i];
      if (t == 1) v = 0;
      else if (t == 2) v = (rng() & 1) ? 1.0f : -1.0f;
      else v = act(rng);
    }
  }
  return x;
}

class LowBitKernels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ASSERT_TRUE(ForceSimdTarget(GetParam())) << GetParam(); }
  void TearDown() override { ForceSimdTarget(""); }
};

struct LowBitCase {
  GgmlType type;
  int64_t cols;
};

constexpr LowBitCase kCases[] = {
    {GgmlType::kQ2_K, 256},   {GgmlType::kQ2_K, 2304},   {GgmlType::kQ3_K, 256},
    {GgmlType::kQ3_K, 1280},  {GgmlType::kIQ4_NL, 32},   {GgmlType::kIQ4_NL, 96},
    {GgmlType::kIQ4_NL, 896}, {GgmlType::kIQ4_XS, 256},  {GgmlType::kIQ4_XS, 2304},
};

// Checks MatMulRowsLowBit against both references for `n_tokens` tokens.
void CheckAgainstReferences(GgmlType type, int64_t rows, int64_t cols, int64_t n_tokens,
                            std::mt19937& rng) {
  auto wdata = RandomLowBitWeights(type, rows, cols, rng);
  const WeightView w{type, wdata.data(), rows, cols, wdata.size() / rows};
  const int64_t ld = cols + 5;  // a row stride that is not the row length
  const auto x = Activations(n_tokens, cols, ld, rng);
  MatMulInput in;
  // Q8A activations are the same for every quantized type; kQ8_0 asks for them whether or
  // not matmul.cc already routes the low-bit types.
  in.Prepare(GgmlType::kQ8_0, x.data(), n_tokens, cols, ld, nullptr);
  ASSERT_TRUE(in.quantized());
  std::vector<float> y(n_tokens * rows), ref(n_tokens * rows), exact(n_tokens * rows), wf(cols);
  MatMulRowsLowBit(w, in, y.data(), rows, 0, rows);
  MatMulRowsRef(w, in, ref.data(), rows, 0, rows);
  MatMulRowsDequant(w, in, exact.data(), rows, 0, rows);
  const double eps = std::numeric_limits<float>::epsilon();
  const int64_t nb = cols / 32;
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_TRUE(Dequantize(type, w.Row(r), wf.data(), cols).ok());
    for (int64_t t = 0; t < n_tokens; ++t) {
      double abs_sum = 0, quant_bound = 0;
      for (int64_t i = 0; i < cols; ++i) abs_sum += std::fabs(wf[i] * x[t * ld + i]);
      for (int64_t b = 0; b < nb; ++b) {
        double wsum = 0;
        for (int i = 0; i < 32; ++i) wsum += std::fabs(wf[b * 32 + i]);
        quant_bound += in.d[t * nb + b] / 2 * wsum;
      }
      const double round_bound = 8 * eps * (nb + 8) * (abs_sum + quant_bound) + 1e-30;
      const size_t k = t * rows + r;
      ASSERT_TRUE(std::isfinite(y[k]));
      EXPECT_NEAR(y[k], ref[k], round_bound) << GgmlTraits(type).name << " cols " << cols << " row "
                                             << r << " token " << t << " of " << n_tokens;
      EXPECT_NEAR(y[k], exact[k], round_bound + quant_bound) << GgmlTraits(type).name << " row " << r;
    }
  }
}

TEST_P(LowBitKernels, MatchScalarReferences) {
  EXPECT_EQ(ActiveSimdTarget(), GetParam());
  std::mt19937 rng(4321);
  for (const LowBitCase& c : kCases) {
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 9}) {
      CheckAgainstReferences(c.type, 13, c.cols, n_tokens, rng);
    }
  }
}

// Rows longer than the kernels' column window (32768) are summed window by window.
TEST_P(LowBitKernels, LongRowsMatchReferences) {
  std::mt19937 rng(77);
  for (GgmlType type : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_NL}) {
    CheckAgainstReferences(type, 3, 32768 + 512, 5, rng);
  }
}

TEST_P(LowBitKernels, BatchInvariant) {
  std::mt19937 rng(2024);
  for (const LowBitCase& c : kCases) {
    const int64_t rows = 37, n_tokens = 9;
    auto wdata = RandomLowBitWeights(c.type, rows, c.cols, rng);
    const WeightView w{c.type, wdata.data(), rows, c.cols, wdata.size() / rows};
    const auto x = Activations(n_tokens, c.cols, c.cols, rng);
    MatMulInput all;
    all.Prepare(GgmlType::kQ8_0, x.data(), n_tokens, c.cols, c.cols, nullptr);
    std::vector<float> y_all(n_tokens * rows);
    MatMulRowsLowBit(w, all, y_all.data(), rows, 0, rows);
    // Every contiguous run of tokens, over a few row ranges.
    for (int64_t t0 = 0; t0 < n_tokens; ++t0) {
      for (int64_t nt = 1; t0 + nt <= n_tokens; ++nt) {
        MatMulInput part;
        part.Prepare(GgmlType::kQ8_0, x.data() + t0 * c.cols, nt, c.cols, c.cols, nullptr);
        const int64_t r0 = static_cast<int64_t>(rng() % rows);
        const int64_t r1 = r0 + 1 + static_cast<int64_t>(rng() % (rows - r0));
        std::vector<float> y(nt * rows, std::nanf(""));
        MatMulRowsLowBit(w, part, y.data(), rows, r0, r1);
        for (int64_t t = 0; t < nt; ++t) {
          for (int64_t r = r0; r < r1; ++r) {
            const float a = y[t * rows + r], b = y_all[(t0 + t) * rows + r];
            ASSERT_EQ(0, std::memcmp(&a, &b, sizeof(float)))
                << GgmlTraits(c.type).name << " token " << t0 + t << " in a call of " << nt
                << " tokens, row " << r << " of [" << r0 << ", " << r1 << "): " << a << " vs " << b;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, LowBitKernels, ::testing::ValuesIn(CompiledSimdTargets()),
                         [](const auto& info) { return info.param; });

TEST(LowBit, SupportedTypes) {
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS}) {
    EXPECT_TRUE(LowBitSupports(t)) << GgmlTraits(t).name;
  }
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kF32, GgmlType::kQ8_K}) {
    EXPECT_FALSE(LowBitSupports(t)) << GgmlTraits(t).name;
  }
}

}  // namespace
}  // namespace tlr
