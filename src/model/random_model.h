// Random-weight models with the real shapes of common models (model layer), written as
// GGUF files that look exactly like converted ones: llama.cpp key names, tensor names,
// quantization types and complete tokenizer metadata. Performance work, interop tests and
// the reference-forward fixtures run on them. Deterministic for a given seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/ggml_type.h"
#include "util/status.h"

namespace tlr {

struct RandomModelOptions {
  std::string preset = "tiny";  // see RandomModelPresets()
  std::string arch;             // "qwen2" or "llama"; empty: the preset's own
  // A file type of quant/quant_mix.h: a single type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
  // q5_1, q2_k, q3_k, q5_k, q6_k, iq4_nl, iq4_xs: every weight matrix in that type, with
  // llama.cpp's fallback for rows its block does not divide) or one of llama.cpp's mixes
  // (q4_k_m, q4_k_s, q5_k_m, q3_k_m; q4_k is an alias of q4_k_m).
  std::string type = "q8_0";
  bool pure = false;            // mixes too: every weight matrix in the base type
  std::string tokenizer_path;   // tokenizer.json or a GGUF with tokenizer metadata; empty:
                                // a small built-in byte-level BPE vocabulary
  uint64_t seed = 1;
  // > 0: the file asks for YaRN RoPE scaling by this factor over `yarn_orig_ctx` positions (as
  // llama.cpp's converter writes a Qwen2.5/Qwen3 config with rope_scaling type yarn).
  double yarn_factor = 0;
  int64_t yarn_orig_ctx = 0;
};

std::vector<std::string> RandomModelPresets();

// The file types `type` accepts, each with a one-line description, single types first.
struct RandomModelType {
  std::string name, help;
  bool mix;
};
std::vector<RandomModelType> RandomModelTypes();

// Writes the model to `path` (atomically). `progress(done, total)` is called per tensor.
Status WriteRandomModel(const RandomModelOptions& opts, const std::string& path,
                        const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace tlr
