// The panel layout of quantized weight matrices (ops layer): what RepackMatrix writes at load
// and the panel kernels read. Shared by the layout code and every SIMD target's kernels.
//
// Rows go in panels of 8. A panel holds, group after group (32 columns each), the 8 rows'
// block data interleaved so that one 32-byte vector carries 4 consecutive values of each of
// the 8 rows (byte 4 * r + i = row r, value i). A dot product of such a vector with 4
// activation bytes broadcast to every 32-bit lane then leaves one partial sum per row in each
// lane (vpdpbusd / maddubs on x86), so 8 rows are computed at once, the 8 block scales apply
// with one vector multiply, and the 8 results are stored with one store.
//
// 32-element block types (PanelFormat), per group:
//   [8 x f16 scale d] [8 x f16 minimum m: Q4_1, Q5_1]
//   [8 x u32 fifth-bit masks: Q5_0, Q5_1] [values]
// IQ4_NL is laid out exactly like Q4_0; its nibbles are codes into kIq4nlValues.
// Values: Q8_0: 8 vectors, vector c holds values 4c..4c+3 of each row (signed bytes).
//         4- and 5-bit types: 4 vectors of nibbles; vector j's low nibbles hold values
//         8j..8j+3, its high nibbles 8j+4..8j+7. The fifth bits of the values in vector j's
//         low (h = 0) and high (h = 1) nibbles are mask 2j + h, bit 4 * r + i.
// So a group unpacks to 8 vectors u = 2j + h (0..7), vector u holding values 4u..4u+3.
//
// K-quants (KPanelFormat), per 256-column super-block of the 8 rows: a header, then 8 groups
// of 32 columns whose values are laid out as above (nibbles, plus Q5_K's fifth-bit masks):
//   Q4_K, Q5_K: [8 x f16 d] [8 x f16 dmin] [12 x 8 scale bytes: byte 8k + r = scales[k] of
//               row r, so the GGUF 6-bit decoding runs on 32 bytes (4 bytes x 8 rows) at once]
//               then per group: [Q5_K: 8 x u32 fifth-bit masks] [4 nibble vectors]
//   Q6_K:       [8 x f16 d] [16 x 8 int8 scales: byte 8k + r = scales[k] of row r]
//               then per group: [2 vectors of high bits] [4 nibble vectors]
//               Q6_K's two high bits of unpacked vector u sit at bits 2 (u % 4) and up of
//               high-bit vector u / 4 (same byte position), so vectors 0-3 (values 0-15,
//               the group's first scale) come from the first high-bit vector.
//   IQ4_XS:     [8 x f16 d] [4 x 8 bytes scales_l: byte 8k + r = scales_l[k] of row r]
//               [2 x 8 bytes scales_h: byte 8k + r = byte k of row r's scales_h] then per
//               group: [4 nibble vectors] of codes into kIq4nlValues. Nibble k % 2 of
//               scales_h byte k / 2 holds the two high scale bits of sub-blocks 2k and 2k + 1,
//               so the 64 six-bit scales decode with a few vector ops.
//   Q2_K:       [8 x f16 d] [8 x f16 dmin] [16 x 8 scale bytes: byte 8k + r = scales[k] of row
//               r, the sub-block's scale in the low nibble and its minimum in the high one]
//               then per group: [2 two-bit vectors]
//   Q3_K:       [8 x f16 d] [12 x 8 scale bytes, transposed like Q4_K's] then per group:
//               [1 vector of high bits] [2 two-bit vectors]
//               Two-bit vector k (0, 1) holds the group's values 16k..16k+15: byte 4r + i
//               has value 16k + 4s + i of row r at bits 2s (s = 0..3), so unpacked vector
//               u = 4k + s (values 4u..4u+3) is (vector >> 2s) & 3. Q3_K's high-bit vector
//               has the third bit of value 4u + i of row r at bit u of byte 4r + i; its
//               values go in as q = low | high << 2 (0..7), the GGUF value being q - 4.
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
  bool nonlinear = false;  // IQ4_NL: the nibbles are codes into kIq4nlValues
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
    case GgmlType::kIQ4_NL:  // laid out like Q4_0 (f16 d, 16 bytes of nibbles)
      f.nonlinear = true;
      [[fallthrough]];
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

