// R2R's router network (routing layer): the token router of "R2R: Efficiently Navigating
// Divergent Reasoning Paths with Small-Large Model Token Routing" (thu-nics/R2R, its
// HiddenStatesTokenLMHeadLogitsClassifier), read from its PyTorch parameter names. Per position
// it reads the SLM's last hidden state h [H], the embedding e [E] of the SLM's token there (its
// argmax), and the SLM's top-K logits l [K] (sorted, largest first):
//
//   normalize_input (when its layer_norm_* tensors are there): h = LN(h), e = LN(e), l = softmax(l)
//   x = combined_projection([h, e, logits_projection(l)])            -> [D0]
//   x = backbone.input_projection(x)
//   per block i:  x = dim_change_i(x) + W2_i GELU(W1_i LN_i(x))      (dim_change: identity when
//                                                                      the width stays)
//   out = backbone.output_layer.1(LN(x))                              -> one logit
//
// sigmoid(out) is the probability that the token is critical (route it); TLR's confidence is
// 1 - sigmoid(out). LayerNorm eps 1e-5, GELU exact (erf), as PyTorch's defaults; dropout is an
// identity at inference. The token embedding table is the network's own "token_embeddings.weight"
// (R2R copies the SLM's input embedding into it; `tlr router import` takes the SLM's when a
// checkpoint leaves it out). Position embeddings (use_position_embedding) are not supported.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ops/matmul.h"
#include "quant/ggml_type.h"
#include "util/status.h"

namespace tlr {

class ThreadPool;

// What R2rNet::Logit needs between calls (one per caller scoring at a time).
struct R2rScratch {
  std::vector<float> buf;
  MatMulInput mm;
};

struct R2rNet {
  struct Tensor {
    Tensor() = default;
    Tensor(std::vector<int64_t> s, std::vector<float> values) : shape(std::move(s)), v(std::move(values)) {}
    std::vector<int64_t> shape;  // PyTorch's order (a Linear's weight: [out, in])
    std::vector<float> v;        // the values in f32 (empty when `type` is not f32)
    // A matrix may instead be held as f16 or q8_0 rows in `q` (StoreMatricesAs; a router file
    // stored so); vectors (biases, LayerNorm) are always f32.
    GgmlType type = GgmlType::kF32;
    std::vector<uint8_t> q;
  };
  std::map<std::string, Tensor> params;  // by PyTorch name
  int64_t hidden = 0, embed = 0, topk = 0, vocab = 0;
  bool normalize_input = false;
  int n_blocks = 0;

  // Move-only: the forward pass reads `params` through pointers taken once (a std::map keeps
  // its elements where they are when it is moved).
  R2rNet() = default;
  R2rNet(R2rNet&&) = default;
  R2rNet& operator=(R2rNet&&) = default;
  R2rNet(const R2rNet&) = delete;
  R2rNet& operator=(const R2rNet&) = delete;

  // Checks every name and shape the forward pass reads (and that nothing else is there); fills
  // the sizes. Errors name the tensor.
  static Expected<R2rNet> FromParams(std::map<std::string, Tensor> params);
  // Holds every matrix (the Linear weights and the token embedding) as `type` (f32, f16 or
  // q8_0; q8_0 falls back to f16 for a matrix whose rows are not a multiple of 32 long): a
  // quarter of f32's memory and of what a token reads at q8_0, for scores within quantization
  // error of f32's. From f32 only (a network already held otherwise is refused).
  Status StoreMatricesAs(GgmlType type);
  // The type most of the weights are held as (that of backbone.input_projection.weight; a q8_0
  // network keeps f16 for matrices whose rows are not a multiple of 32 long, such as a
  // logits projection over R2R's top 100).
  GgmlType matrix_type() const;
  // The network's output logit for one position. The Linear layers run on the ops layer's
  // matrix kernels of their weights' type (SIMD; on `pool`'s threads when given): at R2R's
  // published size (6 blocks of 1024, 52 M parameters) a token reads 207 MB of weights in f32,
  // 104 MB in f16, 55 MB in q8_0. LayerNorm, GELU and the softmax accumulate in double.
  float Logit(const float* hidden, int32_t token, const float* top_logits, R2rScratch* scratch,
              ThreadPool* pool = nullptr) const;
  int64_t n_params() const;

 private:
  struct Pair {  // a Linear's or a LayerNorm's weight and bias; w null: absent
    const Tensor* w = nullptr;
    const Tensor* b = nullptr;
  };
  struct Block {
    Pair norm, up, down, dim_change;  // dim_change.w null: the identity
  };
  Pair norm_hidden_, norm_token_, logits_projection_, combined_, input_projection_, out_norm_, out_;
  const Tensor* embedding_ = nullptr;
  std::vector<Block> blocks_;
  int64_t widest_ = 0;  // the largest activation (scratch per buffer)
};

// How a router holds a weight matrix whose rows are `cols` long when asked for `type`: q8_0
// needs rows of whole 32-value blocks, and a matrix whose rows are not keeps f16.
inline GgmlType RouterMatrixType(GgmlType type, int64_t cols) {
  return type == GgmlType::kQ8_0 && cols % 32 != 0 ? GgmlType::kF16 : type;
}

// The k largest of logits[0..n), largest first, and the index of the largest (ties: the lowest).
// `scratch` (optional) keeps its index buffer between calls.
void TopLogits(const float* logits, int64_t n, int64_t k, float* out, int32_t* argmax,
               std::vector<int32_t>* scratch = nullptr);

}  // namespace tlr
