// ModelConfig (model layer): the hyperparameters of a qwen2 or llama model, read from GGUF
// metadata with llama.cpp's key names. Plain data.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace tlr {

class GgufFile;

enum class Arch { kQwen2, kLlama };
enum class RopeStyle {
  kNeox,    // rotate (i, i + head_dim/2) pairs: qwen2
  kNormal,  // rotate (2i, 2i+1) pairs: llama (GGUF stores Q/K permuted for this)
};

struct ModelConfig {
  Arch arch = Arch::kQwen2;
  std::string arch_name;      // "qwen2" / "llama"
  std::string name;           // general.name, if any
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;       // n_embd / n_heads unless the file says otherwise
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-6f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;    // linear position scaling (rope.scaling.factor with type linear)
  RopeStyle rope_style = RopeStyle::kNeox;
  bool attn_bias = false;     // qwen2: Q, K, V biases

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }

  static Expected<ModelConfig> FromGguf(const GgufFile& file);
  std::string Summary() const;
};

}  // namespace tlr
