// The weight cache (model layer): the matrices in the kernels' layout (RepackMatrix's panels, and
// the float matrices) kept in a file beside the model, so that a model opened before is mapped
// straight into that layout: no repacking at start, and the weights sit in clean file-backed
// pages (which a mobile OS can drop and read again) instead of anonymous memory.
//
// File "<model>.tlrw" beside the GGUF (or, when that directory is not writable, in
// $XDG_CACHE_HOME/tlr or ~/.cache/tlr, named by the model's fingerprint):
//   [header: magic "TLRW", format version, the source's identity (see WeightCacheKey), entry
//    count, table bytes] [table: per matrix its name, offset, bytes, repacked flag and a 64-bit
//    checksum of its bytes] [the matrices (WeightCacheLayout): those of 2 MiB or more at 2 MiB
//    boundaries, the smaller ones in the gaps between, so the file has no empty stretches that
//    readahead would bring into memory; mapped at a 2 MiB-aligned address and advised for huge
//    pages, the kernel can back them with large page-cache folios, and decode runs as fast as
//    from anonymous huge pages]
// A cache is used only when everything matches: the format, the key (the GGUF's size,
// modification time and fingerprint, TLR's layout version and SIMD target), every matrix's
// name, size and layout, the file's length, and every checksum (so a truncated, bit-flipped,
// foreign or older cache is never read: it is rebuilt, and the reason is said). Written
// atomically (a temporary file renamed into place).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "util/mapped_file.h"
#include "util/status.h"

namespace tlr {

// What a cache was made from; any difference means rebuild.
struct WeightCacheKey {
  uint64_t source_size = 0;
  int64_t source_mtime_ns = 0;
  uint64_t fingerprint = 0;
  uint32_t layout_version = 0;  // bumped when RepackMatrix's layout changes
  std::string simd_target;      // the panel layout may differ between targets
};

struct WeightCacheMatrix {
  std::string name;
  std::span<const uint8_t> bytes;  // in the kernels' layout
  bool repacked = false;
};

class WeightCache {
 public:
  // The cache file for a model: beside it when its directory is writable, else in the user's
  // cache directory. `dir` (may be empty) overrides both.
  static std::string PathFor(const std::string& model_path, uint64_t fingerprint, const std::string& dir = "");
  // The key of a model file (its size and modification time) plus the given parts. A split
  // model's key covers every shard (`shards`, the first included): their sizes summed, and a
  // hash of each one's size and modification time in place of the time.
  static Expected<WeightCacheKey> KeyFor(const std::string& model_path, uint64_t fingerprint, uint32_t layout_version,
                                         const std::string& simd_target, const std::vector<std::string>& shards = {});

  // Writes a cache (atomically).
  static Status Write(const std::string& path, const WeightCacheKey& key, const std::vector<WeightCacheMatrix>& matrices);
  // Maps and checks a cache against the key and the matrices the model needs (name and byte
  // count, in any order). The error says why it cannot be used. `checksums` false skips reading
  // every byte (for a cache this process has just written from the bytes it checksummed).
  static Expected<WeightCache> Open(const std::string& path, const WeightCacheKey& key,
                                    const std::map<std::string, uint64_t>& need, bool checksums = true);

  // A matrix's bytes in the mapping, and whether they are repacked.
  const uint8_t* Data(const std::string& name, bool* repacked) const;
  uint64_t bytes() const;  // the matrices' bytes

 private:
  struct Entry {
    uint64_t offset = 0, bytes = 0;
    bool repacked = false;
  };
  MappedFile map_;
  std::map<std::string, Entry> entries_;
};

// A fast 64-bit checksum (not cryptographic): four interleaved multiply-rotate lanes over
// 8-byte words.
uint64_t WeightChecksum(std::span<const uint8_t> bytes);

// Where Write puts matrices of these sizes after `start` header bytes: those of 2 MiB or more
// at 2 MiB boundaries in order, the smaller ones in the gaps before those boundaries (largest
// first) or after the last; every offset a multiple of 4 KiB, no two overlapping.
std::vector<uint64_t> WeightCacheLayout(const std::vector<uint64_t>& sizes, uint64_t start);

}  // namespace tlr
