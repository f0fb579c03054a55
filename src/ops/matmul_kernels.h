// Per-family MatMul row kernels (ops layer, internal to src/ops): each family of weight types
// is its own translation unit compiled for every SIMD target (matmul_float.cc,
// matmul_legacy.cc, matmul_kquant.cc), so one family builds on its own and builds run in
// parallel. Each function computes rows [r0, r1) of y = W x for every token of `in` with the
// kernel dispatch picks for this CPU; matmul.cc routes by type. Same contract as MatMulRows.
#pragma once

#include <atomic>
#include <cstdint>

#include "ops/matmul.h"

namespace tlr::kernels {

// WeightPrefetch (matmul.h) as the kernels read it, once per call: true = every line.
inline std::atomic<bool> prefetch_every_line{true};
// Whether decode prefetches F16 and BF16 rows on 512-bit targets (matmul_float.cc): on Intel
// hosts it pays, on AMD's Zen 4 and 5 it cost; set from the CPU's vendor before main.
inline std::atomic<bool> prefetch_half_floats{true};
// Rows that float decode reads at once, far apart (1 or 4; matmul_float.cc): 4 on Intel
// hosts, where it was measured, 1 on AMD's; SetFloatDecodeStreams (matmul.h) changes it.
inline std::atomic<int> float_decode_streams{4};

// F32, F16, BF16 weights times float activations.
void FloatRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1);
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, in GGUF or panel layout (w.repacked).
void LegacyRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1);
// Q4_K, Q5_K, Q6_K, in GGUF or panel layout (w.repacked).
void KQuantRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1);

}  // namespace tlr::kernels
