// The device's prompt cache (see context_pool.h).
#include "device/session/context_pool.h"

#include <algorithm>

namespace tlr {

DeviceContextPool::DeviceContextPool(const ContextPoolOptions& opts, uint64_t bytes_per_position)
    : opts_(opts), bytes_per_position_(bytes_per_position) {}

uint64_t DeviceContextPool::BytesOf(const DeviceContext& c) const {
  return static_cast<uint64_t>(c.slm.tokens.size()) * bytes_per_position_;
}

std::unique_ptr<DeviceContext> DeviceContextPool::Take(std::span<const int32_t> prompt) {
  std::lock_guard<std::mutex> l(mu_);
  size_t best = slots_.size(), best_common = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::vector<int32_t>& t = slots_[i].context->slm.tokens;
    size_t c = 0;
    while (c < t.size() && c < prompt.size() && t[c] == prompt[c]) ++c;
    if (c == 0) continue;
    if (best == slots_.size() || c > best_common ||
        (c == best_common && slots_[i].last_used > slots_[best].last_used)) {
      best = i;
      best_common = c;
    }
  }
  if (best == slots_.size()) {
    auto fresh = std::make_unique<DeviceContext>();
    fresh->slm.n_ctx = opts_.n_ctx;
    return fresh;
  }
  std::unique_ptr<DeviceContext> out = std::move(slots_[best].context);
  slots_.erase(slots_.begin() + static_cast<std::ptrdiff_t>(best));
  return out;
}

void DeviceContextPool::Give(std::unique_ptr<DeviceContext> context) {
  if (!context || !context->slm.has_cache() || context->slm.tokens.empty() || opts_.max_slots <= 0) return;
  std::vector<std::unique_ptr<DeviceContext>> dropped;  // freed after the lock
  std::lock_guard<std::mutex> l(mu_);
  slots_.push_back({std::move(context), std::chrono::steady_clock::now()});
  for (;;) {
    uint64_t bytes = 0;
    for (const Slot& s : slots_) bytes += BytesOf(*s.context);
    if (static_cast<int>(slots_.size()) <= opts_.max_slots && bytes <= opts_.budget_bytes) break;
    auto lru = std::min_element(slots_.begin(), slots_.end(),
                                [](const Slot& a, const Slot& b) { return a.last_used < b.last_used; });
    dropped.push_back(std::move(lru->context));
    slots_.erase(lru);
  }
}

void DeviceContextPool::Clear() {
  std::vector<Slot> gone;
  std::lock_guard<std::mutex> l(mu_);
  gone.swap(slots_);
}

int DeviceContextPool::slots() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(slots_.size());
}

uint64_t DeviceContextPool::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t n = 0;
  for (const Slot& s : slots_) n += BytesOf(*s.context);
  return n;
}

}  // namespace tlr
