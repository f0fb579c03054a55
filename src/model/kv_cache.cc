// KvCache (model layer). See kv_cache.h.
#include "model/kv_cache.h"

#include <fstream>
#include <new>
#include <sstream>

namespace tlr {

uint64_t AvailableMemoryBytes() {
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

Expected<KvCache> KvCache::Create(const ModelConfig& c, int64_t n_ctx) {
  if (n_ctx < 1 || n_ctx > (int64_t{1} << 24)) {
    return Status::Error("context size " + std::to_string(n_ctx) + " is outside 1..16777216");
  }
  KvCache kv;
  kv.n_ctx_ = n_ctx;
  kv.kv_dim_ = c.kv_dim();
  kv.k_.resize(c.n_layers);
  kv.v_.resize(c.n_layers);
  const uint64_t need = kv.capacity_bytes();
  const uint64_t avail = AvailableMemoryBytes();
  if (avail > 0 && need > avail) {
    return Status::Error("a KV cache for " + std::to_string(n_ctx) + " positions needs " +
                         std::to_string(need >> 20) + " MiB but only " +
                         std::to_string(avail >> 20) + " MiB of memory is available; use a " +
                         "smaller context (--ctx)");
  }
  try {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      kv.k_[l].reserve(static_cast<size_t>(n_ctx * kv.kv_dim_));
      kv.v_[l].reserve(static_cast<size_t>(n_ctx * kv.kv_dim_));
    }
  } catch (const std::bad_alloc&) {
    return Status::Error("cannot reserve " + std::to_string(need >> 20) + " MiB for the KV cache");
  }
  return kv;
}

uint64_t KvCache::capacity_bytes() const {
  return 2ull * k_.size() * static_cast<uint64_t>(n_ctx_) * kv_dim_ * sizeof(float);
}

void KvCache::Truncate(int64_t n) {
  if (n < 0) n = 0;
  if (n < n_) n_ = n;
}

KvCache KvCache::Fork(int64_t n) const {
  KvCache out;
  out.n_ctx_ = n_ctx_;
  out.kv_dim_ = kv_dim_;
  out.n_ = std::min(n, n_);
  out.k_.resize(k_.size());
  out.v_.resize(v_.size());
  const size_t used = static_cast<size_t>(out.n_ * kv_dim_);
  for (size_t l = 0; l < k_.size(); ++l) {
    out.k_[l].reserve(static_cast<size_t>(n_ctx_ * kv_dim_));
    out.v_[l].reserve(static_cast<size_t>(n_ctx_ * kv_dim_));
    out.k_[l].assign(k_[l].begin(), k_[l].begin() + used);
    out.v_[l].assign(v_[l].begin(), v_[l].begin() + used);
  }
  return out;
}

Status KvCache::Reserve(int64_t new_size) {
  if (new_size > n_ctx_) {
    return Status::Error("sequence of " + std::to_string(new_size) +
                         " tokens does not fit the context of " + std::to_string(n_ctx_));
  }
  const size_t need = static_cast<size_t>(new_size * kv_dim_);
  for (size_t l = 0; l < k_.size(); ++l) {
    if (k_[l].size() < need) {  // within the reserved capacity: no reallocation
      k_[l].resize(need);
      v_[l].resize(need);
    }
  }
  return Status::Ok();
}

}  // namespace tlr
