// Scalar reference quantization and dequantization (quant layer).
//
// Dequantize is the definition of what every kernel must compute (kernels are tested against
// it); Quantize writes GGUF-compatible blocks (for make-random and tests; simple round-to-
// nearest quantizers, not llama.cpp's error-minimising ones). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "quant/blocks.h"
#include "quant/ggml_type.h"
#include "util/status.h"

namespace tlr {

// True for the types Dequantize supports.
bool CanDequantize(GgmlType type);
// True for the types Quantize supports.
bool CanQuantize(GgmlType type);

// n elements (a multiple of the type's block size) from `src` to floats.
Status Dequantize(GgmlType type, const void* src, float* dst, int64_t n);
// n floats to `type` blocks; dst must hold GgmlTensorBytes(type, n, n) bytes.
Status Quantize(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace tlr
