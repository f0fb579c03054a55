// SessionStore (server layer, part of LlmEngine): who holds which KV cache. The engine's
// sessions by id, the prompt-cache slots of the OpenAI endpoints and the temporary caches of
// calls that found every slot busy; the KV budget over all of them (least-recently-used
// eviction of idle caches) and the idle TTL. It computes nothing: the batch scheduler
// (batch_scheduler.h) runs the forward passes that fill the caches.
//
// Threads: every method is safe to call from any thread. The store's own mutex guards the
// maps; each EngineSession's `mu` is held by the one call using it, and the store only
// touches another session's cache, tokens or last_used while holding that session's `mu`
// (taken with try_lock: a session in use is never waited for, never evicted).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "server/llm_engine.h"

namespace tlr {

// One KV cache and what it holds: a session of the native protocol, a prompt-cache slot or a
// temporary cache. Fields other than `id` and `high_water` are guarded by `mu`.
struct EngineSession {
  using Clock = std::chrono::steady_clock;
  std::string id;
  std::mutex mu;                       // held by the call using the session
  std::unique_ptr<KvCache> cache;      // null until used or after eviction
  std::vector<int32_t> tokens;         // what the cache holds
  std::atomic<int64_t> high_water{0};  // positions written or reserved (MakeRoom) since (re)creation
  Clock::time_point last_used = Clock::now();
  // The client whose conversation this is (its API key, else its address): a prefix is shared
  // only between caches of one client, so no client learns from a reply's `prefilled` what
  // another sent. A session's is fixed at creation; a slot's is its last call's (under `mu`).
  std::string owner;
  int64_t version = 0;                 // counts the calls that changed what the session holds
  std::deque<std::pair<std::string, EngineReply>> recent;  // request_id -> reply
  SessionWork work;  // written by the scheduler's worker while the calling handler holds `mu`
};

class SessionStore {
 public:
  // `metrics` may be null; it counts evictions and expiries (the engine declares them).
  SessionStore(const EngineLimits& limits, uint64_t bytes_per_token, Metrics* metrics);

  // A new session of `owner`, or null when the store holds limits.max_sessions already.
  std::shared_ptr<EngineSession> Create(const std::string& owner = "");
  // A session by id; with `owner` not empty, only one of that owner's (another's is unknown to
  // it: with API keys a session answers to its own key alone).
  std::shared_ptr<EngineSession> Find(const std::string& id, const std::string& owner = "") const;
  bool Delete(const std::string& id, const std::string& owner = "");

  // A prompt-cache slot for `prompt` of `owner`'s, returned locked in *lock (the order of
  // preference is in session_store.cc): the length of the prefix it can reuse is *common (0 for
  // another owner's slot, which is then emptied). A new slot may start from the prefix of
  // another cache of the same owner: then *fork_from is that cache, locked in *fork_lock, and
  // the caller copies its first *common positions. When every slot is busy and no new one may
  // be made, a temporary cache (counted in the budget until ReleaseTemporary) and *common 0.
  // Slots are bounded by limits.prompt_cache_slots (0: by max_sessions) and, in memory, by the
  // KV budget.
  std::shared_ptr<EngineSession> AcquireSlot(std::span<const int32_t> prompt, const std::string& owner,
                                             std::unique_lock<std::mutex>* lock,
                                             size_t* common, bool* temporary, std::shared_ptr<EngineSession>* fork_from,
                                             std::unique_lock<std::mutex>* fork_lock);
  void ReleaseTemporary(const std::shared_ptr<EngineSession>& s);
  // A cache for one call (scoring), counted in the budget until ReleaseTemporary; returned
  // locked in *lock.
  std::shared_ptr<EngineSession> NewTemporary(std::unique_lock<std::mutex>* lock);

  // For a native session (`self`, locked by the caller) about to prefill `context`: the idle
  // session or prompt-cache slot of the same owner whose cache begins with the longest prefix of
  // it, at least `min_common` tokens long; returned locked in *lock, that length in *common. Null
  // when none (or when limits.share_prefixes is off).
  std::shared_ptr<EngineSession> FindSharedPrefix(const EngineSession* self, std::span<const int32_t> context,
                                                  size_t min_common, std::unique_lock<std::mutex>* lock,
                                                  size_t* common);

  // Evicts idle caches (least recently used first) until `self` (locked by the caller) can
  // grow to need_positions within the KV budget; never `pinned` (another session the caller
  // holds locked, e.g. the one it copies a prefix from). False, with the reason, when it
  // cannot. On success the room is reserved: self->high_water is raised to need_positions.
  bool MakeRoom(EngineSession* self, int64_t need_positions, std::string* why, const EngineSession* pinned = nullptr);
  // Drops a locked session's cache (it stays; its next call gets a conflict).
  static void EvictCache(EngineSession* s);
  // Deletes sessions idle past the TTL; returns how many.
  size_t SweepExpired();

  int64_t count() const;
  uint64_t kv_bytes() const;

 private:
  uint64_t KvBytesLocked() const;  // kv_bytes() with mu_ held
  // How many first tokens of `context` the idle cache `s` of `owner` holds, when at least `at_least` (>= 1):
  // then s is left locked in *best_lock (what that held is unlocked). 0, s unlocked, otherwise.
  static size_t CommonPrefix(EngineSession& s, std::span<const int32_t> context, size_t at_least,
                             const std::string& owner, std::unique_lock<std::mutex>* best_lock);

  const EngineLimits limits_;
  const uint64_t bytes_per_token_;
  Metrics* metrics_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<EngineSession>> sessions_;
  std::vector<std::shared_ptr<EngineSession>> slots_;   // prompt cache
  std::vector<std::shared_ptr<EngineSession>> temps_;   // caches of calls that found every slot busy
};

}  // namespace tlr
