// KvCache (model layer). See kv_cache.h.
#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

namespace tlr {

uint64_t AvailableMemoryBytes() {
#ifdef __EMSCRIPTEN__
  return 0;  // the browser build has no /proc (no file system at all): not known
#endif
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

uint64_t KvCache::BytesPerPosition(const ModelConfig& c, GgmlType type) {
  return 2ull * static_cast<uint64_t>(c.n_layers * c.n_kv_heads) * KvRowBytes(type, c.head_dim);
}

PageBuffer KvCache::Allocate(uint64_t bytes, KvMemory memory) {
  if (memory == KvMemory::kHugePages && bytes >= kHugePageBytes) return AllocateHugePages(bytes);
  return AllocateSmallPages(bytes);
}

Expected<KvCache> KvCache::Create(const ModelConfig& c, int64_t n_ctx, GgmlType type, KvMemory memory) {
  if (n_ctx < 1 || n_ctx > (int64_t{1} << 24)) {
    return Status::Error("context size " + std::to_string(n_ctx) + " is outside 1..16777216");
  }
  TLR_RETURN_IF_ERROR(CheckKvType(type, c.head_dim));
  KvCache kv;
  kv.type_ = type;
  kv.memory_ = memory;
  kv.n_ctx_ = n_ctx;
  kv.n_layers_ = c.n_layers;
  kv.n_kv_heads_ = c.n_kv_heads;
  kv.head_dim_ = c.head_dim;
  kv.row_bytes_ = KvRowBytes(type, c.head_dim);
  const uint64_t need = kv.capacity_bytes();
  const uint64_t avail = AvailableMemoryBytes();
  if (avail > 0 && need > avail) {
    return Status::Error("a KV cache for " + std::to_string(n_ctx) + " positions needs " +
                         std::to_string(need >> 20) + " MiB but only " +
                         std::to_string(avail >> 20) + " MiB of memory is available; use a " +
                         "smaller context (--ctx) or a smaller --kv-type");
  }
  try {
    // Default-initialised: the pages stay untouched until positions are stored.
    kv.data_ = Allocate(need, memory);
  } catch (const std::bad_alloc&) {
    return Status::Error("cannot allocate " + std::to_string(need >> 20) + " MiB for the KV cache");
  }
  return kv;
}

KvCache KvCache::EmptyLike(int64_t n_ctx) const {
  KvCache out;
  out.type_ = type_;
  out.memory_ = memory_;
  out.n_ctx_ = n_ctx;
  out.n_layers_ = n_layers_;
  out.n_kv_heads_ = n_kv_heads_;
  out.head_dim_ = head_dim_;
  out.row_bytes_ = row_bytes_;
  if (data_) out.data_ = Allocate(out.capacity_bytes(), memory_);
  return out;
}

void KvCache::CopyPrefix(const KvCache& src, int64_t n) {
  // Keys: the whole tiles holding [0, n) (their other positions are zeros or stale values,
  // finite either way); values: the rows.
  const size_t key_bytes = static_cast<size_t>(RoundToTiles(n)) * row_bytes_;
  const size_t value_bytes = static_cast<size_t>(n) * row_bytes_;
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (int64_t h = 0; h < n_kv_heads_; ++h) {
      std::memcpy(Base(l, 0, h), src.Base(l, 0, h), key_bytes);
      std::memcpy(Base(l, 1, h), src.Base(l, 1, h), value_bytes);
    }
  }
  n_ = n;
  tiles_ready_ = RoundToTiles(n);
}

KvCache::KvCache(const KvCache& other) : KvCache(other.EmptyLike()) { CopyPrefix(other, other.n_); }

KvCache& KvCache::operator=(const KvCache& other) {
  if (this != &other) *this = KvCache(other);
  return *this;
}

void KvCache::Truncate(int64_t n) {
  if (n < 0) n = 0;
  if (n < n_) n_ = n;
}

KvCache KvCache::Fork(int64_t n) const {
  KvCache out = EmptyLike();
  out.CopyPrefix(*this, std::clamp<int64_t>(n, 0, n_));
  return out;
}

std::vector<uint8_t> KvCache::Rows() const {
  const size_t bytes = static_cast<size_t>(n_) * row_bytes_;
  std::vector<uint8_t> out(static_cast<size_t>(n_layers_ * n_kv_heads_ * 2) * bytes);
  uint8_t* p = out.data();
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (int64_t h = 0; h < n_kv_heads_; ++h) {
      for (int which : {0, 1}) {
        std::memcpy(p, Base(l, which, h), bytes);
        p += bytes;
      }
    }
  }
  return out;
}

Status KvCache::RestoreRows(int64_t n, std::span<const uint8_t> rows) {
  if (n_ != 0) return Status::Error("internal error: restoring into a cache that is not empty");
  if (n < 0 || n > n_ctx_) {
    return Status::Error("a saved context of " + std::to_string(n) + " positions does not fit a cache of " +
                         std::to_string(n_ctx_));
  }
  const size_t bytes = static_cast<size_t>(n) * row_bytes_;
  const size_t want = static_cast<size_t>(n_layers_ * n_kv_heads_ * 2) * bytes;
  if (rows.size() != want) {
    return Status::Error("the saved KV rows have " + std::to_string(rows.size()) + " bytes, not the " +
                         std::to_string(want) + " that " + std::to_string(n) + " positions take");
  }
  TLR_RETURN_IF_ERROR(Reserve(n));  // zeroes the key tiles the rows go into
  const uint8_t* p = rows.data();
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (int64_t h = 0; h < n_kv_heads_; ++h) {
      for (int which : {0, 1}) {
        std::memcpy(Base(l, which, h), p, bytes);
        p += bytes;
      }
    }
  }
  Commit(n);
  return Status::Ok();
}

KvCache KvCache::Fork(int64_t n, int64_t n_ctx) const {
  n = std::clamp<int64_t>(n, 0, n_);
  KvCache out = EmptyLike(std::max(n_ctx, n));
  out.CopyPrefix(*this, n);
  return out;
}

Status KvCache::Reserve(int64_t new_size) {
  if (new_size > n_ctx_) {
    return Status::Error("sequence of " + std::to_string(new_size) +
                         " tokens does not fit the context of " + std::to_string(n_ctx_));
  }
  // Attention reads whole key tiles: a tile's positions past size() must hold finite numbers,
  // so each tile is zeroed before its first position is stored (here, before the forward
  // pass stores positions in parallel).
  const int64_t ready = RoundToTiles(new_size);
  if (ready > tiles_ready_) {
    const size_t off = static_cast<size_t>(tiles_ready_) * row_bytes_;
    const size_t len = static_cast<size_t>(ready - tiles_ready_) * row_bytes_;
    for (int64_t l = 0; l < n_layers_; ++l) {
      for (int64_t h = 0; h < n_kv_heads_; ++h) std::memset(Base(l, 0, h) + off, 0, len);
    }
    tiles_ready_ = ready;
  }
  return Status::Ok();
}

void KvCache::Store(int64_t layer, int64_t pos, const float* k, const float* v) {
  for (int64_t h = 0; h < n_kv_heads_; ++h) {
    StoreKey(type_, Base(layer, 0, h), row_bytes_, head_dim_, pos, k + h * head_dim_);
    StoreValue(type_, Base(layer, 1, h), row_bytes_, head_dim_, pos, v + h * head_dim_);
  }
}

}  // namespace tlr
