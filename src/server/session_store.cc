// SessionStore: sessions, prompt-cache slots, the KV budget and the TTL (see session_store.h).
#include "server/session_store.h"

#include <algorithm>
#include <random>

#include "net/protocol.h"

namespace tlr {

namespace {

std::string NewSessionId() {
  static std::mutex mu;
  static std::random_device rd;
  std::lock_guard<std::mutex> l(mu);
  const uint64_t a = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  const uint64_t b = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return "s-" + HashHex(a) + HashHex(b);
}

}  // namespace

size_t SessionStore::CommonPrefix(EngineSession& s, std::span<const int32_t> context, size_t at_least,
                                  const std::string& owner, std::unique_lock<std::mutex>* best_lock) {
  // Cheap checks first: most caches part from a context at its first tokens.
  at_least = std::max<size_t>(at_least, 1);
  std::unique_lock<std::mutex> sl(s.mu, std::try_to_lock);
  if (!sl.owns_lock() || s.owner != owner || !s.cache || s.tokens.size() < at_least || context.size() < at_least) {
    return 0;
  }
  if (s.tokens[at_least - 1] != context[at_least - 1]) return 0;
  const size_t most = std::min(s.tokens.size(), context.size());
  size_t c = 0;
  while (c < most && s.tokens[c] == context[c]) ++c;
  if (c < at_least) return 0;
  *best_lock = std::move(sl);  // the previous best (if any) is unlocked
  return c;
}

std::shared_ptr<EngineSession> SessionStore::FindSharedPrefix(const EngineSession* self,
                                                              std::span<const int32_t> context, size_t min_common,
                                                              std::unique_lock<std::mutex>* lock, size_t* common) {
  *common = 0;
  if (!limits_.share_prefixes || min_common == 0) return nullptr;
  std::shared_ptr<EngineSession> best;
  std::lock_guard<std::mutex> l(mu_);
  auto consider = [&](const std::shared_ptr<EngineSession>& s) {
    if (s.get() == self) return;  // locked by the caller: never try_lock it again
    const size_t c = CommonPrefix(*s, context, std::max(min_common, *common + 1), self->owner, lock);
    if (c > 0) {
      best = s;
      *common = c;
    }
  };
  for (const auto& [id, s] : sessions_) consider(s);
  for (const auto& s : slots_) consider(s);
  return best;
}

SessionStore::SessionStore(const EngineLimits& limits, uint64_t bytes_per_token, Metrics* metrics)
    : limits_(limits), bytes_per_token_(bytes_per_token), metrics_(metrics) {
  // Prompt-cache slots are made as clients need them (AcquireSlot).
}

int64_t SessionStore::count() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int64_t>(sessions_.size());
}

uint64_t SessionStore::kv_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return KvBytesLocked();
}

uint64_t SessionStore::KvBytesLocked() const {
  uint64_t n = 0;
  for (const auto& [id, s] : sessions_) n += s->high_water.load();
  for (const auto& s : slots_) n += s->high_water.load();
  for (const auto& s : temps_) n += s->high_water.load();
  return n * bytes_per_token_;
}

std::shared_ptr<EngineSession> SessionStore::Create(const std::string& owner) {
  auto s = std::make_shared<EngineSession>();
  s->id = NewSessionId();
  s->owner = owner;
  std::lock_guard<std::mutex> l(mu_);
  if (static_cast<int64_t>(sessions_.size()) >= limits_.max_sessions) return nullptr;
  sessions_[s->id] = s;
  return s;
}

// A session's owner is set before it enters the map and never changes (slots are not in it).
std::shared_ptr<EngineSession> SessionStore::Find(const std::string& id, const std::string& owner) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || (!owner.empty() && it->second->owner != owner)) return nullptr;
  return it->second;
}

