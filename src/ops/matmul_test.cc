// Kernel tests (kernel label): every MatMul kernel on every SIMD target compiled in, against
// the scalar references, with tolerances derived from the data:
//   - vs MatMulRowsRef (same Q8A activations): float rounding only, bounded by
//     8 * eps * (blocks + 8) * sum|w_i * a_i|;
//   - vs MatMulRowsDequant (float activations): plus the activation quantization error,
//     bounded by sum over blocks of d_a / 2 * sum|w_i| (round-to-nearest of each activation).
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "hwy/targets.h"
#include "ops/thread_pool.h"
#include "quant/quantize.h"

namespace tlr {
namespace {

// Random weights of `type`: quantized from Gaussian floats where a quantizer exists, random
// block bytes with sane scales otherwise (covers every code, e.g. q8 = -128).
std::vector<uint8_t> RandomWeights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const auto& tr = GgmlTraits(type);
  const size_t row_bytes = cols / tr.block_size * tr.type_size;
  std::vector<uint8_t> data(rows * row_bytes);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  const bool k_type = type == GgmlType::kQ4_K || type == GgmlType::kQ6_K || type == GgmlType::kIQ4_XS ||
                      type == GgmlType::kQ2_K || type == GgmlType::kQ3_K;
  if (type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1 || type == GgmlType::kQ5_K ||
      ((type == GgmlType::kQ8_0 || k_type) && (rng() & 1))) {
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(0.005f, 0.05f);
    for (size_t off = 0; off < data.size(); off += tr.type_size) {
      const bool wide = type == GgmlType::kQ6_K || type == GgmlType::kIQ4_XS;  // |q * scale| up to ~4000
      const uint16_t d = F32ToF16(scale(rng) / (wide ? 64 : 1));
      const uint16_t m = F32ToF16(-scale(rng) * 8);
      // Q6_K keeps d last (Q2_K d, dmin and Q3_K d too); Q4_K and Q5_K have d, dmin first
      // (dmin positive).
      const size_t d_at = type == GgmlType::kQ6_K ? 208 : type == GgmlType::kQ2_K ? 80 : type == GgmlType::kQ3_K ? 108 : 0;
      std::memcpy(&data[off + d_at], &d, 2);
      if (type == GgmlType::kQ2_K) {
        const uint16_t dmin = F32ToF16(scale(rng));
        std::memcpy(&data[off + 82], &dmin, 2);
      }
      if (type == GgmlType::kQ5_1) std::memcpy(&data[off + 2], &m, 2);
      if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K) {
        const uint16_t dmin = F32ToF16(scale(rng));
        std::memcpy(&data[off + 2], &dmin, 2);
      }
    }
    return data;
  }
  std::vector<float> f(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : f) v = normal(rng);
    EXPECT_TRUE(Quantize(type, f.data(), data.data() + r * row_bytes, cols).ok());
  }
  return data;
}

struct Case {
  GgmlType type;
  int64_t cols;
};

class MatMulKernels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ASSERT_TRUE(ForceSimdTarget(GetParam())) << GetParam(); }
  void TearDown() override { ForceSimdTarget(""); }
};

