// Kernel tests for nn.h (kernel label): RMS norm, RoPE, SwiGLU, GELU-GLU, the residual add
// and attention (whole and sliding-window) over every KV type, on every SIMD target compiled
// in, against the scalar references of nn_ref.cc. Tolerances come from the data: float rounding (eps) times the size
// of the terms each result sums (e.g. sum |q_i k_i| for a score), never a fixed constant.
#include "ops/nn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/matmul.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace tlr {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

class NnKernels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ASSERT_TRUE(ForceSimdTarget(GetParam())) << GetParam(); }
  void TearDown() override { ForceSimdTarget(""); }
  std::mt19937 rng_{42};
  std::vector<float> Normal(int64_t n, float sd) {
    std::normal_distribution<float> dist(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng_);
    return v;
  }
};

TEST_P(NnKernels, RmsNormMatchesReference) {
  for (int64_t n : {1, 7, 16, 64, 100, 896}) {
    const auto x = Normal(n, 2.0f), w = Normal(n, 1.0f);
    std::vector<float> y(n), ref(n), inplace = x;
    RmsNorm(x.data(), w.data(), y.data(), n, 1e-6f);
    RmsNormRef(x.data(), w.data(), ref.data(), n, 1e-6f);
    RmsNorm(inplace.data(), w.data(), inplace.data(), n, 1e-6f);
    for (int64_t i = 0; i < n; ++i) {
      // Sum of squares: n roundings; the reciprocal square root and two products: a few more.
      EXPECT_NEAR(y[i], ref[i], (n + 8) * kEps * std::fabs(ref[i]) + 1e-30) << "n " << n << " i " << i;
    }
    EXPECT_EQ(y, inplace) << "y may alias x";
  }
}

TEST_P(NnKernels, SwiGluMatchesReference) {
  for (int64_t n : {1, 5, 16, 100, 4864}) {
    auto g = Normal(n, 3.0f);
    const auto u = Normal(n, 1.0f);
    auto ref = g;
    SwiGlu(g.data(), u.data(), n);
    SwiGluRef(ref.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // exp (a few ulp), 1 + e, the division and two products.
      EXPECT_NEAR(g[i], ref[i], 16 * kEps * std::fabs(ref[i]) + 1e-30) << "n " << n << " i " << i;
    }
  }
}

TEST_P(NnKernels, GeluGluMatchesReference) {
  for (int64_t n : {1, 5, 16, 100, 6912}) {
    const auto x = Normal(n, 3.0f), u = Normal(n, 1.0f);
    auto g = x, ref = x;
    GeluGlu(g.data(), u.data(), n);
    GeluGluRef(ref.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // tanh errs by a few ulp of its value (at most 1), so 1 + tanh by a few eps absolutely,
      // which x * u / 2 scales (it dominates in the negative tail, where 1 + tanh cancels);
      // the cubic and the products add a few relative roundings of the result.
      const double bound = 16 * kEps * (std::fabs(ref[i]) + std::fabs(static_cast<double>(x[i]) * u[i]));
      EXPECT_NEAR(g[i], ref[i], bound + 1e-30) << "n " << n << " i " << i;
    }
  }
}

TEST_P(NnKernels, AddIsExact) {
  for (int64_t n : {1, 9, 64, 1000}) {
    auto y = Normal(n, 1.0f);
    const auto x = Normal(n, 1.0f);
    auto ref = y;
    AddInPlace(y.data(), x.data(), n);
    AddInPlaceRef(ref.data(), x.data(), n);
    EXPECT_EQ(y, ref);  // one correctly rounded addition per element either way
  }
}

