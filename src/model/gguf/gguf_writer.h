// GGUF writer (model layer): builds a GGUF v3 file from metadata and tensors.
//
// Keys and tensor names follow llama.cpp's conventions (general.architecture,
// <arch>.embedding_length, tokenizer.ggml.*, token_embd.weight, blk.N.attn_q.weight, ...) so
// other GGUF runtimes load what we write; gguf_keys.h names them. A written file parses back
// to identical metadata and tensor bytes. Not thread-safe; one writer per file.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/gguf/gguf_value.h"
#include "quant/ggml_type.h"
#include "util/status.h"

namespace tlr {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // Sets a metadata value; setting an existing key replaces it in place (order is kept).
  void Set(const std::string& key, GgufValue value);
  // Adds a tensor; `dims` in ggml order (dims[0] = row length). The bytes are copied.
  // Fails on a duplicate or over-long name, bad dims, or a byte count that does not match.
  Status AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                   std::span<const uint8_t> data);
  // A tensor whose bytes are produced only while writing (so a multi-GB model never has to
  // sit in memory): `fill` receives a buffer of exactly the tensor's byte size.
  using Filler = std::function<Status(std::span<uint8_t>)>;
  Status AddTensorLazy(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                       Filler fill);
  // Same, for float data stored as F32.
  Status AddTensorF32(const std::string& name, std::vector<int64_t> dims,
                      std::span<const float> data);

  // Serialises the file (alignment from general.alignment, default 32).
  Expected<std::vector<uint8_t>> ToBytes() const;
  // Writes atomically (temporary file + rename): a failure never leaves a partial file.
  // Tensors are produced and written one at a time. `progress(done, total)` (optional) is
  // called after each tensor.
  Status WriteFile(const std::string& path,
                   const std::function<void(size_t, size_t)>& progress = nullptr) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    uint64_t n_bytes;
    std::vector<uint8_t> data;  // when given up front
    Filler fill;                // when produced at write time
  };
  Status CheckNewTensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                        uint64_t* n_bytes) const;
  // Header, metadata and tensor table, padded to the data section; the alignment used.
  Expected<std::vector<uint8_t>> Header(uint64_t* alignment) const;
  uint32_t version_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace tlr