TEST_P(MatMulKernels, MatchScalarReferences) {
  EXPECT_EQ(ActiveSimdTarget(), GetParam());
  std::mt19937 rng(1234);
  const Case cases[] = {
      {GgmlType::kF32, 100}, {GgmlType::kF16, 96},  {GgmlType::kBF16, 64}, {GgmlType::kQ8_0, 96},
      {GgmlType::kQ4_0, 128}, {GgmlType::kQ4_1, 64}, {GgmlType::kQ5_0, 96}, {GgmlType::kQ5_1, 64},
      {GgmlType::kQ4_K, 512}, {GgmlType::kQ5_K, 256}, {GgmlType::kQ6_K, 512},
  };
  std::normal_distribution<float> act(0.0f, 1.0f);
  for (const Case& c : cases) {
    ASSERT_TRUE(MatMulSupports(c.type));
    const int64_t rows = 19;
    auto wdata = RandomWeights(c.type, rows, c.cols, rng);
    WeightView w{c.type, wdata.data(), rows, c.cols, wdata.size() / rows};
    std::vector<float> wf(c.cols);
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 9}) {
      const int64_t ld = c.cols + 3;  // a row stride that is not the row length
      std::vector<float> x(n_tokens * ld);
      for (auto& v : x) v = act(rng);
      MatMulInput in;
      in.Prepare(c.type, x.data(), n_tokens, c.cols, ld, nullptr);
      std::vector<float> y(n_tokens * rows), ref(n_tokens * rows), exact(n_tokens * rows);
      MatMulRows(w, in, y.data(), rows, 0, rows);
      MatMulRowsRef(w, in, ref.data(), rows, 0, rows);
      MatMulRowsDequant(w, in, exact.data(), rows, 0, rows);
      const double eps = std::numeric_limits<float>::epsilon();
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(Dequantize(c.type, w.Row(r), wf.data(), c.cols).ok());
        for (int64_t t = 0; t < n_tokens; ++t) {
          double abs_sum = 0, quant_bound = 0;
          for (int64_t i = 0; i < c.cols; ++i) abs_sum += std::fabs(wf[i] * x[t * ld + i]);
          if (in.quantized()) {
            for (int64_t b = 0; b < c.cols / 32; ++b) {
              double wsum = 0;
              for (int i = 0; i < 32; ++i) wsum += std::fabs(wf[b * 32 + i]);
              quant_bound += in.d[t * (c.cols / 32) + b] / 2 * wsum;
            }
          }
          const double round_bound = 8 * eps * (c.cols / 32 + 8) * (abs_sum + quant_bound) + 1e-30;
          const size_t k = t * rows + r;
          EXPECT_NEAR(y[k], ref[k], round_bound)
              << GgmlTraits(c.type).name << " row " << r << " token " << t << " of " << n_tokens;
          EXPECT_NEAR(y[k], exact[k], round_bound + quant_bound) << GgmlTraits(c.type).name;
        }
      }
    }
  }
}

// Panel layout (RepackMatrix): it round-trips, the kernel on repacked rows matches the
// references (which read the rows back in GGUF layout) for every panel type (the 32-element
// types and the K-quants), with rows that fill panels and a tail that does not; and a (row, token) result is bit-identical whatever
// the number of tokens in the call and whatever row range asked for it (batch invariance).
TEST_P(MatMulKernels, PanelLayoutMatchesReferencesAndIsBatchInvariant) {
  std::mt19937 rng(5);
  std::normal_distribution<float> act(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                        GgmlType::kIQ4_NL, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kIQ4_XS,
                        GgmlType::kQ2_K, GgmlType::kQ3_K}) {
    const bool k_quant = GgmlTraits(type).block_size == 256;
    for (int64_t cols : k_quant ? std::vector<int64_t>{256, 512, 1280} : std::vector<int64_t>{32, 96, 896}) {
      const int64_t rows = 19;  // two panels and three rows in GGUF layout
      auto wdata = RandomWeights(type, rows, cols, rng);
      WeightView w{type, wdata.data(), rows, cols, wdata.size() / rows};
      std::vector<uint8_t> packed(wdata.size()), back(w.row_bytes);
      RepackMatrix(w, packed.data());
      WeightView wr = w;
      wr.data = packed.data();
      wr.repacked = true;
      for (int64_t r = 0; r < rows; ++r) {
        UnrepackRow(wr, r, back.data());
        ASSERT_EQ(0, std::memcmp(back.data(), w.Row(r), w.row_bytes))
            << GgmlTraits(type).name << " row " << r << " cols " << cols;
      }
      // Two whole tiles of 16 tokens and five more: Q8_0 runs on AMX tiles from 16 tokens
      // where the CPU has them (matmul_amx-inl.h), the last five zero-padded.
      const int64_t max_tokens = 37;
      std::vector<float> x(max_tokens * cols);
      for (auto& v : x) v = act(rng);
      MatMulInput all;
      all.Prepare(type, x.data(), max_tokens, cols, cols, nullptr);
      std::vector<float> y_all(max_tokens * rows), ref(max_tokens * rows);
      MatMulRows(wr, all, y_all.data(), rows, 0, rows);
      MatMulRowsRef(wr, all, ref.data(), rows, 0, rows);
      for (size_t k = 0; k < y_all.size(); ++k) {
        const double tol = 2e-5 * (1 + std::fabs(ref[k])) * (cols / 256 + 1);
        EXPECT_NEAR(y_all[k], ref[k], tol) << GgmlTraits(type).name << " cols " << cols << " k " << k;
      }
      // Each token alone, over ranges that cut panels, equals its row in the full batch.
      for (int64_t t = 0; t < max_tokens; ++t) {
        MatMulInput one;
        one.Prepare(type, x.data() + t * cols, 1, cols, cols, nullptr);
        std::vector<float> y1(rows, -1.0f);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 3}, {3, 11}, {11, 17}, {17, 19}}) {
          MatMulRows(wr, one, y1.data(), rows, r0, r1);
        }
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(y1[r], y_all[t * rows + r]) << GgmlTraits(type).name << " token " << t << " row " << r;
        }
      }
    }
  }
}

