// GGUF reader (model layer): parses a GGUF v2/v3 file into metadata and a tensor table whose
// data points into the memory map (no copies).
//
// The reader is defensive by design (a fuzzer runs on it): hard caps on counts, string
// lengths, nesting and dimensions; overflow-checked size arithmetic; every tensor range
// inside the file; duplicate keys and tensor names rejected. Any problem is returned as an
// error naming the field and its byte offset; it never reads out of bounds.
//
// Split models (llama.cpp's gguf-split: NAME-00001-of-00005.gguf ... NAME-00005-of-00005.gguf,
// as the large models on Hugging Face are published): opening the first shard opens the others
// beside it and joins their tensor tables; the metadata is the first shard's. Each shard is
// parsed with the same checks; a missing or foreign shard, a tensor in two shards or a count
// that differs from split.tensors.count is an error naming the file.
//
// Ownership: GgufFile owns its bytes (a mapping or a buffer, one per shard); tensor data
// pointers stay valid while it lives (moving it keeps them valid). Read-only after
// construction: safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/gguf/gguf_value.h"
#include "quant/ggml_type.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace tlr {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;

// Limits the reader enforces (beyond "it must fit in the file").
struct GgufLimits {
  uint64_t max_kv = 1u << 20;
  uint64_t max_tensors = 1u << 20;
  uint64_t max_key_length = 65535;       // the spec's limit
  uint64_t max_string_length = 1u << 28;  // 256 MiB
  uint64_t max_name_length = 256;
  uint64_t max_array_items = 1u << 28;
  int max_array_depth = 8;
  int64_t max_dim = int64_t{1} << 40;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;    // ggml order: dims[0] is the row length (fastest varying)
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t offset = 0;          // relative to the start of the data section
  uint64_t file_offset = 0;     // absolute offset in the file (its shard's, when split)
  uint32_t shard = 0;           // which file of a split model holds it (0: the first)
  const uint8_t* data = nullptr;  // n_bytes bytes, owned by the GgufFile
  std::string ShapeString() const;  // "[896, 151936]"
};

class GgufFile {
 public:
  GgufFile() = default;
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  // Maps and parses a file, and the other shards of a split model when it is the first one.
  // The path is named in errors. `huge`: see MappedFile::Open.
  static Expected<GgufFile> Open(const std::string& path, const GgufLimits& limits = {}, bool huge = false);
  // This file alone, even when it is a shard of a split model (for inspecting one shard).
  static Expected<GgufFile> OpenOneFile(const std::string& path, const GgufLimits& limits = {}, bool huge = false);
  // Parses bytes held in memory (copied into the object). For tests, fuzzing and streams.
  static Expected<GgufFile> FromBytes(std::span<const uint8_t> bytes,
                                      const GgufLimits& limits = {});

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }  // the first shard's, when split
  // The tensor data's bytes in every shard (from each data section to its file's end).
  uint64_t data_bytes() const { return data_bytes_; }
  // Every shard's path, the first included, for a split model; empty otherwise.
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* Find(std::string_view key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // See MappedFile::ReleaseResident (a no-op for a file parsed from memory).
  void ReleaseResident() const {
    if (map_) map_->ReleaseResident();
    for (const auto& m : shard_maps_) m->ReleaseResident();
  }
  // The same for the header, metadata and tensor table only (the bytes before the data).
  void ReleaseHeader() const {
    if (map_) map_->ReleaseResident(0, data_offset_);
  }

  // Typed getters. Each fails with a message naming the key when it is missing or has an
  // incompatible type. Integer getters accept any integer type whose value fits.
  Expected<std::string> GetString(std::string_view key) const;
  Expected<uint64_t> GetUint(std::string_view key) const;
  Expected<int64_t> GetInt(std::string_view key) const;
  Expected<double> GetFloat(std::string_view key) const;
  Expected<bool> GetBool(std::string_view key) const;
  Expected<const GgufArray*> GetArray(std::string_view key, GgufType elem_type) const;

 private:
  friend class GgufParser;
  Status OpenShards(const std::string& path, const GgufLimits& limits, bool huge);
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::span<const uint8_t> bytes_;
  uint64_t data_bytes_ = 0;
  std::shared_ptr<MappedFile> map_;               // owner when opened from a path
  std::vector<std::shared_ptr<MappedFile>> shard_maps_;  // a split model's other shards
  std::vector<std::string> shard_paths_;
  std::shared_ptr<std::vector<uint8_t>> buffer_;  // owner when parsed from memory
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace tlr
