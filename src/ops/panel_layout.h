// The panel layout of quantized weight matrices (ops layer): what RepackMatrix writes at load
// and the panel kernels read. Shared by the layout code and every SIMD target's kernels.
//
// Rows go in panels of 8. A panel holds, group after group (32 columns each), the 8 rows'
// block data interleaved so that one 32-byte vector carries 4 consecutive values of each of
// the 8 rows (byte 4 * r + i = row r, value i). A dot product of such a vector with 4
// activation bytes broadcast to every 32-bit lane then leaves one partial sum per row in each
// lane (vpdpbusd / maddubs on x86), so 8 rows are computed at once, the 8 block scales apply
// with one vector multiply, and the 8 results are stored with one store. Per group:
//   [8 x f16 scale d] [8 x f16 minimum m: Q4_1, Q5_1]
//   [8 x u32 fifth-bit masks: Q5_0, Q5_1] [values]
// Values: Q8_0: 8 vectors, vector c holds values 4c..4c+3 of each row (signed bytes).
//         4- and 5-bit types: 4 vectors of nibbles; vector j's low nibbles hold values
//         8j..8j+3, its high nibbles 8j+4..8j+7. The fifth bits of the values in vector j's
//         low (h = 0) and high (h = 1) nibbles are mask 2j + h, bit 4 * r + i.
// A panel takes exactly 8 rows' bytes, so the matrix keeps its size and a row that is not in
// a full panel (the last n_rows % 8) stays in GGUF layout at its usual offset.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.h"

namespace tlr {

inline constexpr int kPanelRows = 8;

struct PanelFormat {
  bool ok = false;        // the type has a panel layout
  bool has_min = false;   // Q4_1, Q5_1: x = d * q + m
  bool has_mask = false;  // Q5_0, Q5_1: fifth bits
  bool signed_values = false;  // Q8_0
  size_t min_off = 0, mask_off = 0, values_off = 0;
  size_t group_bytes = 0;  // bytes of one group of a panel (8 rows x one block)
};

constexpr PanelFormat PanelFormatOf(GgmlType t) {
  PanelFormat f;
  switch (t) {
    case GgmlType::kQ8_0:
      f.ok = f.signed_values = true;
      f.values_off = 16;
      f.group_bytes = 16 + 256;
      break;
    case GgmlType::kQ4_0:
      f.ok = true;
      f.values_off = 16;
      f.group_bytes = 16 + 128;
      break;
    case GgmlType::kQ4_1:
      f.ok = f.has_min = true;
      f.min_off = 16;
      f.values_off = 32;
      f.group_bytes = 32 + 128;
      break;
    case GgmlType::kQ5_0:
      f.ok = f.has_mask = true;
      f.mask_off = 16;
      f.values_off = 48;
      f.group_bytes = 48 + 128;
      break;
    case GgmlType::kQ5_1:
      f.ok = f.has_min = f.has_mask = true;
      f.min_off = 16;
      f.mask_off = 32;
      f.values_off = 64;
      f.group_bytes = 64 + 128;
      break;
    default:
      break;
  }
  return f;
}

}  // namespace tlr
