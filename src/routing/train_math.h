// What the routing layer's trainers share (internal to mlp_train.cc and r2r_train.cc): a seeded
// random stream, matrix products through the ops layer's F32 MatMul (SIMD, threaded), and a
// trainable tensor with its Adam(W) state.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/matmul.h"

namespace tlr::train {

// splitmix64: the next value of the stream `s`.
inline uint64_t Next(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1).
inline float Uniform(uint64_t* s) { return static_cast<float>((Next(s) >> 40) * (1.0 / 16777216.0)); }

// C[m][n] = sum_k A[m][k] * B[n][k].
inline void Gemm(const float* a, int64_t m, int64_t k, const float* b, int64_t n, float* c, MatMulInput* in,
                 ThreadPool* pool) {
  WeightView w{GgmlType::kF32, reinterpret_cast<const uint8_t*>(b), n, k, static_cast<size_t>(k) * sizeof(float)};
  in->Prepare(GgmlType::kF32, a, m, k, k, pool);
  MatMul(w, *in, c, n, pool);
}

inline void Transpose(const float* a, int64_t rows, int64_t cols, std::vector<float>* out) {
  out->resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) (*out)[c * rows + r] = a[r * cols + c];
  }
}

// One trainable tensor with its Adam state.
struct Param {
  std::vector<float> v, g, m, s;
  bool decay = false;  // weight decay (matrices only)
  void Init(size_t n, bool is_matrix) {
    v.assign(n, 0), g.assign(n, 0), m.assign(n, 0), s.assign(n, 0);
    decay = is_matrix;
  }
  // One Adam step (`step` counts from 1); weight decay decoupled (AdamW) where `decay`.
  void AdamStep(float lr, float wd, int step) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float c1 = 1 - std::pow(b1, static_cast<float>(step));
    const float c2 = 1 - std::pow(b2, static_cast<float>(step));
    for (size_t k = 0; k < v.size(); ++k) {
      if (decay) v[k] -= lr * wd * v[k];
      m[k] = b1 * m[k] + (1 - b1) * g[k];
      s[k] = b2 * s[k] + (1 - b2) * g[k] * g[k];
      v[k] -= lr * (m[k] / c1) / (std::sqrt(s[k] / c2) + eps);
    }
  }
};

}  // namespace tlr::train