TEST_P(NnKernels, RopeMatchesReference) {
  for (int64_t hd : {16, 64, 128}) {
    std::vector<float> inv_freq(hd / 2), cs(hd);
    for (int64_t i = 0; i < hd / 2; ++i) inv_freq[i] = static_cast<float>(std::pow(1e6, -2.0 * i / hd));
    for (float pos : {0.0f, 1.0f, 17.0f, 2000.0f, 30000.0f}) {
      RopeAngles(pos, inv_freq.data(), hd / 2, cs.data());
      for (bool neox : {true, false}) {
        auto v = Normal(hd, 1.0f);
        auto ref = v;
        const auto orig = v;
        Rope(v.data(), hd, cs.data(), neox);
        RopeRef(ref.data(), hd, pos, inv_freq.data(), neox);
        for (int64_t i = 0; i < hd / 2; ++i) {
          const int64_t a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
          // The angle is rounded to float (relative eps), cos/sin and the rotation add a few
          // roundings: error <= (|theta| + 4) * eps * (|x_a| + |x_b|).
          const double theta = static_cast<double>(pos) * inv_freq[i];
          const double tol = (std::fabs(theta) + 4) * kEps * (std::fabs(orig[a]) + std::fabs(orig[b])) + 1e-30;
          EXPECT_NEAR(v[a], ref[a], tol) << "hd " << hd << " pos " << pos << " i " << i;
          EXPECT_NEAR(v[b], ref[b], tol) << "hd " << hd << " pos " << pos << " i " << i;
        }
      }
    }
  }
}

// Keys (tiles) or values (rows) of n positions of head_dim values of `type`, at a row stride
// of row_bytes (>= KvRowBytes), as a cache stores them: bytes no kernel may read (row
// padding) are NaN patterns; unused lanes of the last key tile are zero.
struct TestKv {
  std::vector<uint8_t> bytes;
  KvView view;
};
TestKv MakeKv(bool keys, GgmlType type, const std::vector<float>& f, int64_t n, int64_t hd, size_t row_bytes) {
  TestKv t;
  const int64_t n_tiles = (n + kKeyTile - 1) / kKeyTile;
  t.bytes.assign(n_tiles * kKeyTile * row_bytes, 0xFF);
  for (int64_t j = 0; j < n; ++j) {
    if (keys) {
      if (j % kKeyTile == 0) std::memset(t.bytes.data() + j * row_bytes, 0, kKeyTile * KvRowBytes(type, hd));
      StoreKey(type, t.bytes.data(), row_bytes, hd, j, f.data() + j * hd);
    } else {
      StoreValue(type, t.bytes.data(), row_bytes, hd, j, f.data() + j * hd);
    }
  }
  t.view = {type, t.bytes.data(), row_bytes};
  return t;
}

// Error bound for attention output (h, i) against the double reference over the same stored
// values. With s_j the scores, x_j = s_j - max s, w_j the softmax weights and
// A_j = scale * sum |q_i k_ji|: each score is a hd-term float dot (error <= (hd + 4) eps A_j,
// E the largest); exp(x_j) then errs relatively by <= 2E + (|x_j| + 8) eps; the weighted sum
// of n_kv values and the normalisation add n_kv + 16 roundings:
//   |out - ref| <= 2 sum_j w_j |v_ji| (2E + (|x_j| + n_kv + 24) eps).
std::vector<double> AttentionBounds(const float* in_q, int64_t n_q, const KvView& k, const KvView& v, int64_t n_kv,
                                    int64_t hd, float scale, int64_t first) {
  std::vector<float> kf(n_kv * hd), vf(n_kv * hd);
  for (int64_t j = 0; j < n_kv; ++j) {
    LoadKey(k, hd, j, kf.data() + j * hd);
    LoadValue(v, hd, j, vf.data() + j * hd);
  }
  std::vector<double> bound(n_q * hd, 0.0), s(n_kv);
  std::vector<float> qa(n_q * hd);  // the query as the kernel uses it
  for (int64_t h = 0; h < n_q; ++h) AttentionQuery(k.type, in_q + h * hd, hd, qa.data() + h * hd);
  const float* q = qa.data();
  for (int64_t h = 0; h < n_q; ++h) {
    double mx = -INFINITY, e = 0;
    for (int64_t j = first; j < n_kv; ++j) {
      double dot = 0, abs = 0;
      for (int64_t i = 0; i < hd; ++i) {
        dot += static_cast<double>(q[h * hd + i]) * kf[j * hd + i];
        abs += std::fabs(static_cast<double>(q[h * hd + i]) * kf[j * hd + i]);
      }
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
      e = std::max(e, (hd + 4) * kEps * abs * scale);
    }
    double l = 0;
    for (int64_t j = first; j < n_kv; ++j) l += std::exp(s[j] - mx);
    for (int64_t j = first; j < n_kv; ++j) {
      const double w = std::exp(s[j] - mx) / l;
      const double rel = 2 * e + (std::fabs(s[j] - mx) + n_kv + 24) * kEps;
      for (int64_t i = 0; i < hd; ++i) bound[h * hd + i] += 2 * w * std::fabs(vf[j * hd + i]) * rel;
    }
    if (v.type == GgmlType::kQ8_0) {
      // Each weight times its block scale may be rounded to 1/kQ8WeightSteps of the chunk's
      // largest block scale, relative to the running maximum score m_c after the chunk
      // (nn.h): half a step times the value's integer, per position (twice, for the float
      // roundings around it).
      double m_c = -INFINITY;
      for (int64_t c0 = first / kAttentionChunk * kAttentionChunk; c0 < n_kv; c0 += kAttentionChunk) {
        const int64_t c1 = std::min(n_kv, c0 + kAttentionChunk);
        for (int64_t j = std::max(c0, first); j < c1; ++j) m_c = std::max(m_c, s[j]);
        for (int64_t b = 0; b < hd / 32; ++b) {
          double top = 0;
          for (int64_t j = std::max(c0, first); j < c1; ++j) {
            const auto* block = reinterpret_cast<const BlockQ8_0*>(v.Row(j)) + b;
            top = std::max(top, std::exp(m_c - mx) / l * std::fabs(F16ToF32(block->d)));
          }
          for (int64_t j = std::max(c0, first); j < c1; ++j) {
            const auto* block = reinterpret_cast<const BlockQ8_0*>(v.Row(j)) + b;
            for (int64_t i = 0; i < 32; ++i) {
              bound[h * hd + b * 32 + i] += 2 * top / (2 * kQ8WeightSteps) * std::abs(block->qs[i]);
            }
          }
        }
      }
    }
  }
  return bound;
}

