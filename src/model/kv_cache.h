// KvCache (model layer): the keys and values of one sequence, per layer, for positions
// 0..size()-1, bounded by n_ctx. Append happens in the forward pass; Truncate rolls back
// (e.g. when a routed token replaces a drafted one); Fork copies a prefix for a new branch.
//
// Memory: capacity for n_ctx positions is reserved up front (address space only); pages are
// touched as positions are written, so a short conversation costs little. Not thread-safe:
// one sequence belongs to one caller at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "util/status.h"

namespace tlr {

class KvCache {
 public:
  KvCache() = default;
  // Fails with a clear message when n_ctx is out of range or the cache would not fit in the
  // memory this machine has available.
  static Expected<KvCache> Create(const ModelConfig& config, int64_t n_ctx);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t size() const { return n_; }
  int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t kv_dim() const { return kv_dim_; }
  // Bytes the cache would take when full.
  uint64_t capacity_bytes() const;

  // Drops positions >= n (no-op when n >= size()).
  void Truncate(int64_t n);
  // A new cache holding the first n positions (n <= size()), same n_ctx.
  KvCache Fork(int64_t n) const;

  // Makes room for positions [size(), new_size); fails past n_ctx. Called by the forward pass,
  // which then fills them and calls Commit.
  Status Reserve(int64_t new_size);
  void Commit(int64_t new_size) { n_ = new_size; }
  float* K(int64_t layer, int64_t pos) { return k_[layer].data() + pos * kv_dim_; }
  float* V(int64_t layer, int64_t pos) { return v_[layer].data() + pos * kv_dim_; }
  const float* K(int64_t layer, int64_t pos) const { return k_[layer].data() + pos * kv_dim_; }
  const float* V(int64_t layer, int64_t pos) const { return v_[layer].data() + pos * kv_dim_; }

 private:
  int64_t n_ctx_ = 0, n_ = 0, kv_dim_ = 0;
  std::vector<std::vector<float>> k_, v_;  // [n_layers][positions * kv_dim]
};

// Bytes of physical memory available now (MemAvailable), or 0 if unknown.
uint64_t AvailableMemoryBytes();

}  // namespace tlr
