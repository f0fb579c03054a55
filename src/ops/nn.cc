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

void AttentionImpl(const float* q, const float* k, const float* v, int64_t stride, int64_t n_kv,
                   int64_t head_dim, float scale, float* scores, float* out) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n_kv; ++j) {
    scores[j] = DotImpl(q, k + j * stride, head_dim) * scale;
    mx = std::max(mx, scores[j]);
  }
  float sum = 0;
  for (int64_t j = 0; j < n_kv; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t j = 0; j < n_kv; ++j) AxpyImpl(scores[j] * inv, v + j * stride, out, head_dim);
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
HWY_EXPORT(DotImpl);
HWY_EXPORT(AttentionImpl);
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

void Attention(const float* q, const float* k, const float* v, int64_t stride, int64_t n_kv,
               int64_t head_dim, float scale, float* scores, float* out) {
  HWY_DYNAMIC_DISPATCH(AttentionImpl)(q, k, v, stride, n_kv, head_dim, scale, scores, out);
}

void AddInPlace(float* y, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(AddImpl)(y, x, n); }

float DotF32(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n); }

}  // namespace tlr
#endif
