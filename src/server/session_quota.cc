// SessionQuota: per-client counts of open sessions (server layer). See session_quota.h.
#include "server/session_quota.h"

#include <vector>

namespace tlr {

namespace {
// Every this many creations, every client's list is checked against the engine, so clients that
// never come back do not keep the ids of sessions that expired long ago.
constexpr uint64_t kSweepEvery = 4096;
}  // namespace

void SessionQuota::PruneLocked(Client* c, const AliveFn& alive) {
  for (auto it = c->sessions.begin(); it != c->sessions.end();) {
    if (alive(*it)) {
      ++it;
    } else {
      owner_.erase(*it);
      it = c->sessions.erase(it);
    }
  }
}

bool SessionQuota::Reserve(const std::string& client, const AliveFn& alive) {
  std::lock_guard<std::mutex> l(mu_);
  Client& c = clients_[client];
  if (static_cast<int64_t>(c.sessions.size()) + c.pending >= per_client_) PruneLocked(&c, alive);
  if (static_cast<int64_t>(c.sessions.size()) + c.pending >= per_client_) return false;
  ++c.pending;
  last_alive_ = alive;
  return true;
}

void SessionQuota::Commit(const std::string& client, const std::string& session) {
  std::lock_guard<std::mutex> l(mu_);
  Client& c = clients_[client];
  if (c.pending > 0) --c.pending;
  c.sessions.insert(session);
  owner_[session] = client;
  if (++commits_ % kSweepEvery == 0 && last_alive_) {
    for (auto it = clients_.begin(); it != clients_.end();) {
      PruneLocked(&it->second, last_alive_);
      it = it->second.sessions.empty() && it->second.pending == 0 ? clients_.erase(it) : std::next(it);
    }
  }
}

void SessionQuota::Cancel(const std::string& client) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = clients_.find(client);
  if (it != clients_.end() && it->second.pending > 0) --it->second.pending;
}

void SessionQuota::Remove(const std::string& session) {
  std::lock_guard<std::mutex> l(mu_);
  auto o = owner_.find(session);
  if (o == owner_.end()) return;
  auto c = clients_.find(o->second);
  if (c != clients_.end()) c->second.sessions.erase(session);
  owner_.erase(o);
}

}  // namespace tlr
