// The ggml type table (quant layer). Block geometry follows ggml's block structs:
//   q4_0 {f16 d; u8 qs[16]} = 18 B / 32, q4_1 {f16 d, m; u8 qs[16]} = 20 B / 32,
//   q5_0 {f16 d; u8 qh[4]; u8 qs[16]} = 22 B / 32, q5_1 = 24 B / 32,
//   q8_0 {f16 d; i8 qs[32]} = 34 B / 32, q8_1 {f16 d, s; i8 qs[32]} = 36 B / 32,
//   K-quants over 256-element super-blocks: q2_K 84 B, q3_K 110 B, q4_K 144 B, q5_K 176 B,
//   q6_K 210 B, q8_K {f32 d; i8 qs[256]; i16 bsums[16]} 292 B;
//   non-linear 4-bit: iq4_nl {f16 d; u8 qs[16]} = 18 B / 32,
//   iq4_xs {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]} = 136 B / 256.
#include "quant/ggml_type.h"

#include <array>
#include <string>
#include <utility>

namespace tlr {
namespace {

constexpr std::array<GgmlTypeTraits, 22> kTypes = {{
    {GgmlType::kF32, "f32", 1, 4, false},
    {GgmlType::kF16, "f16", 1, 2, false},
    {GgmlType::kQ4_0, "q4_0", 32, 18, true},
    {GgmlType::kQ4_1, "q4_1", 32, 20, true},
    {GgmlType::kQ5_0, "q5_0", 32, 22, true},
    {GgmlType::kQ5_1, "q5_1", 32, 24, true},
    {GgmlType::kQ8_0, "q8_0", 32, 34, true},
    {GgmlType::kQ8_1, "q8_1", 32, 36, true},
    {GgmlType::kQ2_K, "q2_K", 256, 84, true},
    {GgmlType::kQ3_K, "q3_K", 256, 110, true},
    {GgmlType::kQ4_K, "q4_K", 256, 144, true},
    {GgmlType::kQ5_K, "q5_K", 256, 176, true},
    {GgmlType::kQ6_K, "q6_K", 256, 210, true},
    {GgmlType::kQ8_K, "q8_K", 256, 292, true},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18, true},
    {GgmlType::kIQ4_XS, "iq4_xs", 256, 136, true},
    {GgmlType::kI8, "i8", 1, 1, false},
    {GgmlType::kI16, "i16", 1, 2, false},
    {GgmlType::kI32, "i32", 1, 4, false},
    {GgmlType::kI64, "i64", 1, 8, false},
    {GgmlType::kF64, "f64", 1, 8, false},
    {GgmlType::kBF16, "bf16", 1, 2, false},
}};

}  // namespace

std::optional<GgmlTypeTraits> FindGgmlType(uint32_t raw_id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == raw_id) return t;
  }
  return std::nullopt;
}

std::string_view UnreadGgmlTypeName(uint32_t raw_id) {
  // ggml's enum ggml_type: the ids between and after those in kTypes.
  static constexpr std::pair<uint32_t, std::string_view> kUnread[] = {
      {16, "iq2_xxs"}, {17, "iq2_xs"}, {18, "iq3_xxs"}, {19, "iq1_s"}, {21, "iq3_s"},
      {22, "iq2_s"}, {29, "iq1_m"}, {31, "q4_0_4_4"}, {32, "q4_0_4_8"}, {33, "q4_0_8_8"},
      {34, "tq1_0"}, {35, "tq2_0"}, {36, "iq4_nl_4_4"}, {37, "iq4_nl_4_8"}, {38, "iq4_nl_8_8"},
      {39, "mxfp4"}, {40, "nvfp4"}, {41, "q1_0"}, {42, "q2_0"}};
  for (const auto& [id, name] : kUnread) {
    if (id == raw_id) return name;
  }
  return {};
}

const GgmlTypeTraits& GgmlTraits(GgmlType type) {
  for (const auto& t : kTypes) {
    if (t.type == type) return t;
  }
  return kTypes[0];  // unreachable for valid enum values
}

std::span<const GgmlTypeTraits> AllGgmlTypes() { return kTypes; }

Expected<uint64_t> GgmlTensorBytes(GgmlType type, uint64_t row_length, uint64_t n_elements) {
  const auto& t = GgmlTraits(type);
  if (row_length == 0 || row_length % t.block_size != 0) {
    return Status::Error("row length " + std::to_string(row_length) + " is not a multiple of " +
                         std::string(t.name) + "'s block size " + std::to_string(t.block_size));
  }
  if (n_elements % t.block_size != 0) {
    return Status::Error("element count is not a multiple of the block size");
  }
  const uint64_t blocks = n_elements / t.block_size;
  uint64_t bytes;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(t.type_size), &bytes)) {
    return Status::Error("tensor byte size overflows 64 bits");
  }
  return bytes;
}

}  // namespace tlr
