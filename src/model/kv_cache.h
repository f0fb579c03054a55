// KvCache (model layer): the keys and values of one sequence, per layer, for positions
// 0..size()-1, bounded by n_ctx. Append happens in the forward pass; Truncate rolls back
// (e.g. when a routed token replaces a drafted one); Fork copies a prefix for a new branch.
//
// Storage type: f16 by default (half the memory traffic of f32 at long contexts, ~5e-4
// relative rounding of each stored value), f32 (exact), or q8_0 (a quarter of f32: int8 with
// one f16 scale per 32 values of a head; needs head_dim % 32 == 0). Rows are converted once,
// when a position is stored; attention reads them in this type (ops/nn.h, KvView).
//
// Layout, per layer: K then V, each [n_kv_heads][capacity][row] with row = head_dim values of
// the type (KvRowBytes) and capacity = n_ctx rounded up to whole key tiles: one head's
// positions are contiguous, which is what attention streams. Keys are stored in transposed
// tiles of 16 positions, values as rows (KvView in ops/nn.h).
//
// Memory: capacity for n_ctx positions is allocated up front but not touched (address space
// only); pages are touched as positions are written (and key tiles zeroed when first
// reserved). KvMemory picks the pages:
//   kHugePages (default): 2 MiB pages where the OS gives them (Linux transparent huge pages
//     on request, madvise). Attention streams the whole cache every decode step; in 4 KiB
//     pages every page costs a TLB miss and stops the hardware prefetcher. attention_bench at
//     2000 positions (qwen2.5-0.5b shape, 2 threads, from memory, alternated steps, Zen 4):
//     f16 1.88 -> 1.62 ms per token, q8_0 1.32 -> 1.17. The cost: one huge page holds
//     several heads' positions when a head's capacity is under 2 MiB, so storing the first
//     position makes up to the whole capacity resident (as llama.cpp's cache always is).
//   kOnDemand: 4 KiB pages, resident as positions are written; for many caches under a
//     memory budget that counts positions in use (the server's sessions).
// Copying copies the positions in use. Not thread-safe: one sequence belongs to one caller at
// a time, except that Store may be called concurrently for distinct positions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "ops/nn.h"
#include "quant/ggml_type.h"
#include "util/huge_pages.h"
#include "util/status.h"

namespace tlr {

// How a KvCache's memory is paged (see above).
enum class KvMemory { kHugePages, kOnDemand };

class KvCache {
 public:
  KvCache() = default;
  KvCache(const KvCache& other);
  KvCache& operator=(const KvCache& other);
  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;

  // Fails with a clear message when n_ctx is out of range, the type does not suit the model
  // (CheckKvType), or the cache would not fit in the memory this machine has available.
  static Expected<KvCache> Create(const ModelConfig& config, int64_t n_ctx, GgmlType type = GgmlType::kF16,
                                  KvMemory memory = KvMemory::kHugePages);
  // Bytes one position takes in every layer (keys and values) when stored as `type`.
  static uint64_t BytesPerPosition(const ModelConfig& config, GgmlType type);

  GgmlType type() const { return type_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t size() const { return n_; }
  int64_t n_layers() const { return n_layers_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t kv_dim() const { return n_kv_heads_ * head_dim_; }
  KvMemory memory() const { return memory_; }
  // Bytes the cache would take when full.
  uint64_t capacity_bytes() const { return static_cast<uint64_t>(n_layers_) * layer_bytes(); }

  // Drops positions >= n (no-op when n >= size()).
  void Truncate(int64_t n);
  // A new cache holding the first n positions (n <= size()), same n_ctx and type.
  KvCache Fork(int64_t n) const;
  // The same with room for n_ctx positions (at least n): a cache outgrown by its sequence
  // moves into a larger one without recomputing what it holds.
  KvCache Fork(int64_t n, int64_t n_ctx) const;

  // The stored rows of positions [0, size()) as bytes, layer by layer, head by head, keys then
  // values (what a saved context holds), and the reverse: an empty cache of the same shape
  // filled with n positions from such bytes. Fails (changing nothing) on a cache that is not
  // empty, too small, or bytes of the wrong length.
  std::vector<uint8_t> Rows() const;
  Status RestoreRows(int64_t n, std::span<const uint8_t> rows);

  // Makes room for positions [size(), new_size) (zeroing key tiles never used before); fails
  // past n_ctx. Called by the forward pass, which then stores them and calls Commit.
  Status Reserve(int64_t new_size);
  void Commit(int64_t new_size) { n_ = new_size; }
  // Stores position `pos` of `layer`: k and v are kv_dim floats each (heads consecutive),
  // converted to type(). pos reserved; distinct positions may be stored concurrently.
  void Store(int64_t layer, int64_t pos, const float* k, const float* v);
  // The stored keys / values of one KV head of a layer, for attention.
  KvView K(int64_t layer, int64_t kv_head) const { return {type_, Base(layer, 0, kv_head), row_bytes_}; }
  KvView V(int64_t layer, int64_t kv_head) const { return {type_, Base(layer, 1, kv_head), row_bytes_}; }

 private:
  // Positions rounded up to whole key tiles.
  static int64_t RoundToTiles(int64_t n) { return (n + kKeyTile - 1) / kKeyTile * kKeyTile; }
  // Bytes of one layer's K or V for one head, and of a whole layer.
  size_t head_bytes() const { return static_cast<size_t>(RoundToTiles(n_ctx_)) * row_bytes_; }
  size_t layer_bytes() const { return 2 * static_cast<size_t>(n_kv_heads_) * head_bytes(); }
  uint8_t* Base(int64_t layer, int which, int64_t kv_head) const {
    return data_.get() + layer * layer_bytes() + (which * n_kv_heads_ + kv_head) * head_bytes();
  }
  // A cache of the same shape, with storage, holding nothing yet.
  KvCache EmptyLike() const { return EmptyLike(n_ctx_); }
  KvCache EmptyLike(int64_t n_ctx) const;
  // Copies positions [0, n) of every layer and head from `src` (same shape): whole key tiles.
  void CopyPrefix(const KvCache& src, int64_t n);

  // Storage of `bytes`, uninitialised: in huge pages when memory is kHugePages and it spans
  // at least one. Throws std::bad_alloc.
  static PageBuffer Allocate(uint64_t bytes, KvMemory memory);

  GgmlType type_ = GgmlType::kF16;
  KvMemory memory_ = KvMemory::kHugePages;
  int64_t n_ctx_ = 0, n_ = 0, n_layers_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  int64_t tiles_ready_ = 0;  // positions whose key tiles have been zeroed (whole tiles)
  size_t row_bytes_ = 0;
  PageBuffer data_;  // [n_layers][K, V][n_kv_heads][capacity][row_bytes]
};

// Bytes of physical memory available now (MemAvailable), or 0 if unknown.
uint64_t AvailableMemoryBytes();

}  // namespace tlr
