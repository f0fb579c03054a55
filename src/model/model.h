// Model (model layer): a qwen2, llama, qwen3 or gemma3 transformer loaded from a GGUF file, with a forward
// pass over batches of tokens from one or several sequences (each with its own KvCache).
//
// One Forward call does everything the callers need: batched prefill (real matrix products
// over all tokens), single-token decode, and a step over many independent sequences at once
// (the server's continuous batching), returning per requested position the logits and/or
// the final hidden state (after the final norm: the LM head's input, which routers read).
//
// Weights stay in the memory map (no copies) except tiny norm/bias vectors stored in a type
// other than F32, which are converted at load. A Model is immutable after Load and can be
// shared by threads; each concurrent Forward needs its own ForwardContext and caches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gguf/gguf_reader.h"
#include "model/kv_cache.h"
#include "model/tokenizer/tokenizer.h"
#include "ops/matmul.h"
#include "model/weight_cache.h"
#include "util/huge_pages.h"
#include "util/status.h"

namespace tlr {

class ThreadPool;
struct PackedInfo;

// Which positions of a sequence's new tokens produce outputs.
enum class OutputRows { kNone, kLast, kAll };

// One sequence's part of a Forward call.
struct SequenceInput {
  KvCache* cache = nullptr;            // tokens are appended at cache->size()
  std::span<const int32_t> tokens;     // new tokens (at least one)
  OutputRows rows = OutputRows::kLast;
  float* logits = nullptr;             // [n_rows, n_vocab] if non-null
  float* hidden = nullptr;             // [n_rows, n_embd] if non-null
};

// Scratch memory for Forward, reused across calls (no allocation once warmed up).
class ForwardContext {
 public:
  // `pool` may be null: the pass then runs on the calling thread only.
  explicit ForwardContext(ThreadPool* pool);
  ~ForwardContext();
  ThreadPool* pool() const { return pool_; }

 private:
  friend class Model;
  ThreadPool* pool_;
  std::unique_ptr<ThreadPool> own_pool_;
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_, out_hidden_, out_logits_;
  std::vector<float> rope_cs_;
  std::vector<int32_t> seq_of_, pos_of_;
  MatMulInput in_;
};

class Model {
 public:
  struct Options {
    // Override the tokenizer's pre-tokenizer (see TokenizerOptions).
    std::string pre_override;
    // Copy quantized matrices of the types with a panel layout (CanRepack) into it at load
    // (same size; see RepackMatrix). Off: every weight is used straight from the memory map.
    bool repack = true;
    // How NewCache stores keys and values: f16 (default), f32 or q8_0 (see KvCache). Load
    // fails when the model's head dimension does not suit the type.
    GgmlType kv_type = GgmlType::kF16;
    // The weight cache (weight_cache.h: the repacked weights in a file, mapped at the next
    // load): "auto" (beside the model, else in the user's cache directory), "off", or a
    // directory to keep it in. Only with `repack`.
    std::string weight_cache = "auto";
    // Hears what a slow first open is doing (repacking, writing the weight cache) and how long
    // it took; may be empty. Not called when the weights come from the cache.
    std::function<void(const std::string&)> on_progress;
  };

  // Maps and validates a GGUF model: architecture, hyperparameters, every tensor's presence,
  // shape and type. Errors name the tensor or key.
  static Expected<std::unique_ptr<Model>> Load(const std::string& path, const Options& opts);
  static Expected<std::unique_ptr<Model>> Load(const std::string& path) { return Load(path, Options{}); }

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return file_; }
  // Bytes of weights read per generated token (all matrices + the embedding row).
  uint64_t weight_bytes_per_token() const;
  uint64_t total_weight_bytes() const { return file_.data_bytes(); }
  // Identifies this model: a hash of the architecture, hyperparameters, the tokenizer's
  // fingerprint, every tensor's name, type and shape, and samples of its bytes (the first and
  // last 256 of each tensor, so loading stays fast). Routers record the SLM's fingerprint.
  uint64_t fingerprint() const { return fingerprint_; }
  std::string fingerprint_hex() const;
  // Whether the weights come from a packed file (packed_gguf.h).
  bool packed() const { return packed_; }
  // The matrices whose bytes RepackMatrix reorders (the types with a panel layout), each with the
  // GGUF tensor it is read from, as loaded (view.repacked says whether it is in panels now).
  std::vector<std::pair<const GgufTensorInfo*, WeightView>> PanelMatrices() const;
  // Notes on load (converted tensors, tied output), for --verbose.
  const std::vector<std::string>& load_notes() const { return notes_; }

  // A KV cache for n_ctx positions, in the type chosen at load (Options::kv_type) or `type`,
  // in huge pages unless `memory` says otherwise (KvMemory).
  Expected<KvCache> NewCache(int64_t n_ctx) const { return KvCache::Create(config_, n_ctx, kv_type_); }
  Expected<KvCache> NewCache(int64_t n_ctx, GgmlType type) const { return KvCache::Create(config_, n_ctx, type); }
  Expected<KvCache> NewCache(int64_t n_ctx, KvMemory memory) const {
    return KvCache::Create(config_, n_ctx, kv_type_, memory);
  }
  GgmlType kv_type() const { return kv_type_; }

  // Runs the tokens of every sequence through the model, appends them to the caches and
  // writes the requested outputs. Fails (changing no cache) on an empty token list, a token
  // id outside the vocabulary, or a sequence that would exceed its cache's n_ctx.
  Status Forward(std::span<SequenceInput> seqs, ForwardContext* ctx) const;

  // Token `token`'s input embedding row as floats (before embd_scale): n_embd values.
  void EmbeddingRow(int32_t token, float* out) const;

 private:
  Model() = default;
  struct Layer {
    WeightView q, k, v, o, gate, up, down;
    const float *attn_norm, *ffn_norm, *bq, *bk, *bv;
    const float *q_norm, *k_norm;                  // [head_dim] qwen3, gemma3; else null
    const float *attn_post_norm, *ffn_post_norm;   // [n_embd] gemma3; else null
  };
  Status Bind();
  uint64_t ComputeFingerprint() const;
  // Every weight matrix the pass reads, by a short name ("blk.3.q", "output").
  std::vector<std::pair<std::string, WeightView*>> KernelMatrices();
  // A packed file: checks it and marks its repacked matrices (they are used from the mapping).
  Status MapPacked(const std::string& path, const PackedInfo& info, const std::string& pre_override);
  void Repack(const std::string& path, const std::string& cache,
              const std::function<void(const std::string&)>& on_progress);
  Expected<const float*> FloatVector(const std::string& name, int64_t n, bool required);
  Expected<WeightView> Matrix(const std::string& name, int64_t n_cols, int64_t n_rows);

  GgufFile file_;
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<Layer> layers_;
  WeightView embd_, output_;
  bool packed_ = false;
  bool tied_ = false;  // output_ is the token embedding (its copy after Repack)
  const float* output_norm_ = nullptr;
  std::vector<float> inv_freq_;                   // [head_dim / 2]
  std::vector<float> inv_freq_local_;             // [head_dim / 2] sliding-window layers' (gemma3)
  std::vector<std::unique_ptr<float[]>> owned_;   // converted norm/bias vectors
  std::vector<PageBuffer> repacked_;  // repacked matrices, in huge pages (util/huge_pages.h)
  std::unique_ptr<WeightCache> weight_cache_;  // the matrices' mapping, when they come from it
  std::vector<std::string> notes_;
  uint64_t fingerprint_ = 0;
  GgmlType kv_type_ = GgmlType::kF16;
};

}  // namespace tlr