// Float weights: a (row, token) result is the same bits whatever the batch (register blocks of
// every token count; F16 and BF16 rows widened to F32 from 4 tokens on, converted in registers
// below, 150 rows read in four far-apart streams there) and whatever row range asked for it
// (row blocks cut anywhere, a row count that no block divides, a length that is not a whole
// number of vectors, rows long enough that a batch takes them in chunks of columns).
TEST_P(MatMulKernels, FloatKernelsAreBatchInvariant) {
  std::mt19937 rng(29);
  std::normal_distribution<float> act(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    // Long rows are taken in chunks: 1100 (a last chunk of a few vectors), 1030 (a last chunk
    // shorter than one vector: only the scalar tail), 1536 (chunks that end exactly at n).
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 7}, {37, 64}, {37, 100}, {37, 896}, {37, 1100},
                              {150, 100}, {150, 1030}, {90, 1536}}) {
      auto wdata = RandomWeights(type, rows, cols, rng);
      WeightView w{type, wdata.data(), rows, cols, wdata.size() / rows};
      const int64_t max_tokens = 13, ld = cols + 5;
      std::vector<float> x(max_tokens * ld);
      for (auto& v : x) v = act(rng);
      // One token at a time, in one stream and in four (what the host uses is set from its CPU),
      // the four over the whole range and over ranges that start past row 0 (a thread's share).
      const int host_streams = GetFloatDecodeStreams();
      std::vector<float> single(max_tokens * rows), streamed(max_tokens * rows), split(max_tokens * rows);
      for (int64_t t = 0; t < max_tokens; ++t) {
        MatMulInput one;
        one.Prepare(type, x.data() + t * ld, 1, cols, ld, nullptr);
        SetFloatDecodeStreams(1);
        MatMulRows(w, one, single.data() + t * rows, rows, 0, rows);
        SetFloatDecodeStreams(4);
        MatMulRows(w, one, streamed.data() + t * rows, rows, 0, rows);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}, {5, rows / 2 + 1}, {rows / 2 + 1, rows}}) {
          MatMulRows(w, one, split.data() + t * rows, rows, r0, r1);
        }
      }
      SetFloatDecodeStreams(host_streams);
      ASSERT_EQ(single, streamed) << GgmlTraits(type).name << " rows " << rows << " cols " << cols;
      ASSERT_EQ(single, split) << GgmlTraits(type).name << " rows " << rows << " cols " << cols << " (ranges)";
      for (int64_t n_tokens : {2, 3, 4, 5, 6, 7, 12, 13}) {
        MatMulInput in;
        in.Prepare(type, x.data(), n_tokens, cols, ld, nullptr);
        std::vector<float> y(n_tokens * rows, -1.0f);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 5}, {5, 22}, {22, rows}}) {
          MatMulRows(w, in, y.data(), rows, r0, r1);
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(y[t * rows + r], single[t * rows + r])
                << GgmlTraits(type).name << " cols " << cols << " tokens " << n_tokens << " token " << t << " row " << r;
          }
        }
      }
    }
  }
}