bool SessionStore::Delete(const std::string& id, const std::string& owner) {
  std::shared_ptr<EngineSession> s;  // freed after the store's lock
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || (!owner.empty() && it->second->owner != owner)) return false;
  // A call in flight keeps its shared_ptr; the memory goes when it finishes.
  s = std::move(it->second);
  sessions_.erase(it);
  return true;
}

std::shared_ptr<EngineSession> SessionStore::AcquireSlot(std::span<const int32_t> prompt, const std::string& owner,
                                                         std::unique_lock<std::mutex>* lock, size_t* common,
                                                         bool* temporary, std::shared_ptr<EngineSession>* fork_from,
                                                         std::unique_lock<std::mutex>* fork_lock) {
  // In order of preference, among the slots no call is using:
  //   1. the one whose whole content begins the prompt (longest first): a client resending its
  //      growing context finds its own slot, and nobody else's is cut;
  //   2. an empty one (new, or evicted by the KV budget);
  //   3. a new one, while the slot limit allows (0: only the KV budget and max_sessions bound
  //      them; MakeRoom evicts the least recently used when memory runs short), starting from
  //      a copy of the prefix it shares with another slot (*fork_from: a client regenerating,
  //      or another conversation with the same system prompt, costs a copy, not a prefill);
  //   4. the one sharing the longest prefix (ties: least recently used), which is cut there.
  // Only a slot of the same owner counts as sharing anything; another owner's is emptied when it
  // is taken (4., as sharing nothing) and is no source of a copy.
  std::shared_ptr<EngineSession> own, empty, shared;
  std::unique_lock<std::mutex> own_lock, empty_lock, shared_lock;
  size_t own_common = 0, shared_common = 0;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& s : slots_) {
    std::unique_lock<std::mutex> sl(s->mu, std::try_to_lock);
    if (!sl.owns_lock()) continue;
    size_t c = 0;
    const bool mine = s->owner == owner;
    while (mine && c < s->tokens.size() && c < prompt.size() && s->tokens[c] == prompt[c]) ++c;
    if (s->tokens.empty()) {
      if (!empty) {
        empty = s;
        empty_lock = std::move(sl);
      }
      continue;
    }
    if (mine && c == s->tokens.size() && c > own_common) {
      own = s;
      own_lock = std::move(sl);
      own_common = c;
      continue;
    }
    if (!shared || c > shared_common || (c == shared_common && s->last_used < shared->last_used)) {
      shared = s;
      shared_lock = std::move(sl);
      shared_common = c;
    }
  }
  const int64_t limit = limits_.prompt_cache_slots > 0 ? limits_.prompt_cache_slots : limits_.max_sessions;
  // A new slot (3.) may also start from a native session's prefix (the same system prompt).
  std::shared_ptr<EngineSession> session_src;
  std::unique_lock<std::mutex> session_src_lock;
  size_t session_common = 0;
  if (limits_.share_prefixes && !own && !empty && static_cast<int64_t>(slots_.size()) < limit) {
    for (const auto& [id, s] : sessions_) {
      const size_t c = CommonPrefix(*s, prompt, std::max(shared_common, session_common) + 1, owner, &session_src_lock);
      if (c > 0) {
        session_src = s;
        session_common = c;
      }
    }
  }
  *temporary = false;
  if (own) {
    *lock = std::move(own_lock);
    *common = own_common;
    return own;
  }
  if (empty) {
    *lock = std::move(empty_lock);
    *common = 0;
    return empty;
  }
  if (static_cast<int64_t>(slots_.size()) < limit) {
    auto s = std::make_shared<EngineSession>();
    s->id = "slot-" + std::to_string(slots_.size());
    // A new mutex nobody else can hold: try_lock always succeeds, and never orders it after mu_
    // (a blocking lock here would, and the session's holder later takes mu_ in MakeRoom).
    *lock = std::unique_lock<std::mutex>(s->mu, std::try_to_lock);
    slots_.push_back(s);
    *common = 0;
    if (session_src) {
      *fork_from = session_src;
      *fork_lock = std::move(session_src_lock);
      *common = session_common;
    } else if (limits_.share_prefixes && shared && shared_common > 0) {
      *fork_from = shared;
      *fork_lock = std::move(shared_lock);
      *common = shared_common;
    }
    return s;
  }
  if (shared) {
    *lock = std::move(shared_lock);
    *common = shared_common;
    return shared;
  }
  // Every slot is busy: a cache for this call only, counted in the budget while it lives.
  *temporary = true;
  auto t = std::make_shared<EngineSession>();
  *lock = std::unique_lock<std::mutex>(t->mu, std::try_to_lock);  // new: always free (see above)
  temps_.push_back(t);
  *common = 0;
  return t;
}

