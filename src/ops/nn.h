// Elementwise and attention kernels of the transformer forward pass (ops layer): RMS norm,
// RoPE, SwiGLU, residual add (nn.cc), and single-token attention over a KV cache stored in
// f32, f16 or q8_0, read in its stored type by the SIMD kernel with no conversion pass
// (attention.cc), with the cache layout that kernel reads (KvView). Google Highway,
// dispatched at run time over the compiled targets; every kernel has a scalar reference below
// (nn_ref.cc) that defines what it must compute and that the kernel tests (nn_test.cc)
// compare against on every target. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.h"
#include "util/status.h"

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

// g = gelu(g) * u in place on g, with GELU's tanh approximation (Gemma's gelu_pytorch_tanh):
// gelu(x) = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
void GeluGlu(float* g, const float* u, int64_t n);

// y += x
void AddInPlace(float* y, const float* x, int64_t n);

// The keys or the values of one KV head as a cache stores them, encoded as `type`: f32, f16
// or q8_0 (int8 with an f16 scale per 32 values of a position). A view; a cache owns the bytes.
//   Values: rows. Position j's head_dim values start at data + j * row_bytes (q8_0:
//     head_dim / 32 GGUF blocks).
//   Keys: transposed tiles of kKeyTile positions, so that the score kernel loads one
//     dimension of 16 positions with one load and needs no horizontal sums. Tile t (positions
//     [16t, 16t + 16)) starts at data + t * kKeyTile * row_bytes and holds, for f32 and f16,
//     [head_dim][16] values; for q8_0, [head_dim / 32][16] f16 scales, then [head_dim][16] int8
//     (per position, the numbers of its q8_0 row).
// row_bytes >= KvRowBytes(type, head_dim). Positions a kernel reads must have been stored;
// the rest of a key tile must hold finite numbers (a cache zeroes tiles before first use).
inline constexpr int64_t kKeyTile = 16;
struct KvView {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  const uint8_t* Row(int64_t j) const { return data + static_cast<size_t>(j) * row_bytes; }
  const uint8_t* Tile(int64_t j) const { return Row(j / kKeyTile * kKeyTile); }
};

// Whether attention reads keys and values of `type` with this head_dim: f32 and f16 any, q8_0
// a multiple of 32 (its blocks must not straddle heads) up to kMaxQ8HeadDim (the rounded
// query lives on the stack). The error says what to use instead.
inline constexpr int64_t kMaxQ8HeadDim = 512;
Status CheckKvType(GgmlType type, int64_t head_dim);

// Against q8_0 keys attention rounds the query to q8_0 too, per 32 dimensions (as llama.cpp
// does), so each score is a sum of exact integer dot products times two scales, which int8
// dot-product instructions compute directly. This is the rounding: q[i] = round-to-nearest-
// even(x[i] * (127 / amax)), amax = max |x[i]|; returns the scale amax / 127 (0 for a zero
// block; NaN, with q all 0, if x holds a NaN or an infinity).
float QuantizeQueryQ8(const float* x, int8_t* q);
// Against q8_0 values a kernel may round each softmax weight p (at most 1: exp of the score
// minus the running maximum) times the value's block scale d to a multiple of 1/kQ8WeightSteps
// of the largest d of that block in its kAttentionChunk (an int16, for integer dot products):
// an error of at most half that step per weight.
inline constexpr float kQ8WeightSteps = 32767.0f;
// The query as attention over keys of `type` uses it: unchanged for f32 and f16, each block
// rounded by QuantizeQueryQ8 (value = scale * integer) for q8_0. For references and tests.
void AttentionQuery(GgmlType type, const float* q, int64_t head_dim, float* out);
// Bytes of one position's head_dim values of `type` (type and head_dim pass CheckKvType).
size_t KvRowBytes(GgmlType type, int64_t head_dim);

// Converts one position's head_dim floats to `type` and writes them at position pos of a
// key-tile or value-row region laid out as KvView describes (base: its first byte).
void StoreKey(GgmlType type, uint8_t* base, size_t row_bytes, int64_t head_dim, int64_t pos, const float* k);
void StoreValue(GgmlType type, uint8_t* base, size_t row_bytes, int64_t head_dim, int64_t pos, const float* v);
// The stored values of position pos back as floats (exact), for references and tests.
void LoadKey(const KvView& keys, int64_t head_dim, int64_t pos, float* out);
void LoadValue(const KvView& values, int64_t head_dim, int64_t pos, float* out);

// Attention of n_q query heads that share one KV head (q and out hold n_q consecutive head
// vectors of head_dim floats): out_h = softmax_j(scale * q_h . K_j) . V_j over
// first <= j < n_kv (first > 0: a sliding window; 0 <= first < n_kv). k and v have the same
// type, which passed CheckKvType.
//
// The kernel reads K and V once per group of up to 8 query heads, in chunks of
// kAttentionChunk positions with an online softmax (running max and sum, rescaled per
// chunk), so its scratch is a few KiB on the stack: no allocation, no dependence on the
// context length. The result depends only on (q, K, V, n_kv): the same position computed
// alone or inside a batch, by any thread, is bit-identical; so is each head, whichever heads
// are computed with it. Chunks of 256 rather than 64 positions: the per-chunk work (softmax
// bookkeeping, rescaling and reloading the outputs) was a fifth of the kernel's time (24
// layers x 2 KV heads x 7 query heads, head_dim 64, 2000 positions, 2 threads: 1.03 -> 0.79
// ms per token; 512 is no faster).
inline constexpr int64_t kAttentionChunk = 256;
void Attention(const float* q, int64_t n_q, const KvView& k, const KvView& v, int64_t n_kv,
               int64_t head_dim, float scale, float* out, int64_t first = 0);

// Scalar references (nn_ref.cc): the same definitions computed in double from the stored
// values (KV rows dequantized exactly), with std::exp / std::sqrt / std::cos.
void RmsNormRef(const float* x, const float* w, float* y, int64_t n, float eps);
void RopeRef(float* v, int64_t head_dim, float pos, const float* inv_freq, bool neox);
void SwiGluRef(float* g, const float* u, int64_t n);
void GeluGluRef(float* g, const float* u, int64_t n);
void AddInPlaceRef(float* y, const float* x, int64_t n);
void AttentionRef(const float* q, int64_t n_q, const KvView& k, const KvView& v, int64_t n_kv,
                  int64_t head_dim, float scale, float* out, int64_t first = 0);

}  // namespace tlr
