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
  std::string type = "q8_0";    // f32 | f16 | q8_0 | q4_0 | q4_k
  std::string tokenizer_path;   // tokenizer.json or a GGUF with tokenizer metadata; empty:
                                // a small built-in byte-level BPE vocabulary
  uint64_t seed = 1;
};

std::vector<std::string> RandomModelPresets();

// Writes the model to `path` (atomically). `progress(done, total)` is called per tensor.
Status WriteRandomModel(const RandomModelOptions& opts, const std::string& path,
                        const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace tlr
