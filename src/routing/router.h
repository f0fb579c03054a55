// Routers (routing layer): per generated token, a confidence in [0, 1] that the SLM's own
// token is good enough. The decoder routes a token to the LLM when confidence < threshold
// (the paper's convention, used everywhere in TLR).
//
// Kinds:
//   citer    MLP on the SLM's final hidden state (CITER): Linear(h,2h) - BatchNorm - ReLU -
//            Dropout - Linear(2h,h) - ReLU - Linear(h,1) - sigmoid. Stored with BatchNorm
//            folded into the first linear layer (and dropout gone), so inference is three
//            matrix-vector products.
//   colm     Co-LLM's linear deferral head: P(defer) = sigmoid(w.h + b); confidence = 1 - P.
//   maxprob  the SLM's largest softmax probability.
//   entropy  1 - H(softmax) / log(V).
//   random   uniform in [0, 1), a hash of the seed and the SLM's logits (an ablation; a function
//            of the state, so a position gets the same draw however often it is asked).
//   r2r      R2R's router (r2r_net.h): the hidden state, the SLM's token's embedding and its
//            top-K logits through residual MLP blocks; confidence = 1 - P(critical). Imported
//            from PyTorch (`tlr router import --kind r2r`), stored as tensors router.r2r.<its
//            PyTorch name> (f32).
// citer and colm are trained (router_train.h) and stored in a GGUF file: general.architecture
// "tlr-router", keys tlr-router.{kind, input_dim, slm_fingerprint, slm_name, threshold,
// training_summary (JSON)}, tensors router.layer.N.{weight, bias}. A router refuses an SLM
// whose fingerprint differs from the one it was trained for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ops/matmul.h"
#include "quant/ggml_type.h"
#include "routing/r2r_net.h"
#include "util/status.h"

namespace tlr {

class GgufFile;
class GgufWriter;

class Model;
class ThreadPool;
struct R2rNet;

enum class RouterKind { kCiter, kColm, kMaxProb, kEntropy, kRandom, kR2r };

std::string_view RouterKindName(RouterKind kind);
// "citer", "colm", "maxprob", "entropy", "random", "r2r".
Expected<RouterKind> ParseRouterKind(std::string_view name);
// Whether the kind has learned weights (citer, colm, r2r).
bool RouterIsLearned(RouterKind kind);

// A dense layer y = W x + b, W stored row-major [n_out][n_in] as floats.
struct DenseLayer {
  int64_t n_in = 0, n_out = 0;
  std::vector<float> w, b;
  bool relu = false;  // ReLU after the layer (all but the last)
};

struct RouterInfo {
  RouterKind kind = RouterKind::kMaxProb;
  int64_t input_dim = 0;            // the SLM's n_embd (0 for kinds without weights)
  std::string slm_fingerprint;      // hex, as Model::fingerprint_hex(); empty: any SLM
  std::string slm_name;
  float threshold = 0.5f;           // recommended threshold
  std::string training_summary;     // JSON text
};

class Router {
 public:
  Router();
  ~Router();
  Router(Router&&) noexcept;
  Router& operator=(Router&&) noexcept;

  // A router without weights (maxprob, entropy, random).
  static Expected<Router> Builtin(RouterKind kind, uint64_t seed = 0);
  // A learned router from float layers (citer: 3 layers h->2h->h->1; colm: 1 layer h->1, the
  // deferral head). `type` is how Save stores and inference uses the weight matrices
  // (f32, f16 or q8_0; q8_0 falls back to f16 or f32 when a row length is not a multiple of 32).
  static Expected<Router> FromLayers(RouterInfo info, std::vector<DenseLayer> layers,
                                     GgmlType type = GgmlType::kF32);
  // An R2R router (r2r_net.h); info.input_dim becomes the network's hidden size.
  static Expected<Router> FromR2r(RouterInfo info, R2rNet net);
  // Reads a router GGUF; errors name what is wrong.
  static Expected<Router> Load(const std::string& path);
  // The same from a parsed GGUF; `name` (its file's) begins the errors.
  static Expected<Router> FromGguf(const GgufFile& file, const std::string& name);
  // A file path, or the name of a built-in kind (maxprob / entropy / random).
  static Expected<Router> LoadOrBuiltin(const std::string& path_or_kind, uint64_t seed = 0);
  Status Save(const std::string& path) const;  // atomic (a temporary file renamed into place)
  Expected<std::vector<uint8_t>> ToBytes() const;  // the file's bytes

  // OK when the router can read this SLM's outputs: matching hidden size, and the SLM
  // fingerprint it was trained for (if any).
  Status CheckCompatible(const Model& slm) const;

  // Confidence for one position: hidden [input_dim] (may be null for kinds that do not use it),
  // logits [n_vocab]. Not thread-safe (scratch buffers).
  float Confidence(const float* hidden, const float* logits, int64_t n_vocab, ThreadPool* pool);
  // Confidence of a learned router for n hidden states [n, input_dim] at once (citer, colm: the
  // kinds that read the hidden state alone; r2r, which needs the logits too, gives NaN).
  void ConfidenceBatch(const float* hidden, int64_t n, float* out, ThreadPool* pool);

  const RouterInfo& info() const { return info_; }
  RouterInfo& mutable_info() { return info_; }
  RouterKind kind() const { return info_.kind; }
  const std::vector<DenseLayer>& layers() const { return layers_; }
  const R2rNet* r2r() const { return r2r_.get(); }
  GgmlType weight_type() const { return type_; }
  int64_t n_params() const;

 private:
  struct Compiled;  // the weights in the kernels' format
  Status Compile();
  Status Describe(GgufWriter* w) const;  // the file's metadata and tensors
  RouterInfo info_;
  std::vector<DenseLayer> layers_;
  GgmlType type_ = GgmlType::kF32;
  std::unique_ptr<Compiled> compiled_;
  uint64_t seed_ = 0;  // the random router's
  std::shared_ptr<const R2rNet> r2r_;
  R2rScratch r2r_scratch_;
  std::vector<float> r2r_top_;
  std::vector<int32_t> r2r_index_;
};

// Layers of a `kind` router (citer: h -> 2h -> h -> 1; colm: h -> 1) for hidden size `dim`,
// with PyTorch's default initialisation: for measuring a router's cost without training one.
std::vector<DenseLayer> RandomRouterLayers(RouterKind kind, int64_t dim, uint64_t seed);

// Softmax-based confidences of a logits vector (the maxprob and entropy routers).
float MaxProbConfidence(const float* logits, int64_t n_vocab);
float EntropyConfidence(const float* logits, int64_t n_vocab);

}  // namespace tlr
