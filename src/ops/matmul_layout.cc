// Panel layout of quantized weights (ops layer): RepackMatrix writes it at load, UnrepackRow
// reads a row back in GGUF block layout (for the references and tests). See panel_layout.h.
#include <cstring>

#include "ops/matmul.h"
#include "ops/panel_layout.h"
#include "quant/blocks.h"

namespace tlr {
namespace {

// One GGUF block of a panel type as its 32 integer values (0..15 / 0..31 / -128..127) and
// its f16 scale and minimum.
struct BlockInts {
  int q[32];
  uint16_t d = 0, m = 0;
};

BlockInts ReadBlock(GgmlType t, const uint8_t* b) {
  BlockInts x;
  std::memcpy(&x.d, b, 2);
  switch (t) {
    case GgmlType::kQ8_0: {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(b);
      for (int i = 0; i < 32; ++i) x.q[i] = blk->qs[i];
      break;
    }
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const bool has_min = t == GgmlType::kQ4_1;
      if (has_min) std::memcpy(&x.m, b + 2, 2);
      const uint8_t* qs = b + (has_min ? 4 : 2);
      for (int i = 0; i < 16; ++i) {
        x.q[i] = qs[i] & 0xF;
        x.q[i + 16] = qs[i] >> 4;
      }
      break;
    }
    default: {  // Q5_0, Q5_1
      const Q5Fields f = ParseQ5(b, t == GgmlType::kQ5_1);
      x.m = f.m;
      for (int i = 0; i < 16; ++i) {
        x.q[i] = (f.qs[i] & 0xF) | (((f.qh >> i) & 1) << 4);
        x.q[i + 16] = (f.qs[i] >> 4) | (((f.qh >> (i + 16)) & 1) << 4);
      }
      break;
    }
  }
  return x;
}

void WriteBlock(GgmlType t, const BlockInts& x, uint8_t* b) {
  std::memcpy(b, &x.d, 2);
  switch (t) {
    case GgmlType::kQ8_0: {
      auto* blk = reinterpret_cast<BlockQ8_0*>(b);
      for (int i = 0; i < 32; ++i) blk->qs[i] = static_cast<int8_t>(x.q[i]);
      break;
    }
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const bool has_min = t == GgmlType::kQ4_1;
      if (has_min) std::memcpy(b + 2, &x.m, 2);
      uint8_t* qs = b + (has_min ? 4 : 2);
      for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>(x.q[i] | (x.q[i + 16] << 4));
      break;
    }
    default: {
      const bool has_min = t == GgmlType::kQ5_1;
      if (has_min) std::memcpy(b + 2, &x.m, 2);
      uint32_t qh = 0;
      uint8_t* qs = b + (has_min ? 8 : 6);
      for (int i = 0; i < 16; ++i) {
        qs[i] = static_cast<uint8_t>((x.q[i] & 0xF) | ((x.q[i + 16] & 0xF) << 4));
        qh |= static_cast<uint32_t>(x.q[i] >> 4) << i;
        qh |= static_cast<uint32_t>(x.q[i + 16] >> 4) << (i + 16);
      }
      std::memcpy(b + (has_min ? 4 : 2), &qh, 4);
      break;
    }
  }
}

// Where value i (0..31) of row r (0..7) sits in a group's value vectors: vector index and
// byte, and (nibble types) whether it is the high nibble.
struct Slot {
  int vec, byte;
  bool high;
};
Slot SlotOf(bool q8, int r, int i) {
  if (q8) return {i / 4, 4 * r + i % 4, false};
  return {i / 8, 4 * r + i % 4, (i % 8) >= 4};
}

}  // namespace

bool CanRepack(GgmlType type) { return PanelFormatOf(type).ok; }

void RepackMatrix(const WeightView& w, uint8_t* dst) {
  const PanelFormat f = PanelFormatOf(w.type);
  const size_t bb = GgmlTraits(w.type).type_size;
  const int64_t ng = w.n_cols / 32, n_panels = w.n_rows / kPanelRows;
  const bool q8 = w.type == GgmlType::kQ8_0;
  for (int64_t p = 0; p < n_panels; ++p) {
    for (int64_t g = 0; g < ng; ++g) {
      uint8_t* out = dst + p * kPanelRows * w.row_bytes + g * f.group_bytes;
      std::memset(out, 0, f.group_bytes);
      for (int r = 0; r < kPanelRows; ++r) {
        const BlockInts x = ReadBlock(w.type, w.Row(p * kPanelRows + r) + g * bb);
        std::memcpy(out + 2 * r, &x.d, 2);
        if (f.has_min) std::memcpy(out + f.min_off + 2 * r, &x.m, 2);
        for (int i = 0; i < 32; ++i) {
          const Slot s = SlotOf(q8, r, i);
          uint8_t& byte = out[f.values_off + 32 * s.vec + s.byte];
          if (q8) {
            byte = static_cast<uint8_t>(static_cast<int8_t>(x.q[i]));
          } else {
            byte |= static_cast<uint8_t>((x.q[i] & 0xF) << (s.high ? 4 : 0));
            if (f.has_mask && (x.q[i] & 0x10)) {
              uint8_t* mask = out + f.mask_off + 4 * (2 * s.vec + (s.high ? 1 : 0));
              mask[s.byte / 8] |= static_cast<uint8_t>(1u << (s.byte % 8));
            }
          }
        }
      }
    }
  }
  // Rows after the last full panel keep GGUF layout.
  const size_t done = static_cast<size_t>(n_panels) * kPanelRows * w.row_bytes;
  std::memcpy(dst + done, w.data + done, static_cast<size_t>(w.n_rows) * w.row_bytes - done);
}

void UnrepackRow(const WeightView& w, int64_t row, uint8_t* blocks) {
  const int64_t p = row / kPanelRows;
  if (p >= w.n_rows / kPanelRows) {
    std::memcpy(blocks, w.Row(row), w.row_bytes);
    return;
  }
  const PanelFormat f = PanelFormatOf(w.type);
  const size_t bb = GgmlTraits(w.type).type_size;
  const int r = static_cast<int>(row % kPanelRows);
  const bool q8 = w.type == GgmlType::kQ8_0;
  for (int64_t g = 0; g < w.n_cols / 32; ++g) {
    const uint8_t* in = w.data + p * kPanelRows * w.row_bytes + g * f.group_bytes;
    BlockInts x;
    std::memcpy(&x.d, in + 2 * r, 2);
    if (f.has_min) std::memcpy(&x.m, in + f.min_off + 2 * r, 2);
    for (int i = 0; i < 32; ++i) {
      const Slot s = SlotOf(q8, r, i);
      const uint8_t byte = in[f.values_off + 32 * s.vec + s.byte];
      if (q8) {
        x.q[i] = static_cast<int8_t>(byte);
      } else {
        x.q[i] = (byte >> (s.high ? 4 : 0)) & 0xF;
        if (f.has_mask) {
          const uint8_t* mask = in + f.mask_off + 4 * (2 * s.vec + (s.high ? 1 : 0));
          if (mask[s.byte / 8] & (1u << (s.byte % 8))) x.q[i] |= 0x10;
        }
      }
    }
    WriteBlock(w.type, x, blocks + g * bb);
  }
}

}  // namespace tlr
