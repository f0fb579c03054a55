// Elementwise and attention kernels of the transformer forward pass (ops layer): RMS norm,
// RoPE, SwiGLU, softmax and single-query attention over a KV cache. Highway SIMD for the
// vector dot/axpy inside attention (the part that grows with context); pure functions,
// thread-safe.
#pragma once

#include <cstdint>

namespace tlr {

// y = x / sqrt(mean(x^2) + eps) * w   (y may alias x)
void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps);

// RoPE angles of one position: cs[2i] = cos(pos * inv_freq[i]), cs[2i+1] = sin(...), for the
// head_dim/2 inverse frequencies (base^(-2i/head_dim), already divided by any rope factors).
// Computed once per token and shared by every head and layer.
void RopeAngles(float pos, const float* inv_freq, int64_t half, float* cs);
// Rotates one head vector (head_dim values) in place with angles from RopeAngles.
// neox: pairs (i, i + head_dim/2); otherwise pairs (2i, 2i + 1).
void Rope(float* v, int64_t head_dim, const float* cs, bool neox);

// g = silu(g) * u, in place on g.
void SwiGlu(float* g, const float* u, int64_t n);

// For each of n_q query heads sharing one KV head (q and out hold n_q consecutive head
// vectors): out_h = softmax(q_h . K_j * scale) . V_j over j < n_kv, where K_j = k + j * stride,
// V_j = v + j * stride. `scores` is scratch for n_q * n_kv floats.
void Attention(const float* q, int64_t n_q, const float* k, const float* v, int64_t stride,
               int64_t n_kv, int64_t head_dim, float scale, float* scores, float* out);

// y += x
void AddInPlace(float* y, const float* x, int64_t n);

}  // namespace tlr
