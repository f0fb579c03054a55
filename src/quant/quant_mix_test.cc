// Unit tests of the quantization mixes: the per-tensor types of llama.cpp's Q4_K_M, Q4_K_S,
// Q5_K_M and Q3_K_M files for the shapes of Qwen2.5-0.5B (rows of 896: fallbacks), Llama 3.2
// 1B and Qwen2.5-7B (untied LM head), and the single (pure) types.
#include "quant/quant_mix.h"

#include <gtest/gtest.h>

#include <string>

namespace tlr {
namespace {

using R = TensorRole;
constexpr GgmlType kQ4_0 = GgmlType::kQ4_0, kQ5_0 = GgmlType::kQ5_0, kQ5_1 = GgmlType::kQ5_1,
                   kQ8_0 = GgmlType::kQ8_0, kQ4_K = GgmlType::kQ4_K, kQ5_K = GgmlType::kQ5_K,
                   kQ6_K = GgmlType::kQ6_K;

struct Shape {
  int64_t n_embd, n_ff;
  int n_layers;
  bool tied;
};
constexpr Shape kQwen05{896, 4864, 24, true}, kLlama1{2048, 8192, 16, true}, kQwen7{3584, 18944, 28, false};

GgmlType TypeOf(const char* file_type, const Shape& s, R role, int layer = 0, bool pure = false) {
  const FileType* ft = FindFileType(file_type);
  EXPECT_NE(ft, nullptr) << file_type;
  if (!ft) return GgmlType::kF32;
  const int64_t cols = role == R::kFfnDown ? s.n_ff : s.n_embd;
  return TensorTypeFor(*ft, {role, cols, layer, s.n_layers, s.tied}, pure);
}

// Layers whose attn_v and ffn_down get more bits in Q4_K_M / Q5_K_M (llama.cpp's use_more_bits).
bool MoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

TEST(QuantMix, Q4KMQwen05B) {
  EXPECT_EQ(TypeOf("q4_k_m", kQwen05, R::kTokenEmbd), kQ8_0);  // tied LM head, 896 % 256 != 0
  int more = 0;
  for (int l = 0; l < 24; ++l) {
    EXPECT_EQ(TypeOf("q4_k_m", kQwen05, R::kAttnQ, l), kQ5_0);
    EXPECT_EQ(TypeOf("q4_k_m", kQwen05, R::kAttnK, l), kQ5_0);
    EXPECT_EQ(TypeOf("q4_k_m", kQwen05, R::kAttnOutput, l), kQ5_0);
    EXPECT_EQ(TypeOf("q4_k_m", kQwen05, R::kFfnGate, l), kQ5_0);
    EXPECT_EQ(TypeOf("q4_k_m", kQwen05, R::kFfnUp, l), kQ5_0);
    const bool mb = MoreBits(l, 24);
    more += mb;
    EXPECT_EQ(TypeOf("q4_k_m", kQwen05, R::kAttnV, l), mb ? kQ8_0 : kQ5_0) << l;  // q6_K / q4_K fall back
    EXPECT_EQ(TypeOf("q4_k_m", kQwen05, R::kFfnDown, l), mb ? kQ6_K : kQ4_K) << l;  // 4864 = 19 * 256
  }
  EXPECT_EQ(more, 12);  // layers 0-2, 5, 8, 11, 14, 17, 20, 21-23
  // The old spelling is the same mix.
  EXPECT_EQ(TypeOf("q4_k", kQwen05, R::kAttnV, 5), kQ8_0);
  EXPECT_EQ(FindFileType("q4_k")->llama_ftype, 15u);
}

TEST(QuantMix, Q4KMLlama1BAndQwen7B) {
  EXPECT_EQ(TypeOf("q4_k_m", kLlama1, R::kTokenEmbd), kQ6_K);
  for (int l = 0; l < 16; ++l) {
    const GgmlType more = MoreBits(l, 16) ? kQ6_K : kQ4_K;  // layers 0, 1, 4, 7, 10, 13, 14, 15
    EXPECT_EQ(TypeOf("q4_k_m", kLlama1, R::kAttnV, l), more) << l;
    EXPECT_EQ(TypeOf("q4_k_m", kLlama1, R::kFfnDown, l), more) << l;
    EXPECT_EQ(TypeOf("q4_k_m", kLlama1, R::kAttnQ, l), kQ4_K);
    EXPECT_EQ(TypeOf("q4_k_m", kLlama1, R::kFfnUp, l), kQ4_K);
  }
  EXPECT_EQ(TypeOf("q4_k_m", kLlama1, R::kAttnV, 2), kQ4_K);
  EXPECT_EQ(TypeOf("q4_k_m", kLlama1, R::kAttnV, 4), kQ6_K);
  // Untied: output.weight is the LM head (q6_K), the embedding keeps the base type.
  EXPECT_EQ(TypeOf("q4_k_m", kQwen7, R::kOutput), kQ6_K);
  EXPECT_EQ(TypeOf("q4_k_m", kQwen7, R::kTokenEmbd), kQ4_K);
  EXPECT_EQ(TypeOf("q4_k_m", kQwen7, R::kFfnDown, 3), kQ4_K);  // 18944 = 74 * 256
}

TEST(QuantMix, Q4KSQ5KMQ3KM) {
  for (int l = 0; l < 16; ++l) {
    EXPECT_EQ(TypeOf("q4_k_s", kLlama1, R::kAttnV, l), l < 4 ? kQ5_K : kQ4_K) << l;
    EXPECT_EQ(TypeOf("q4_k_s", kLlama1, R::kFfnDown, l), l < 2 ? kQ5_K : kQ4_K) << l;
    EXPECT_EQ(TypeOf("q4_k_s", kLlama1, R::kAttnOutput, l), kQ4_K);
  }
  EXPECT_EQ(TypeOf("q4_k_s", kLlama1, R::kTokenEmbd), kQ6_K);
  EXPECT_EQ(TypeOf("q4_k_s", kQwen05, R::kAttnV, 0), kQ5_1);  // q5_K falls back to q5_1
  for (int l = 0; l < 24; ++l) {
    const bool mb = MoreBits(l, 24);
    EXPECT_EQ(TypeOf("q5_k_m", kQwen05, R::kAttnQ, l), kQ5_1);
    EXPECT_EQ(TypeOf("q5_k_m", kQwen05, R::kAttnV, l), mb ? kQ8_0 : kQ5_1) << l;
    EXPECT_EQ(TypeOf("q5_k_m", kQwen05, R::kFfnDown, l), mb ? kQ6_K : kQ5_K) << l;
    // Q3_K_M: q3_K falls back to q4_0 on rows of 896; attn_v q5_K (layers 0-1) or q4_K,
    // attn_output q4_K, ffn_down q5_K in the first 1/16 of the layers and q4_K after.
    EXPECT_EQ(TypeOf("q3_k_m", kQwen05, R::kAttnQ, l), kQ4_0);
    EXPECT_EQ(TypeOf("q3_k_m", kQwen05, R::kFfnUp, l), kQ4_0);
    EXPECT_EQ(TypeOf("q3_k_m", kQwen05, R::kAttnV, l), l < 2 ? kQ5_1 : kQ5_0) << l;
    EXPECT_EQ(TypeOf("q3_k_m", kQwen05, R::kAttnOutput, l), kQ5_0);
    EXPECT_EQ(TypeOf("q3_k_m", kQwen05, R::kFfnDown, l), l < 1 ? kQ5_K : kQ4_K) << l;
  }
  EXPECT_EQ(TypeOf("q5_k_m", kQwen05, R::kTokenEmbd), kQ8_0);
  EXPECT_EQ(TypeOf("q3_k_m", kLlama1, R::kAttnQ, 3), GgmlType::kQ3_K);
  EXPECT_EQ(TypeOf("q3_k_m", kLlama1, R::kTokenEmbd), kQ6_K);
}

TEST(QuantMix, PureTypesAndFallbacks) {
  EXPECT_EQ(TypeOf("q2_k", kQwen05, R::kAttnQ), kQ4_0);
  EXPECT_EQ(TypeOf("q2_k", kQwen05, R::kFfnDown), GgmlType::kQ2_K);
  EXPECT_EQ(TypeOf("q2_k", kLlama1, R::kTokenEmbd), GgmlType::kQ2_K);  // pure: LM head too
  EXPECT_EQ(TypeOf("q3_k", kQwen05, R::kTokenEmbd), kQ4_0);
  EXPECT_EQ(TypeOf("iq4_xs", kQwen05, R::kAttnQ), GgmlType::kIQ4_NL);
  EXPECT_EQ(TypeOf("iq4_xs", kLlama1, R::kAttnQ), GgmlType::kIQ4_XS);
  EXPECT_EQ(TypeOf("q6_k", kQwen05, R::kAttnV, 5), kQ8_0);
  EXPECT_EQ(TypeOf("q5_k", kQwen05, R::kAttnV), kQ5_1);
  EXPECT_EQ(TypeOf("q8_0", kQwen05, R::kTokenEmbd), kQ8_0);
  EXPECT_EQ(TypeOf("bf16", kQwen05, R::kAttnQ), GgmlType::kBF16);
  // --pure turns a mix into its base type everywhere (with the fallback).
  EXPECT_EQ(TypeOf("q4_k", kLlama1, R::kAttnV, 0, true), kQ4_K);
  EXPECT_EQ(TypeOf("q4_k", kLlama1, R::kTokenEmbd, 0, true), kQ4_K);
  EXPECT_EQ(TypeOf("q4_k", kQwen05, R::kAttnV, 0, true), kQ5_0);
  EXPECT_EQ(FallbackType(kQ4_K, 48), GgmlType::kF16);  // not even a q5_0 block fits
  EXPECT_EQ(FallbackType(kQ4_0, 48), GgmlType::kF16);
  EXPECT_EQ(FallbackType(kQ4_0, 64), kQ4_0);
  EXPECT_EQ(FindFileType("q4_k_l"), nullptr);
  for (const FileType& f : FileTypes()) {
    EXPECT_EQ(FindFileType(f.name), &f);
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
}

}  // namespace
}  // namespace tlr