std::shared_ptr<EngineSession> SessionStore::NewTemporary(std::unique_lock<std::mutex>* lock) {
  std::lock_guard<std::mutex> l(mu_);
  auto t = std::make_shared<EngineSession>();
  *lock = std::unique_lock<std::mutex>(t->mu, std::try_to_lock);  // new: always free
  temps_.push_back(t);
  return t;
}

void SessionStore::ReleaseTemporary(const std::shared_ptr<EngineSession>& s) {
  std::lock_guard<std::mutex> l(mu_);
  temps_.erase(std::find(temps_.begin(), temps_.end(), s));
}

void SessionStore::EvictCache(EngineSession* s) {
  s->cache.reset();
  s->tokens.clear();
  s->high_water = 0;
}

size_t SessionStore::SweepExpired() {
  std::vector<std::shared_ptr<EngineSession>> gone;  // freed after the store's lock
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = EngineSession::Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      EngineSession* s = it->second.get();
      std::unique_lock<std::mutex> sl(s->mu, std::try_to_lock);
      if (sl.owns_lock() && std::chrono::duration<double>(now - s->last_used).count() > limits_.session_ttl_s) {
        sl.unlock();
        gone.push_back(it->second);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (metrics_ && !gone.empty()) metrics_->Add("tlr_sessions_expired_total", static_cast<double>(gone.size()));
  return gone.size();
}

bool SessionStore::MakeRoom(EngineSession* self, int64_t need_positions, std::string* why,
                            const EngineSession* pinned) {
  const int64_t grow = std::max<int64_t>(0, need_positions - self->high_water.load());
  if (grow == 0) return true;
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t want = static_cast<uint64_t>(grow) * bytes_per_token_;
  if (static_cast<uint64_t>(need_positions) * bytes_per_token_ > limits_.kv_budget_bytes) {
    *why = "the call needs more KV memory than the whole budget (--kv-budget)";
    return false;
  }
  uint64_t now = KvBytesLocked();
  while (now + want > limits_.kv_budget_bytes) {
    // Least recently used idle session or slot holding memory.
    std::vector<EngineSession*> all;
    for (const auto& [id, s] : sessions_) all.push_back(s.get());
    for (const auto& s : slots_) all.push_back(s.get());
    EngineSession* victim = nullptr;
    std::unique_lock<std::mutex> victim_lock;
    for (EngineSession* s : all) {
      if (s == self || s == pinned || s->high_water.load() == 0) continue;
      // last_used belongs to the call holding the session: read it only under the session's
      // lock (a session in use is no candidate anyway).
      std::unique_lock<std::mutex> sl(s->mu, std::try_to_lock);
      if (!sl.owns_lock()) continue;
      if (victim && s->last_used >= victim->last_used) continue;
      victim = s;
      victim_lock = std::move(sl);
    }
    if (!victim) {
      *why = "the KV budget is in use by calls in progress; retry shortly";
      return false;
    }
    EvictCache(victim);
    if (metrics_) metrics_->Add("tlr_evictions_total", 1);
    now = KvBytesLocked();
  }
  // Reserved before mu_ is let go: otherwise calls side by side each found the same free room
  // and together went past the budget (the call's own writes raise high_water only later).
  self->high_water = std::max(self->high_water.load(), need_positions);
  return true;
}

}  // namespace tlr
