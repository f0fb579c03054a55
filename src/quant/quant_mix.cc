// File types and llama.cpp's quantization mixes (quant layer). See quant_mix.h.
//
// The rules below are llama.cpp's for the four mixes TLR writes (its llama_tensor_get_type,
// read for the ftypes Q3_K_M, Q4_K_S, Q4_K_M, Q5_K_M). llama.cpp walks the tensors in layer
// order, so its attn_v and ffn_down counters are the layer index.
#include "quant/quant_mix.h"

#include <array>

namespace tlr {
namespace {

// llama_ftype values.
constexpr uint32_t kFtypeQ3KM = 12, kFtypeQ4KS = 14, kFtypeQ4KM = 15, kFtypeQ5KM = 17;

constexpr std::array<FileType, 19> kFileTypes = {{
    {"f32", 0, GgmlType::kF32, false, "32-bit floats"},
    {"f16", 1, GgmlType::kF16, false, "16-bit floats"},
    {"bf16", 32, GgmlType::kBF16, false, "bfloat16"},
    {"q8_0", 7, GgmlType::kQ8_0, false, "8 bits per weight + f16 scale per 32"},
    {"q4_0", 2, GgmlType::kQ4_0, false, "4 bits, scale per 32"},
    {"q4_1", 3, GgmlType::kQ4_1, false, "4 bits, scale and minimum per 32"},
    {"q5_0", 8, GgmlType::kQ5_0, false, "5 bits, scale per 32"},
    {"q5_1", 9, GgmlType::kQ5_1, false, "5 bits, scale and minimum per 32"},
    {"q2_k", 10, GgmlType::kQ2_K, false, "K-quant, 2 bits (rows not a multiple of 256: q4_0)"},
    {"q3_k", 11, GgmlType::kQ3_K, false, "K-quant, 3 bits (rows not a multiple of 256: q4_0)"},
    {"q5_k", 16, GgmlType::kQ5_K, false, "K-quant, 5 bits (rows not a multiple of 256: q5_1)"},
    {"q6_k", 18, GgmlType::kQ6_K, false, "K-quant, 6 bits (rows not a multiple of 256: q8_0)"},
    {"iq4_nl", 25, GgmlType::kIQ4_NL, false, "non-linear 4 bits, scale per 32"},
    {"iq4_xs", 30, GgmlType::kIQ4_XS, false, "non-linear 4 bits, 6-bit scales per 32 in 256 (else iq4_nl)"},
    {"q4_k_m", kFtypeQ4KM, GgmlType::kQ4_K, true, "llama.cpp's Q4_K_M mix"},
    {"q4_k_s", kFtypeQ4KS, GgmlType::kQ4_K, true, "llama.cpp's Q4_K_S mix"},
    {"q5_k_m", kFtypeQ5KM, GgmlType::kQ5_K, true, "llama.cpp's Q5_K_M mix"},
    {"q3_k_m", kFtypeQ3KM, GgmlType::kQ3_K, true, "llama.cpp's Q3_K_M mix"},
    // llama-quantize also reads "Q4_K" as Q4_K_M; scripts rely on this meaning.
    {"q4_k", kFtypeQ4KM, GgmlType::kQ4_K, true, "alias of q4_k_m (pure q4_K with --pure)"},
}};

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third layer
// in between.
bool UseMoreBits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The mix rule for one tensor, before the fallback.
GgmlType MixType(uint32_t ftype, GgmlType base, const TensorSlot& s) {
  const int i = s.layer, n = s.n_layers;
  switch (s.role) {
    case TensorRole::kOutput:
      break;
    case TensorRole::kTokenEmbd:
      if (!s.tied_embeddings) return base;  // none of these mixes changes an untied embedding
      break;
    case TensorRole::kAttnV:
      if (ftype == kFtypeQ3KM) return i < 2 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
      if ((ftype == kFtypeQ4KM || ftype == kFtypeQ5KM) && UseMoreBits(i, n)) return GgmlType::kQ6_K;
      if (ftype == kFtypeQ4KS && i < 4) return GgmlType::kQ5_K;
      return base;
    case TensorRole::kFfnDown:
      // Q3_K_M's q3_K branch is Falcon-only: every other architecture gets q4_K.
      if (ftype == kFtypeQ3KM) return i < n / 16 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
      if ((ftype == kFtypeQ4KM || ftype == kFtypeQ5KM) && UseMoreBits(i, n)) return GgmlType::kQ6_K;
      if (ftype == kFtypeQ4KS && i < n / 8) return GgmlType::kQ5_K;
      return base;
    case TensorRole::kAttnOutput:
      return ftype == kFtypeQ3KM ? GgmlType::kQ4_K : base;
    default:
      return base;
  }
  // The LM head (output.weight, or a tied token_embd): q8_0 when the base type's block does
  // not divide its rows, q6_K otherwise.
  if (s.n_cols % GgmlTraits(base).block_size != 0) return GgmlType::kQ8_0;
  return base == GgmlType::kQ8_0 ? base : GgmlType::kQ6_K;
}

}  // namespace

std::span<const FileType> FileTypes() { return kFileTypes; }

const FileType* FindFileType(std::string_view name) {
  for (const FileType& f : kFileTypes) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

GgmlType FallbackType(GgmlType t, int64_t n_cols) {
  if (n_cols % GgmlTraits(t).block_size == 0) return t;
  GgmlType f;
  switch (t) {
    case GgmlType::kIQ4_XS: f = GgmlType::kIQ4_NL; break;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: f = GgmlType::kQ4_0; break;
    case GgmlType::kQ4_K: f = GgmlType::kQ5_0; break;
    case GgmlType::kQ5_K: f = GgmlType::kQ5_1; break;
    case GgmlType::kQ6_K: f = GgmlType::kQ8_0; break;
    default: return GgmlType::kF16;
  }
  return n_cols % GgmlTraits(f).block_size == 0 ? f : GgmlType::kF16;
}

GgmlType TensorTypeFor(const FileType& ft, const TensorSlot& slot, bool pure) {
  if (!GgmlTraits(ft.base).quantized) return ft.base;
  const GgmlType t = ft.mix && !pure ? MixType(ft.llama_ftype, ft.base, slot) : ft.base;
  return FallbackType(t, slot.n_cols);
}

}  // namespace tlr