TEST_P(NnKernels, AttentionMatchesReferenceForEveryKvType) {
  struct Shape {
    int64_t hd, n_q;
  };
  const Shape shapes[] = {{16, 2}, {24, 3}, {32, 1}, {64, 7}, {64, 9}, {128, 4}, {64, 14}};
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0}) {
    for (const Shape& sh : shapes) {
      if (!CheckKvType(type, sh.hd).ok()) continue;
      const int64_t hd = sh.hd, n_q = sh.n_q, n_max = 300;
      // Keys with a shared offset (scores spread over several units, as in a real model),
      // a few values that are f16 subnormals, queries scaled like a trained model's.
      auto kf = Normal(n_max * hd, 1.0f), vf = Normal(n_max * hd, 1.0f);
      const auto offset = Normal(hd, 1.5f);
      for (int64_t j = 0; j < n_max; ++j) {
        for (int64_t i = 0; i < hd; ++i) kf[j * hd + i] += offset[i];
      }
      kf[5] = 3e-6f;
      vf[7] = -2e-7f;
      const auto q = Normal(n_q * hd, 1.0f);
      const size_t rb = KvRowBytes(type, hd);
      for (size_t stride : {rb, 3 * rb}) {
        const TestKv k = MakeKv(true, type, kf, n_max, hd, stride), v = MakeKv(false, type, vf, n_max, hd, stride);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (auto [first, n_kv] : std::initializer_list<std::pair<int64_t, int64_t>>{
                 {0, 1}, {0, 2}, {0, 5}, {0, 63}, {0, 64}, {0, 65}, {0, 129}, {0, 300},
                 // Sliding windows: starting inside a chunk, on a chunk or tile boundary, one position.
                 {3, 9}, {17, 65}, {64, 129}, {100, 300}, {299, 300}, {250, 300}}) {
          SCOPED_TRACE("window [" + std::to_string(first) + ", " + std::to_string(n_kv) + ")");
          std::vector<float> out(n_q * hd, NAN), ref(n_q * hd);
          Attention(q.data(), n_q, k.view, v.view, n_kv, hd, scale, out.data(), first);
          AttentionRef(q.data(), n_q, k.view, v.view, n_kv, hd, scale, ref.data(), first);
          const auto bound = AttentionBounds(q.data(), n_q, k.view, v.view, n_kv, hd, scale, first);
          for (int64_t x = 0; x < n_q * hd; ++x) {
            ASSERT_NEAR(out[x], ref[x], bound[x] + 1e-30)
                << GgmlTraits(type).name << " hd " << hd << " n_q " << n_q << " n_kv " << n_kv << " head "
                << x / hd << " i " << x % hd;
          }
          // Each head's result does not depend on the heads computed with it.
          for (int64_t h = 0; h < n_q; h += 3) {
            std::vector<float> one(hd);
            Attention(q.data() + h * hd, 1, k.view, v.view, n_kv, hd, scale, one.data(), first);
            ASSERT_EQ(0, std::memcmp(one.data(), out.data() + h * hd, hd * sizeof(float)))
                << GgmlTraits(type).name << " hd " << hd << " head " << h << " n_kv " << n_kv;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, NnKernels, ::testing::ValuesIn(CompiledSimdTargets()),
                         [](const auto& info) { return info.param; });

// The query rounding of a q8_0 cache (nn.h): the GGUF q8_0 rule with round-half-even, and
// the zero, NaN and infinity cases.
TEST(KvQuery, QuantizeQueryQ8RoundsToNearestEven) {
  float x[32] = {};
  x[0] = 127.0f;  // amax: the scale is 1 and every value is its own integer
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.49f;
  int8_t q[32];
  EXPECT_EQ(QuantizeQueryQ8(x, q), 1.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 2);
  EXPECT_EQ(q[2], -4);
  EXPECT_EQ(q[3], 0);
  std::fill(x, x + 32, 0.0f);
  EXPECT_EQ(QuantizeQueryQ8(x, q), 0.0f);
  EXPECT_EQ(q[5], 0);
  x[7] = INFINITY;
  EXPECT_TRUE(std::isnan(QuantizeQueryQ8(x, q)));
  EXPECT_EQ(q[7], 0);
  float y[64], out[64];
  for (int i = 0; i < 64; ++i) y[i] = 0.37f * (i - 20);
  AttentionQuery(GgmlType::kF16, y, 64, out);
  EXPECT_EQ(0, std::memcmp(y, out, sizeof(y)));
  AttentionQuery(GgmlType::kQ8_0, y, 64, out);
  for (int i = 0; i < 64; ++i) {
    const double amax = i < 32 ? 0.37 * 20 : 0.37 * 43;  // each block's largest |y|
    EXPECT_NEAR(out[i], y[i], amax / 254 * 1.0001) << i;
  }
}

// Every stored position reads back as its row converted by the quant layer (Quantize, then
// Dequantize): keys through the tile layout, values as rows.
TEST(KvLayout, PositionsReadBackAsTheirQuantizedRows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0}) {
    const int64_t hd = 64, n = 37;
    const size_t rb = KvRowBytes(type, hd) + 4;
    std::vector<float> f(n * hd), want(hd), got(hd);
    for (auto& x : f) x = dist(rng);
    const TestKv k = MakeKv(true, type, f, n, hd, rb), v = MakeKv(false, type, f, n, hd, rb);
    std::vector<uint8_t> row(KvRowBytes(type, hd));
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_TRUE(Quantize(type, f.data() + j * hd, row.data(), hd).ok());
      ASSERT_TRUE(Dequantize(type, row.data(), want.data(), hd).ok());
      LoadKey(k.view, hd, j, got.data());
      EXPECT_EQ(got, want) << GgmlTraits(type).name << " key " << j;
      LoadValue(v.view, hd, j, got.data());
      EXPECT_EQ(got, want) << GgmlTraits(type).name << " value " << j;
    }
  }
}

TEST(KvType, SupportedTypesAndRowSizes) {
  EXPECT_TRUE(CheckKvType(GgmlType::kF32, 24).ok());
  EXPECT_TRUE(CheckKvType(GgmlType::kF16, 24).ok());
  EXPECT_TRUE(CheckKvType(GgmlType::kQ8_0, 64).ok());
  const Status s = CheckKvType(GgmlType::kQ8_0, 24);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("multiple of 32"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckKvType(GgmlType::kQ8_0, kMaxQ8HeadDim).ok());
  const Status wide = CheckKvType(GgmlType::kQ8_0, kMaxQ8HeadDim + 32);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.message().find("at most 512"), std::string::npos) << wide.message();
  EXPECT_TRUE(CheckKvType(GgmlType::kF16, kMaxQ8HeadDim + 32).ok());
  EXPECT_FALSE(CheckKvType(GgmlType::kQ4_0, 64).ok());
  EXPECT_EQ(KvRowBytes(GgmlType::kF32, 64), 256u);
  EXPECT_EQ(KvRowBytes(GgmlType::kF16, 64), 128u);
  EXPECT_EQ(KvRowBytes(GgmlType::kQ8_0, 64), 68u);
}

}  // namespace
}  // namespace tlr
