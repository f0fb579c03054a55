// Tensor element types as GGUF/ggml number them, and their storage geometry (quant layer).
//
// Every quantized type stores elements in blocks: `block_size` elements take `type_size`
// bytes. This table is the single place that knows those numbers; the GGUF reader uses it
// to check tensor sizes, the kernels (a later issue) to walk rows. Pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "util/status.h"

namespace tlr {

// Values are ggml's `enum ggml_type` ids as stored in GGUF files (ids 4 and 5 were retired
// upstream and stay unassigned).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  // as llama.cpp prints it: "f32", "q4_K", ...
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
  bool quantized;
};

// Traits for a raw type id read from a file; nullopt for ids TLR does not know.
std::optional<GgmlTypeTraits> FindGgmlType(uint32_t raw_id);
// The name of a ggml type id TLR does not read (iq3_s, iq2_xxs, tq1_0, mxfp4, ...), for errors;
// empty for ids ggml does not define either.
std::string_view UnreadGgmlTypeName(uint32_t raw_id);
// Traits for a known type (always succeeds).
const GgmlTypeTraits& GgmlTraits(GgmlType type);
// Every type in the table, in id order.
std::span<const GgmlTypeTraits> AllGgmlTypes();

// Bytes taken by `n_elements` of `type` laid out as rows of `row_length` elements (the first
// dimension). Fails when the row length is not a multiple of the block size or the size
// overflows 64 bits.
Expected<uint64_t> GgmlTensorBytes(GgmlType type, uint64_t row_length, uint64_t n_elements);

}  // namespace tlr