// Long row ranges go through the two-panel kernels where a target has them (AVX-512 VNNI:
// panel p + i with p + half + i, far apart); short ranges through the one-panel kernels. A
// row's result is the same bits either way, for one token (decode) and for a batch.
TEST_P(MatMulKernels, TwoPanelKernelsMatchOnePanelBitForBit) {
  std::mt19937 rng(17);
  std::normal_distribution<float> act(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kIQ4_NL,
                        GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kIQ4_XS, GgmlType::kQ2_K,
                        GgmlType::kQ3_K}) {
    const bool k_quant = GgmlTraits(type).block_size == 256;
    // 75 panels: half a range is >= 32 KiB apart
    const int64_t rows = 8 * 75 + 3, cols = k_quant ? 1024 : 896;
    auto wdata = RandomWeights(type, rows, cols, rng);
    WeightView w{type, wdata.data(), rows, cols, wdata.size() / rows};
    std::vector<uint8_t> packed(wdata.size());
    RepackMatrix(w, packed.data());
    w.data = packed.data();
    w.repacked = true;
    for (int64_t n_tokens : {1, 3, 8, 11}) {
      std::vector<float> x(n_tokens * cols);
      for (auto& v : x) v = act(rng);
      MatMulInput in;
      in.Prepare(type, x.data(), n_tokens, cols, cols, nullptr);
      // The pieces go through the one-panel kernels, which PanelLayoutMatchesReferences...
      // checks against the scalar references.
      std::vector<float> whole(n_tokens * rows), pieces(n_tokens * rows);
      MatMulRows(w, in, whole.data(), rows, 0, rows);
      for (int64_t r = 0; r < rows; r += 8) MatMulRows(w, in, pieces.data(), rows, r, std::min(rows, r + 8));
      for (size_t k = 0; k < whole.size(); ++k) {
        ASSERT_EQ(whole[k], pieces[k]) << GgmlTraits(type).name << " tokens " << n_tokens << " k " << k;
      }
      // Both prefetch settings (matmul.h WeightPrefetch) run the same arithmetic.
      const WeightPrefetch detected = GetWeightPrefetch();
      for (WeightPrefetch mode : {WeightPrefetch::kFirstLine, WeightPrefetch::kEveryLine}) {
        SetWeightPrefetch(mode);
        MatMulRows(w, in, pieces.data(), rows, 0, rows);
        SetWeightPrefetch(detected);
        ASSERT_EQ(whole, pieces) << GgmlTraits(type).name << " prefetch mode " << static_cast<int>(mode);
      }
    }
  }
}

TEST_P(MatMulKernels, ThreadedMatchesSingleThreaded) {
  std::mt19937 rng(99);
  const int64_t rows = 301, cols = 256;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ5_0, GgmlType::kIQ4_NL, GgmlType::kQ4_K, GgmlType::kQ5_K,
                        GgmlType::kQ6_K, GgmlType::kIQ4_XS, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kF16,
                        GgmlType::kF32}) {
    auto wdata = RandomWeights(type, rows, cols, rng);
    WeightView w{type, wdata.data(), rows, cols, wdata.size() / rows};
    std::vector<uint8_t> packed(wdata.size());
    if (CanRepack(type)) {  // the panel layout, as models load it
      RepackMatrix(w, packed.data());
      w.data = packed.data();
      w.repacked = true;
    }
    std::vector<float> x(7 * cols);
    std::normal_distribution<float> act;
    for (auto& v : x) v = act(rng);
    ThreadPool pool(3);
    MatMulInput in;
    in.Prepare(type, x.data(), 7, cols, cols, &pool);
    std::vector<float> y1(7 * rows), y3(7 * rows);
    MatMulRows(w, in, y1.data(), rows, 0, rows);
    MatMul(w, in, y3.data(), rows, &pool);
    EXPECT_EQ(y1, y3);  // same kernel, same sums: bit-identical
    for (int64_t t = 0; t < 7; ++t) {  // each token alone: the same bits as in the batch
      MatMulInput one;
      one.Prepare(type, x.data() + t * cols, 1, cols, cols, nullptr);
      std::vector<float> yt(rows);
      MatMul(w, one, yt.data(), rows, &pool);
      ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * rows, rows * sizeof(float)))
          << GgmlTraits(type).name << " token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, MatMulKernels, ::testing::ValuesIn(CompiledSimdTargets()),
                         [](const auto& info) { return info.param; });

// A CPU that runs only what every CPU of its architecture runs (Highway's scalar and emulated
// 128-bit targets): fine when the build compiled that baseline (TLR_SIMD_TARGETS=device on x86),
// else an error that says what to do, where the kernels would die of SIGILL.
TEST(MatMul, ACpuWithNoneOfTheCompiledTargetsIsAnError) {
  hwy::SetSupportedTargetsForTest(HWY_SCALAR | HWY_EMU128);
  const Status s = CheckSimdSupport();
  hwy::SetSupportedTargetsForTest(0);
  const bool baseline_compiled = (HWY_TARGETS & (HWY_SCALAR | HWY_EMU128)) != 0;
  EXPECT_EQ(s.ok(), baseline_compiled) << s.message();
  if (!s.ok()) EXPECT_NE(s.message().find("TLR_SIMD_TARGETS=device"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckSimdSupport().ok());
}

TEST(MatMul, UnsupportedTypesAreReported) {
  EXPECT_FALSE(MatMulSupports(GgmlType::kQ8_1));
  EXPECT_FALSE(MatMulSupports(GgmlType::kI32));
  EXPECT_TRUE(MatMulUsesQ8A(GgmlType::kQ4_K));
  EXPECT_FALSE(MatMulUsesQ8A(GgmlType::kBF16));
}

}  // namespace
}  // namespace tlr
