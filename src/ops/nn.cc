// Elementwise kernels of the forward pass (ops layer): RMS norm, SwiGLU and the residual add
// in Highway SIMD, RoPE in scalar code (a few hundred values per token). See nn.h; attention
// is in attention.cc, the scalar references in nn_ref.cc.
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

void GeluGluImpl(float* g, const float* u, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const float c = 0.7978845608028654f, a = 0.044715f;  // sqrt(2 / pi)
  const auto vc = hn::Set(d, c), va = hn::Set(d, a), half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto x = hn::LoadU(d, g + i);
    const auto inner = hn::Mul(vc, hn::MulAdd(hn::Mul(va, hn::Mul(x, x)), x, x));
    const auto y = hn::Mul(hn::Mul(half, x), hn::Add(one, hn::Tanh(d, inner)));
    hn::StoreU(hn::Mul(y, hn::LoadU(d, u + i)), d, g + i);
  }
  for (; i < n; ++i) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + std::tanh(c * (x + a * x * x * x))) * u[i];
  }
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
HWY_EXPORT(AddImpl);
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(GeluGluImpl);
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

void GeluGlu(float* g, const float* u, int64_t n) { HWY_DYNAMIC_DISPATCH(GeluGluImpl)(g, u, n); }

void AddInPlace(float* y, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(AddImpl)(y, x, n); }

}  // namespace tlr
#endif
