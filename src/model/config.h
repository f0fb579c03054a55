// ModelConfig (model layer): the hyperparameters of a qwen2, llama, qwen3 or gemma3 model,
// read from GGUF metadata with llama.cpp's key names and llama.cpp's rules where the file is
// silent (Gemma 3's layer pattern and local RoPE base). Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace tlr {

class GgufFile;

enum class Arch { kQwen2, kLlama, kQwen3, kGemma3 };
enum class RopeStyle {
  kNeox,    // rotate (i, i + head_dim/2) pairs: qwen2, qwen3, gemma3
  kNormal,  // rotate (2i, 2i+1) pairs: llama (GGUF stores Q/K permuted for this)
};

struct ModelConfig {
  Arch arch = Arch::kQwen2;
  std::string arch_name;      // "qwen2" / "llama" / "qwen3" / "gemma3"
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
  float rope_scale = 1.0f;    // 1 / rope.scaling.factor (type linear or yarn), else 1
  // YaRN (rope.scaling.type yarn: Qwen2.5/Qwen3 files made for 128K contexts): each rotation's
  // frequency is between the interpolated (x rope_scale) and the original one, by a ramp over
  // the dimensions between the corrections for beta_fast and beta_slow rotations in the original
  // context; the attention scores are scaled by mscale^2 (in attn_scale). As llama.cpp and
  // Hugging Face compute it.
  bool rope_yarn = false;
  int64_t yarn_orig_ctx = 0;  // rope.scaling.original_context_length, else context_length
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  // The factor (0..1) by which the frequency of rotation i (of head_dim / 2) is scaled.
  float RopeFrequencyScale(int64_t i) const;
  RopeStyle rope_style = RopeStyle::kNeox;
  bool attn_bias = false;     // qwen2: Q, K, V biases
  bool qk_norm = false;       // qwen3, gemma3: per-head RMS norm of Q and K before RoPE
  // gemma3: the attention and FFN outputs are RMS-normed (attn_post_norm, ffn_post_norm)
  // before their residual adds, the FFN gate is GELU (tanh) instead of SiLU, and the token
  // embeddings are scaled by sqrt(n_embd).
  bool post_norms = false;
  bool gelu_ffn = false;
  float embd_scale = 1.0f;
  float attn_scale_local = 0.0f;  // the same for sliding-window layers (no YaRN boost there)
  float attn_scale = 0.0f;    // attention score scale: 1/sqrt(head_dim) unless the file says
  float final_softcap = 0.0f; // > 0: logits = cap * tanh(logits / cap)
  // Sliding-window (local) layers, gemma3: a local layer's query at position p attends to
  // positions (p - sliding_window, p] and rotates with rope_base_local; the others are global.
  int64_t sliding_window = 0;
  float rope_base_local = 10000.0f;
  std::vector<uint8_t> local_layer;  // [n_layers] 1 = sliding-window layer; empty: none

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  bool IsLocal(int64_t layer) const { return !local_layer.empty() && local_layer[layer] != 0; }

  static Expected<ModelConfig> FromGguf(const GgufFile& file);
  std::string Summary() const;
};

}  // namespace tlr
