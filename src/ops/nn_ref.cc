// Scalar references for the kernels of nn.h (ops layer): what RmsNorm, RoPE, SwiGLU, the
// residual add and attention must compute, written straight from their definitions with no
// SIMD, sums in double and the standard library's exp / sqrt / cos. Keys and values are read
// back exactly (LoadKey, LoadValue), so a kernel and its reference see the same stored values
// and differ only by rounding. For tests (nn_test.cc) and as documentation; not fast.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/nn.h"

namespace tlr {

void RmsNormRef(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * r * w[i]);
}

void RopeRef(float* v, int64_t head_dim, float pos, const float* inv_freq, bool neox) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(theta), s = std::sin(theta);
    const int64_t a = neox ? i : 2 * i;
    const int64_t b = neox ? i + half : 2 * i + 1;
    const double x0 = v[a], x1 = v[b];
    v[a] = static_cast<float>(x0 * c - x1 * s);
    v[b] = static_cast<float>(x0 * s + x1 * c);
  }
}

void SwiGluRef(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i];
    g[i] = static_cast<float>(x / (1.0 + std::exp(-x)) * u[i]);
  }
}

void GeluGluRef(float* g, const float* u, int64_t n) {
  const double c = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i];
    g[i] = static_cast<float>(0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x))) * u[i]);
  }
}

void AddInPlaceRef(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<double>(y[i]) + x[i]);
}

void AttentionRef(const float* q, int64_t n_q, const KvView& k, const KvView& v, int64_t n_kv,
                  int64_t head_dim, float scale, float* out, int64_t first) {
  const int64_t hd = head_dim;
  std::vector<float> kf(n_kv * hd), vf(n_kv * hd);
  for (int64_t j = 0; j < n_kv; ++j) {
    LoadKey(k, hd, j, kf.data() + j * hd);
    LoadValue(v, hd, j, vf.data() + j * hd);
  }
  std::vector<double> s(n_kv), o(hd);
  std::vector<float> qh(hd);
  for (int64_t h = 0; h < n_q; ++h) {
    AttentionQuery(k.type, q + h * hd, hd, qh.data());
    double mx = -INFINITY;
    for (int64_t j = first; j < n_kv; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < hd; ++i) dot += static_cast<double>(qh[i]) * kf[j * hd + i];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    std::fill(o.begin(), o.end(), 0.0);
    for (int64_t j = first; j < n_kv; ++j) {
      const double p = std::exp(s[j] - mx);
      sum += p;
      for (int64_t i = 0; i < hd; ++i) o[i] += p * vf[j * hd + i];
    }
    for (int64_t i = 0; i < hd; ++i) out[h * hd + i] = n_kv > first ? static_cast<float>(o[i] / sum) : 0.0f;
  }
}

}  // namespace tlr
