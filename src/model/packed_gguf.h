// The packed GGUF (model layer): one file holding a model with its weights already in the
// kernels' layout, the single-file alternative to a GGUF plus its weight cache
// (weight_cache.h), for devices short of storage: the app ships or downloads this file alone.
//
// `tlr convert` writes it from a GGUF: the same metadata, tensors, types and shapes in the same
// order, each matrix that has a panel layout (RepackMatrix) stored repacked (same byte count),
// every tensor on a 4 KiB boundary. Marked so that no other reader takes the panels for GGUF
// blocks, and checkable like the cache:
//   general.architecture        "tlr-packed" (llama.cpp and other runtimes refuse it:
//                               unknown architecture); the model's own <arch>.* keys stay
//   tlr.packed.format           1
//   tlr.packed.architecture     the model's architecture (qwen2, llama, qwen3, gemma3)
//   tlr.packed.layout_version   kRepackLayoutVersion when converted. The panel layout is the
//                               same on every SIMD target: a file converted on x86 maps on ARM
//   tlr.packed.simd_target      where it was converted (for people reading `tlr info`)
//   tlr.packed.fingerprint      the source model's fingerprint, as a hex string (routers and
//                               servers identify a model by it: a packed SLM keeps its routers)
//   tlr.packed.structure        a hash of every other metadata value (these keys included) and
//                               of the tensor table (PackedStructureHash)
//   tlr.packed.tensors          the names of the repacked tensors
//   tlr.packed.checksums        per tensor, in file order, the WeightChecksum of its bytes
//   tlr.packed.source_alignment the source's general.alignment, when it had one
// Model::Load recognises the file, checks the format, layout version, structure hash and every
// checksum, and maps the weights straight from it (at a 2 MiB-aligned address, advised for huge
// pages, as the cache): no repacking and no cache file. A file that fails a check is refused
// with the reason; there is no source to rebuild from. `tlr convert --unpack` writes the plain
// GGUF back: the same metadata and tensor bytes (the same file, for a GGUF written with its
// tensors in table order, as llama.cpp's tools and TLR write them).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/gguf/gguf_reader.h"
#include "util/status.h"

namespace tlr {

inline constexpr const char* kPackedArch = "tlr-packed";
inline constexpr uint32_t kPackedFormat = 1;
inline constexpr uint64_t kPackedAlignment = 4096;

// What a packed file's tlr.packed.* keys say.
struct PackedInfo {
  std::string arch, simd_target;
  uint32_t layout_version = 0;
  uint64_t fingerprint = 0, structure = 0;
  std::set<std::string> tensors;    // repacked
  std::vector<uint64_t> checksums;  // per tensor, file order
  std::optional<GgufValue> source_alignment;
};

// Whether the file at `path` starts like a packed model (its first metadata key, where writers put
// it, is general.architecture = "tlr-packed"): a cheap look at a few bytes before mapping it.
bool LooksPacked(const std::string& path);

// The packed keys of `f`: nothing for a plain GGUF; an error naming the key for a file marked
// packed whose keys are missing, mistyped or inconsistent with its tensor table.
Expected<std::optional<PackedInfo>> ReadPackedInfo(const GgufFile& f);

// What tlr.packed.structure holds: a hash of the metadata as written (all but tlr.packed.structure
// and tlr.packed.checksums; the vocabulary's tokens, types and merges through the tokenizer's
// fingerprint, which loading computes anyway) and of the tensor table (names, types, shapes).
uint64_t PackedStructureHash(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                             const std::vector<GgufTensorInfo>& tensors, uint64_t tokenizer_fingerprint);

// The model architecture a file declares: tlr.packed.architecture for a packed file, else
// general.architecture.
Expected<std::string> ModelArchitecture(const GgufFile& f);

// Checks every tensor's bytes against the recorded checksums; the error names the first
// tensor that differs.
Status VerifyPackedTensors(const GgufFile& f, const PackedInfo& info);

// Writes `in` (a plain GGUF model TLR can load) as a packed GGUF at `out`, atomically.
// `progress(done, total)` per tensor written (optional).
Status WritePackedGguf(const std::string& in, const std::string& out,
                       const std::function<void(size_t, size_t)>& progress = nullptr);
// Writes a packed GGUF back as the plain GGUF it was made from (metadata and tensors as they
// were), atomically.
Status WriteUnpackedGguf(const std::string& in, const std::string& out,
                         const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace tlr