// K-quants: one block is 8 rows x one 256-column super-block. Offsets are from the block's
// start (header) or from its group's start (mask_off, high_off, values_off).
struct KPanelFormat {
  bool ok = false;
  bool has_min = false;   // Q4_K, Q5_K: x = d * sc * q - dmin * m
  bool has_mask = false;  // Q5_K: fifth bits
  bool six_bit = false;   // Q6_K: two high bits, int8 scales per 16 values, q - 32
  bool nonlinear = false; // IQ4_XS: codes into kIq4nlValues, 6-bit scales ls - 32, no minimum
  bool two_bit = false;   // Q2_K, Q3_K: two-bit vectors (Q2_K's minimums are per 16 values,
                          // in the scale bytes' high nibbles; dmin_off is its dmin)
  bool hmask = false;     // Q3_K: a vector of third bits per group (at high_off)
  int scale_bytes = 0;    // packed scale bytes per row and super-block (12, 16, 6)
  size_t dmin_off = 0, scales_off = 0, groups_off = 0;
  size_t mask_off = 0, high_off = 0, values_off = 0;
  size_t group_bytes = 0;  // one group of 32 columns x 8 rows
  size_t block_bytes = 0;  // 8 rows x 256 columns: 8 x the GGUF block size
};

constexpr KPanelFormat KPanelFormatOf(GgmlType t) {
  KPanelFormat f;
  switch (t) {
    case GgmlType::kQ4_K:
      f.ok = f.has_min = true;
      f.scale_bytes = 12;
      f.dmin_off = 16;
      f.scales_off = 32;
      f.groups_off = 32 + 96;
      f.group_bytes = 128;
      break;
    case GgmlType::kQ5_K:
      f.ok = f.has_min = f.has_mask = true;
      f.scale_bytes = 12;
      f.dmin_off = 16;
      f.scales_off = 32;
      f.groups_off = 32 + 96;
      f.values_off = 32;
      f.group_bytes = 32 + 128;
      break;
    case GgmlType::kQ6_K:
      f.ok = f.six_bit = true;
      f.scale_bytes = 16;
      f.scales_off = 16;
      f.groups_off = 16 + 128;
      f.values_off = 64;
      f.group_bytes = 64 + 128;
      break;
    case GgmlType::kIQ4_XS:
      f.ok = f.nonlinear = true;
      f.scale_bytes = 6;  // scales_l[4], scales_h as 2 bytes
      f.scales_off = 16;
      f.groups_off = 16 + 48;
      f.group_bytes = 128;
      break;
    case GgmlType::kQ2_K:
      f.ok = f.has_min = f.two_bit = true;
      f.scale_bytes = 16;
      f.dmin_off = 16;
      f.scales_off = 32;
      f.groups_off = 32 + 128;
      f.group_bytes = 64;
      break;
    case GgmlType::kQ3_K:
      f.ok = f.two_bit = f.hmask = true;
      f.scale_bytes = 12;
      f.scales_off = 16;
      f.groups_off = 16 + 96;
      f.values_off = 32;
      f.group_bytes = 32 + 64;
      break;
    default:
      break;
  }
  f.block_bytes = f.groups_off + 8 * f.group_bytes;
  return f;
}

static_assert(KPanelFormatOf(GgmlType::kQ4_K).block_bytes == 8 * 144 &&
                  KPanelFormatOf(GgmlType::kQ5_K).block_bytes == 8 * 176 &&
                  KPanelFormatOf(GgmlType::kQ6_K).block_bytes == 8 * 210 &&
                  KPanelFormatOf(GgmlType::kIQ4_XS).block_bytes == 8 * 136 &&
                  KPanelFormatOf(GgmlType::kQ2_K).block_bytes == 8 * 84 &&
                  KPanelFormatOf(GgmlType::kQ3_K).block_bytes == 8 * 110,
              "a K-quant panel block takes exactly 8 GGUF blocks");

}  // namespace tlr
