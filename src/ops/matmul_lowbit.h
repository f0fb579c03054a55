// MatMul kernels for the low-bit weight types (ops layer, internal): Q2_K and Q3_K (the
// K-quants under Q2_K / Q3_K_S/M/L files) and the non-linear IQ4_NL and IQ4_XS. matmul.cc's
// dispatch calls these for the types LowBitSupports; the rest of the code only sees MatMul.
//
// The contract is matmul.h's: weights in GGUF block layout dotted with Q8A activations (int8
// values + float scale d + d * sum per 32 values), the same integer products as
// MatMulRowsRef. SIMD lives in matmul_lowbit.cc (Highway, one pass per target: maddubs or
// VNNI on x86, a portable widening multiply elsewhere). Stateless and thread-safe; no heap
// allocation per call.
#pragma once

#include <cstdint>

#include "ops/matmul.h"
#include "quant/ggml_type.h"

namespace tlr {

// True for the types MatMulRowsLowBit computes.
bool LowBitSupports(GgmlType type);

// y[t * ldy + r] = dot(w row r, token t) for rows [r0, r1) and every token of `in`, whose Q8A
// activations (in.qs, in.d, in.s) must be prepared. Each (row, token) result is bit-identical
// whatever the number of tokens in the call and whatever r0 / r1 (batch invariance).
void MatMulRowsLowBit(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy,
                      int64_t r0, int64_t r1);

}  // namespace tlr
