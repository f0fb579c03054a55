// K-quant and IQ4 block (de)quantizers (quant layer, internal to quantize.cc's dispatch).
//
// The dequantizers follow ggml's dequantize_row_* (same float operations in the same order);
// they define what the MatMul kernels must compute. The quantizers are simple round-to-nearest
// ones for random-weight files and tests, not llama.cpp's error-minimising searches: block
// scales are rounded up (never down) so every value of a sub-block stays inside its code range,
// which bounds the error of each value by half a step (see quantize_test.cc).
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace tlr::quant_internal {

// nb blocks to 256 * nb floats (32 * nb for IQ4_NL).
void DequantQ2K(const BlockQ2_K* x, float* y, int64_t nb);
void DequantQ3K(const BlockQ3_K* x, float* y, int64_t nb);
void DequantQ4K(const BlockQ4_K* x, float* y, int64_t nb);
void DequantQ5K(const BlockQ5_K* x, float* y, int64_t nb);
void DequantQ6K(const BlockQ6_K* x, float* y, int64_t nb);
void DequantIQ4NL(const BlockIQ4_NL* x, float* y, int64_t nb);
void DequantIQ4XS(const BlockIQ4_XS* x, float* y, int64_t nb);

// The reverse, from 256 * nb floats (32 * nb for IQ4_NL).
void QuantQ2K(const float* x, BlockQ2_K* y, int64_t nb);
void QuantQ3K(const float* x, BlockQ3_K* y, int64_t nb);
void QuantQ4K(const float* x, BlockQ4_K* y, int64_t nb);
void QuantQ5K(const float* x, BlockQ5_K* y, int64_t nb);
void QuantQ6K(const float* x, BlockQ6_K* y, int64_t nb);
void QuantIQ4NL(const float* x, BlockIQ4_NL* y, int64_t nb);
void QuantIQ4XS(const float* x, BlockIQ4_XS* y, int64_t nb);

// The smallest half >= v (v >= 0, finite): a scale rounded up to f16.
uint16_t F16RoundUp(float v);

}  // namespace tlr::quant_internal
