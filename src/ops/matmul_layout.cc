// Panel layout of quantized weights (ops layer): RepackMatrix writes it at load, UnrepackRow
// reads a row back in GGUF block layout (for the references and tests). See panel_layout.h.
//
// Both directions go through the blocks' integer values: a GGUF block (32 values for the
// legacy types, a 256-value super-block for the K-quants) is read into its integers and
// scale fields, which are then written into the row's slots of the 8-row panel block, and
// the other way round. Repacking touches every weight at load, so the writing side fills a
// group a byte at a time without branches; reading back (references, tests) is simpler.
#include <cstring>

#include "ops/matmul.h"
#include "ops/panel_layout.h"
#include "quant/blocks.h"

namespace tlr {
namespace {

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

// The bits of one value of a nibble-type group beyond its nibble: the fifth bit (Q5_0,
// Q5_1, Q5_K: `masks`) or Q6_K's two high bits (`high`); null where the type has none.
template <class Byte>  // uint8_t to write, const uint8_t to read
struct GroupPtrs {
  Byte* vals;
  Byte* masks;
  Byte* high;
};
template <class Byte>
GroupPtrs<Byte> GroupOf(const KPanelFormat& k, Byte* grp) {
  return {grp + k.values_off, k.has_mask ? grp + k.mask_off : nullptr, k.six_bit ? grp + k.high_off : nullptr};
}
template <class Byte>
GroupPtrs<Byte> GroupOf(const PanelFormat& f, Byte* grp) {
  return {grp + f.values_off, f.has_mask ? grp + f.mask_off : nullptr, nullptr};
}

// Stores row r's 32 values q (0..63) in a nibble-type group whose masks and high bits are
// zeroed: value i goes to SlotOf(false, r, i), i.e. nibble vector v = i / 8, byte 4r + i % 4,
// low nibble for i % 8 < 4; its unpacked vector is u = 2v (low) or 2v + 1 (high). Written
// a byte at a time without branches: repacking runs over every weight at load.
template <bool kMask, bool kHigh>
void PutGroupT(const GroupPtrs<uint8_t>& g, int r, const int* q) {
  for (int v = 0; v < 4; ++v) {
    for (int i = 0; i < 4; ++i) {
      const int lo = q[8 * v + i], hi = q[8 * v + 4 + i], b = 4 * r + i;
      g.vals[32 * v + b] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if constexpr (kMask) {
        g.masks[4 * (2 * v) + b / 8] |= static_cast<uint8_t>(((lo >> 4) & 1) << (b % 8));
        g.masks[4 * (2 * v + 1) + b / 8] |= static_cast<uint8_t>(((hi >> 4) & 1) << (b % 8));
      }
      if constexpr (kHigh) {
        g.high[32 * (v / 2) + b] |=
            static_cast<uint8_t>((((lo >> 4) & 3) << (4 * (v % 2))) | (((hi >> 4) & 3) << (4 * (v % 2) + 2)));
      }
    }
  }
}
void PutGroup(const GroupPtrs<uint8_t>& g, int r, const int* q) {
  if (g.masks) return PutGroupT<true, false>(g, r, q);
  if (g.high) return PutGroupT<false, true>(g, r, q);
  PutGroupT<false, false>(g, r, q);
}

int GetValue(const GroupPtrs<const uint8_t>& g, int r, int i) {
  const Slot s = SlotOf(false, r, i);
  const int u = 2 * s.vec + (s.high ? 1 : 0);
  int q = (g.vals[32 * s.vec + s.byte] >> (s.high ? 4 : 0)) & 0xF;
  if (g.masks && (g.masks[4 * u + s.byte / 8] & (1u << (s.byte % 8)))) q |= 0x10;
  if (g.high) q |= ((g.high[32 * (u / 4) + s.byte] >> (2 * (u % 4))) & 3) << 4;
  return q;
}

// Q2_K / Q3_K: row r's 32 values q (0..3, Q3_K 0..7) into a zeroed two-bit group (`lows`:
// its 2 two-bit vectors, `high`: Q3_K's third bits or null). Value i sits in vector i / 16,
// byte 4r + i % 4, bits 2 ((i % 16) / 4); its third bit at bit i / 4 of the same byte of `high`.
void PutGroup2(uint8_t* lows, uint8_t* high, int r, const int* q) {
  for (int i = 0; i < 32; ++i) {
    const int b = 4 * r + i % 4;
    lows[32 * (i / 16) + b] |= static_cast<uint8_t>((q[i] & 3) << (2 * ((i % 16) / 4)));
    if (high) high[b] |= static_cast<uint8_t>(((q[i] >> 2) & 1) << (i / 4));
  }
}
int GetValue2(const uint8_t* lows, const uint8_t* high, int r, int i) {
  const int b = 4 * r + i % 4;
  int q = (lows[32 * (i / 16) + b] >> (2 * ((i % 16) / 4))) & 3;
  if (high) q |= ((high[b] >> (i / 4)) & 1) << 2;
  return q;
}

// One GGUF block as its integer values (legacy types: 32, 0..15 / 0..31 / -128..127;
// K-quants: 256, 0..15 / 0..31 / 0..63, Q2_K 0..3, Q3_K 0..7 (low | third bit << 2);
// IQ4_NL, IQ4_XS: the 4-bit codes) and its scale fields.
struct BlockInts {
  int q[256];
  uint16_t d = 0, m = 0;  // m: Q4_1/Q5_1 minimum, Q2_K/Q4_K/Q5_K dmin
  uint8_t scales[16] = {};  // K-quants: the packed scale bytes (12; Q2_K, Q6_K: 16)
};

BlockInts ReadBlock(GgmlType t, const uint8_t* b) {
  BlockInts x;
  switch (t) {
    case GgmlType::kQ8_0: {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(b);
      x.d = blk->d;
      for (int i = 0; i < 32; ++i) x.q[i] = blk->qs[i];
      break;
    }
    case GgmlType::kQ4_0:
    case GgmlType::kIQ4_NL:
    case GgmlType::kQ4_1: {
      const bool has_min = t == GgmlType::kQ4_1;
      std::memcpy(&x.d, b, 2);
      if (has_min) std::memcpy(&x.m, b + 2, 2);
      const uint8_t* qs = b + (has_min ? 4 : 2);
      for (int i = 0; i < 16; ++i) {
        x.q[i] = qs[i] & 0xF;
        x.q[i + 16] = qs[i] >> 4;
      }
      break;
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const Q5Fields f = ParseQ5(b, t == GgmlType::kQ5_1);
      x.d = f.d;
      x.m = f.m;
      for (int i = 0; i < 16; ++i) {
        x.q[i] = (f.qs[i] & 0xF) | (((f.qh >> i) & 1) << 4);
        x.q[i + 16] = (f.qs[i] >> 4) | (((f.qh >> (i + 16)) & 1) << 4);
      }
      break;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      // Q4_K and Q5_K share d, dmin and scales; Q5_K adds qh before qs.
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(b);
      x.d = blk->d;
      x.m = blk->dmin;
      std::memcpy(x.scales, blk->scales, 12);
      const bool q5 = t == GgmlType::kQ5_K;
      const uint8_t* qs = q5 ? reinterpret_cast<const BlockQ5_K*>(b)->qs : blk->qs;
      for (int sub = 0; sub < 8; ++sub) {
        for (int l = 0; l < 32; ++l) {
          int q = (qs[32 * (sub / 2) + l] >> (4 * (sub & 1))) & 0xF;
          if (q5) q |= ((reinterpret_cast<const BlockQ5_K*>(b)->qh[l] >> sub) & 1) << 4;
          x.q[32 * sub + l] = q;
        }
      }
      break;
    }
    case GgmlType::kIQ4_XS: {  // scales: scales_l[0..3], then scales_h's two bytes
      const auto* blk = reinterpret_cast<const BlockIQ4_XS*>(b);
      x.d = blk->d;
      std::memcpy(x.scales, blk->scales_l, 4);
      std::memcpy(x.scales + 4, &blk->scales_h, 2);
      for (int sub = 0; sub < 8; ++sub) {
        for (int j = 0; j < 16; ++j) {
          x.q[32 * sub + j] = blk->qs[16 * sub + j] & 0xF;
          x.q[32 * sub + j + 16] = blk->qs[16 * sub + j] >> 4;
        }
      }
      break;
    }
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: {
      // Value v = 128 n + 32 j + l (l < 32): bits 2j of qs[32 n + l]; Q3_K's third bit is
      // bit 4n + j of hmask[l].
      const bool q3 = t == GgmlType::kQ3_K;
      const auto* b2 = reinterpret_cast<const BlockQ2_K*>(b);
      const auto* b3 = reinterpret_cast<const BlockQ3_K*>(b);
      const uint8_t* qs = q3 ? b3->qs : b2->qs;
      if (q3) {
        x.d = b3->d;
        std::memcpy(x.scales, b3->scales, 12);
      } else {
        x.d = b2->d;
        x.m = b2->dmin;
        std::memcpy(x.scales, b2->scales, 16);
      }
      for (int v = 0; v < 256; ++v) {
        const int n = v / 128, j = (v % 128) / 32, l = v % 32;
        x.q[v] = (qs[32 * n + l] >> (2 * j)) & 3;
        if (q3) x.q[v] |= ((b3->hmask[l] >> (4 * n + j)) & 1) << 2;
      }
      break;
    }
    case GgmlType::kQ6_K: {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(b);
      x.d = blk->d;
      std::memcpy(x.scales, blk->scales, 16);
      for (int sub = 0; sub < 8; ++sub) {
        const int half = sub / 4, quarter = sub % 4;
        const uint8_t* ql = blk->ql + 64 * half + (quarter & 1) * 32;
        const uint8_t* qh = blk->qh + 32 * half;
        for (int l = 0; l < 32; ++l) {
          x.q[32 * sub + l] = ((ql[l] >> (quarter >= 2 ? 4 : 0)) & 0xF) | (((qh[l] >> (2 * quarter)) & 3) << 4);
        }
      }
      break;
    }
    default:
      break;
  }
  return x;
}

void WriteBlock(GgmlType t, const BlockInts& x, uint8_t* b) {
  switch (t) {
    case GgmlType::kQ8_0: {
      auto* blk = reinterpret_cast<BlockQ8_0*>(b);
      blk->d = x.d;
      for (int i = 0; i < 32; ++i) blk->qs[i] = static_cast<int8_t>(x.q[i]);
      break;
    }
    case GgmlType::kQ4_0:
    case GgmlType::kIQ4_NL:
    case GgmlType::kQ4_1: {
      const bool has_min = t == GgmlType::kQ4_1;
      std::memcpy(b, &x.d, 2);
      if (has_min) std::memcpy(b + 2, &x.m, 2);
      uint8_t* qs = b + (has_min ? 4 : 2);
      for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>(x.q[i] | (x.q[i + 16] << 4));
      break;
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const bool has_min = t == GgmlType::kQ5_1;
      std::memcpy(b, &x.d, 2);
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
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      auto* blk = reinterpret_cast<BlockQ4_K*>(b);
      const bool q5 = t == GgmlType::kQ5_K;
      auto* blk5 = reinterpret_cast<BlockQ5_K*>(b);
      blk->d = x.d;
      blk->dmin = x.m;
      std::memcpy(blk->scales, x.scales, 12);
      uint8_t* qs = q5 ? blk5->qs : blk->qs;
      std::memset(qs, 0, 128);
      if (q5) std::memset(blk5->qh, 0, 32);
      for (int sub = 0; sub < 8; ++sub) {
        for (int l = 0; l < 32; ++l) {
          const int q = x.q[32 * sub + l];
          qs[32 * (sub / 2) + l] |= static_cast<uint8_t>((q & 0xF) << (4 * (sub & 1)));
          if (q5) blk5->qh[l] |= static_cast<uint8_t>(((q >> 4) & 1) << sub);
        }
      }
      break;
    }
    case GgmlType::kIQ4_XS: {
      auto* blk = reinterpret_cast<BlockIQ4_XS*>(b);
      blk->d = x.d;
      std::memcpy(blk->scales_l, x.scales, 4);
      std::memcpy(&blk->scales_h, x.scales + 4, 2);
      for (int sub = 0; sub < 8; ++sub) {
        for (int j = 0; j < 16; ++j) {
          blk->qs[16 * sub + j] = static_cast<uint8_t>(x.q[32 * sub + j] | (x.q[32 * sub + j + 16] << 4));
        }
      }
      break;
    }
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: {
      const bool q3 = t == GgmlType::kQ3_K;
      auto* b2 = reinterpret_cast<BlockQ2_K*>(b);
      auto* b3 = reinterpret_cast<BlockQ3_K*>(b);
      uint8_t* qs = q3 ? b3->qs : b2->qs;
      std::memset(qs, 0, 64);
      if (q3) {
        b3->d = x.d;
        std::memcpy(b3->scales, x.scales, 12);
        std::memset(b3->hmask, 0, 32);
      } else {
        b2->d = x.d;
        b2->dmin = x.m;
        std::memcpy(b2->scales, x.scales, 16);
      }
      for (int v = 0; v < 256; ++v) {
        const int n = v / 128, j = (v % 128) / 32, l = v % 32;
        qs[32 * n + l] |= static_cast<uint8_t>((x.q[v] & 3) << (2 * j));
        if (q3) b3->hmask[l] |= static_cast<uint8_t>(((x.q[v] >> 2) & 1) << (4 * n + j));
      }
      break;
    }
    case GgmlType::kQ6_K: {
      auto* blk = reinterpret_cast<BlockQ6_K*>(b);
      blk->d = x.d;
      std::memcpy(blk->scales, x.scales, 16);
      std::memset(blk->ql, 0, sizeof(blk->ql));
      std::memset(blk->qh, 0, sizeof(blk->qh));
      for (int sub = 0; sub < 8; ++sub) {
        const int half = sub / 4, quarter = sub % 4;
        uint8_t* ql = blk->ql + 64 * half + (quarter & 1) * 32;
        uint8_t* qh = blk->qh + 32 * half;
        for (int l = 0; l < 32; ++l) {
          const int q = x.q[32 * sub + l];
          ql[l] |= static_cast<uint8_t>((q & 0xF) << (quarter >= 2 ? 4 : 0));
          qh[l] |= static_cast<uint8_t>(((q >> 4) & 3) << (2 * quarter));
        }
      }
      break;
    }
    default:
      break;
  }
}

// The panel block of 8 rows holding GGUF block `x` of row r: writes row r's part into `out`
// (zeroed before the first row) or reads it back.
void PutBlock(GgmlType t, const BlockInts& x, int r, uint8_t* out) {
  const KPanelFormat k = KPanelFormatOf(t);
  if (k.ok) {
    std::memcpy(out + 2 * r, &x.d, 2);
    if (k.has_min) std::memcpy(out + k.dmin_off + 2 * r, &x.m, 2);
    for (int s = 0; s < k.scale_bytes; ++s) out[k.scales_off + 8 * s + r] = x.scales[s];
    for (int g = 0; g < 8; ++g) {
      uint8_t* grp = out + k.groups_off + g * k.group_bytes;
      if (k.two_bit) PutGroup2(grp + k.values_off, k.hmask ? grp + k.high_off : nullptr, r, x.q + 32 * g);
      else PutGroup(GroupOf(k, grp), r, x.q + 32 * g);
    }
    return;
  }
  const PanelFormat f = PanelFormatOf(t);
  std::memcpy(out + 2 * r, &x.d, 2);
  if (f.has_min) std::memcpy(out + f.min_off + 2 * r, &x.m, 2);
  if (t == GgmlType::kQ8_0) {
    for (int i = 0; i < 32; ++i) {
      const Slot s = SlotOf(true, r, i);
      out[f.values_off + 32 * s.vec + s.byte] = static_cast<uint8_t>(static_cast<int8_t>(x.q[i]));
    }
    return;
  }
  PutGroup(GroupOf(f, out), r, x.q);
}

BlockInts GetBlock(GgmlType t, const uint8_t* in, int r) {
  BlockInts x;
  std::memcpy(&x.d, in + 2 * r, 2);
  const KPanelFormat k = KPanelFormatOf(t);
  if (k.ok) {
    if (k.has_min) std::memcpy(&x.m, in + k.dmin_off + 2 * r, 2);
    for (int s = 0; s < k.scale_bytes; ++s) x.scales[s] = in[k.scales_off + 8 * s + r];
    for (int g = 0; g < 8; ++g) {
      const uint8_t* grp = in + k.groups_off + g * k.group_bytes;
      const auto p = GroupOf(k, grp);
      for (int i = 0; i < 32; ++i) {
        x.q[32 * g + i] = k.two_bit ? GetValue2(grp + k.values_off, k.hmask ? grp + k.high_off : nullptr, r, i)
                                    : GetValue(p, r, i);
      }
    }
    return x;
  }
  const PanelFormat f = PanelFormatOf(t);
  if (f.has_min) std::memcpy(&x.m, in + f.min_off + 2 * r, 2);
  if (t == GgmlType::kQ8_0) {
    for (int i = 0; i < 32; ++i) {
      const Slot s = SlotOf(true, r, i);
      x.q[i] = static_cast<int8_t>(in[f.values_off + 32 * s.vec + s.byte]);
    }
    return x;
  }
  const auto p = GroupOf(f, in);
  for (int i = 0; i < 32; ++i) x.q[i] = GetValue(p, r, i);
  return x;
}

}  // namespace

bool CanRepack(GgmlType type) { return PanelFormatOf(type).ok || KPanelFormatOf(type).ok; }

void RepackMatrix(const WeightView& w, uint8_t* dst) {
  const auto& tr = GgmlTraits(w.type);
  const size_t bb = tr.type_size;  // a panel block is 8 GGUF blocks' bytes
  const int64_t nb = w.n_cols / tr.block_size, n_panels = w.n_rows / kPanelRows;
  for (int64_t p = 0; p < n_panels; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = dst + p * kPanelRows * w.row_bytes + b * kPanelRows * bb;
      std::memset(out, 0, kPanelRows * bb);
      for (int r = 0; r < kPanelRows; ++r) {
        PutBlock(w.type, ReadBlock(w.type, w.Row(p * kPanelRows + r) + b * bb), r, out);
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
  const auto& tr = GgmlTraits(w.type);
  const size_t bb = tr.type_size;
  const int r = static_cast<int>(row % kPanelRows);
  for (int64_t b = 0; b < w.n_cols / tr.block_size; ++b) {
    const uint8_t* in = w.data + p * kPanelRows * w.row_bytes + b * kPanelRows * bb;
    WriteBlock(w.type, GetBlock(w.type, in, r), blocks + b * bb);
  }
}

}  // namespace tlr
