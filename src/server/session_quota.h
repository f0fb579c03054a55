// SessionQuota (server layer, internal to LlmServer): how many sessions one client may hold open,
// so that one client creating sessions as fast as it can takes a share of --max-sessions, not all
// of it (before, 1024 creations in 0.2 s left every device falling back for the 600 s idle TTL).
// A client is an API key when the server has keys, else a client address. Sessions that ended
// without a DELETE (TTL expiry) are noticed by asking the engine when a client reaches its quota.
//
// Thread-safe. `alive` is called with the quota's lock held (it may take the engine's locks; the
// engine never calls back into the quota).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace tlr {

class SessionQuota {
 public:
  using AliveFn = std::function<bool(const std::string& session)>;
  explicit SessionQuota(int64_t per_client) : per_client_(per_client) {}

  // Reserves a slot for `client`: false when it already holds per_client open sessions.
  // Every true must be followed by Commit (the session was created) or Cancel.
  bool Reserve(const std::string& client, const AliveFn& alive);
  void Commit(const std::string& client, const std::string& session);
  void Cancel(const std::string& client);
  // The session was deleted.
  void Remove(const std::string& session);

  int64_t per_client() const { return per_client_; }

 private:
  struct Client {
    std::unordered_set<std::string> sessions;
    int64_t pending = 0;  // reserved, not yet committed
  };
  void PruneLocked(Client* c, const AliveFn& alive);

  const int64_t per_client_;
  std::mutex mu_;
  std::unordered_map<std::string, Client> clients_;
  std::unordered_map<std::string, std::string> owner_;  // session -> client
  uint64_t commits_ = 0;
  AliveFn last_alive_;  // for the periodic sweep of every client
};

}  // namespace tlr
