// File types and llama.cpp's quantization mixes (quant layer): which ggml type each weight
// matrix of a model gets for a file type such as q4_k_m, as llama.cpp's quantizer decides it
// (llama_tensor_get_type in src/llama-quant.cpp), for the dense decoder models TLR runs: no
// experts, no Falcon, no 70B special case, no importance matrix. Pure data and functions;
// thread-safe. Used by make-random to write files that look like llama-quantize's output.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "quant/ggml_type.h"

namespace tlr {

struct FileType {
  std::string_view name;  // as make-random spells it: "q8_0", "q4_k_m", ...
  uint32_t llama_ftype;   // general.file_type (llama_ftype)
  GgmlType base;          // the type of most matrices
  // True for llama.cpp's mixes (per-tensor rules); false for single types, which give every
  // weight matrix, embedding and LM head included, the base type (llama-quantize --pure).
  bool mix;
  std::string_view help;
};

// Every file type, single types first.
std::span<const FileType> FileTypes();
// nullptr for an unknown name.
const FileType* FindFileType(std::string_view name);

// What a weight matrix is, as far as the mixes care.
enum class TensorRole {
  kTokenEmbd, kOutput, kAttnQ, kAttnK, kAttnV, kAttnOutput, kFfnGate, kFfnUp, kFfnDown,
};

struct TensorSlot {
  TensorRole role;
  int64_t n_cols;        // row length (ggml ne[0])
  int layer = 0;         // block index, for the per-layer rules of attn_v and ffn_down
  int n_layers = 1;
  bool tied_embeddings;  // no output.weight: token_embd is also the LM head
};

// The type of a weight matrix in a file of type `ft` (`pure`: ignore the mix rules, as
// llama-quantize --pure), after llama.cpp's fallback for rows that the chosen type's block
// does not divide.
GgmlType TensorTypeFor(const FileType& ft, const TensorSlot& slot, bool pure = false);

// llama.cpp's fallback when n_cols is not a multiple of t's block size: Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K -> Q4_0, IQ4_XS -> IQ4_NL, and F16 when even that
// block does not fit. t itself when it fits.
GgmlType FallbackType(GgmlType t, int64_t n_cols);

}  // namespace tlr
