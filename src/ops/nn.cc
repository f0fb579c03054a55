// Transformer building blocks (ops layer). See nn.h.
#include "ops/nn.h"

#include <algorithm>
#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/nn.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float DotImpl(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + L), hn::LoadU(d, b + i + L), s1);
  }
  for (; i + L <= n; i += L) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += alpha * x
void AxpyImpl(float alpha, const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// Attention of G query heads that share one KV head (grouped-query attention): each K and V
// row is read once for all G heads while it is in L1, and the softmax exponentials are
// vectorized. scores: [G, n_kv] scratch; q and out: G consecutive head vectors.
void AttentionGroupImpl(const float* q, int64_t G, const float* k, const float* v, int64_t stride,
                        int64_t n_kv, int64_t head_dim, float scale, float* scores, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  constexpr int64_t kMaxG = 64;
  for (int64_t g0 = 0; g0 < G; g0 += kMaxG) {
    const int64_t gn = std::min(kMaxG, G - g0);
    float mx[kMaxG], inv[kMaxG];
    for (int64_t g = 0; g < gn; ++g) mx[g] = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
      const float* kj = k + j * stride;
      for (int64_t g = 0; g < gn; ++g) {
        const float sc = DotImpl(q + (g0 + g) * head_dim, kj, head_dim) * scale;
        scores[g * n_kv + j] = sc;
        mx[g] = std::max(mx[g], sc);
      }
    }
    for (int64_t g = 0; g < gn; ++g) {
      float* sg = scores + g * n_kv;
      const auto vmx = hn::Set(d, mx[g]);
      auto vsum = hn::Zero(d);
      int64_t j = 0;
      for (; j + L <= n_kv; j += L) {
        const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, sg + j), vmx));
        hn::StoreU(e, d, sg + j);
        vsum = hn::Add(vsum, e);
      }
      float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
      for (; j < n_kv; ++j) {
        sg[j] = std::exp(sg[j] - mx[g]);
        sum += sg[j];
      }
      inv[g] = 1.0f / sum;
    }
    float* o = out + g0 * head_dim;
    std::fill(o, o + gn * head_dim, 0.0f);
    for (int64_t j = 0; j < n_kv; ++j) {
      const float* vj = v + j * stride;
      for (int64_t g = 0; g < gn; ++g) {
        AxpyImpl(scores[g * n_kv + j] * inv[g], vj, o + g * head_dim, head_dim);
      }
    }
  }
}

void AddImpl(float* y, const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] += x[i];
}

void SwiGluImpl(float* g, const float* u, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto x = hn::LoadU(d, g + i);
    const auto sig = hn::Div(one, hn::Add(one, hn::Exp(d, hn::Neg(x))));
    hn::StoreU(hn::Mul(hn::Mul(x, sig), hn::LoadU(d, u + i)), d, g + i);
  }
  for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void RmsNormImpl(const float* x, const float* w, float* y, int64_t n, float eps) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto v = hn::LoadU(d, x + i);
    acc = hn::MulAdd(v, v, acc);
  }
  double ss = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  const auto vr = hn::Set(d, r);
  for (i = 0; i + L <= n; i += L) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), vr), hn::LoadU(d, w + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] = x[i] * r * w[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr {
HWY_EXPORT(AttentionGroupImpl);
HWY_EXPORT(AddImpl);
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(RmsNormImpl);

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, w, y, n, eps);
}

void RopeAngles(float pos, const float* inv_freq, int64_t half, float* cs) {
  for (int64_t i = 0; i < half; ++i) {
    const float theta = pos * inv_freq[i];
    cs[2 * i] = std::cos(theta);
    cs[2 * i + 1] = std::sin(theta);
  }
}

void Rope(float* v, int64_t head_dim, const float* cs, bool neox) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const int64_t a = neox ? i : 2 * i;
    const int64_t b = neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

void SwiGlu(float* g, const float* u, int64_t n) { HWY_DYNAMIC_DISPATCH(SwiGluImpl)(g, u, n); }

void Attention(const float* q, int64_t n_q, const float* k, const float* v, int64_t stride,
               int64_t n_kv, int64_t head_dim, float scale, float* scores, float* out) {
  HWY_DYNAMIC_DISPATCH(AttentionGroupImpl)(q, n_q, k, v, stride, n_kv, head_dim, scale, scores, out);
}

void AddInPlace(float* y, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(AddImpl)(y, x, n); }

}  // namespace tlr
#endif
