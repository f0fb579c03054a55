// The two wire protocols of the remote LLM backend (device layer, internal to remote_llm.cc):
// the native session protocol of `tlr serve` and OpenAI-compatible completions. See
// remote_llm.h for what each does and docs/protocol.md for the native protocol.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "device/remote/remote_llm.h"

namespace tlr {

class TlrServerLlm : public RemoteLlm {
 public:
  TlrServerLlm(const RemoteOptions& opts, const Tokenizer& vocab);
  ~TlrServerLlm() override;

 protected:
  Status CheckServer(bool* reachable) override;
  void Prepare(LlmCall* call) override;
  Expected<LlmReply> Execute(const LlmRequest& req, LlmCall& call, CallError* err) override;

 public:
  // The server spells held-back bytes first ("prefix_bytes" in its info's features).
  bool spells_prefix() const override { return spells_prefix_.load(); }
  int64_t HeldPrefix(std::span<const int32_t> context) const override;

 private:
  std::atomic<bool> spells_prefix_{false};
  // Creates a session unless one exists with a generation other than `stale` (the one a 404
  // came from); returns the session id and its generation.
  // `call` (may be null): its cancellation stops the session's creation.
  Status EnsureSession(uint64_t stale, std::string* id, uint64_t* generation, CallError* err, LlmCall* call = nullptr);

  std::mutex session_mu_;     // held while a session is created
  mutable std::mutex mu_;     // everything below
  std::string session_;
  uint64_t session_generation_ = 0;  // increments with every new session
  std::vector<int32_t> held_;        // what the server's session holds, as far as we know
  int64_t held_version_ = -1;        // the server's session version held_ comes from
  // Calls on their way to the server: their contexts bound the base of later calls. A call
  // given up on without a reply (cancelled, timed out) may still run there (a load balancer
  // does not pass the closed connection on; the server may be running it already) and rewind
  // the session to its context: it keeps bounding bases until the server would have dropped
  // it (`until`: its deadline and a margin), else the next call's base may claim tokens the
  // session no longer holds and the device resyncs (a round trip).
  struct InFlight {
    std::vector<int32_t> context;
    HttpTransport::Clock::time_point until = HttpTransport::Clock::time_point::max();
  };
  std::map<uint64_t, InFlight> in_flight_;
  uint64_t next_call_ = 0;
  uint64_t request_seq_ = 0;
  std::string request_prefix_;
  bool reachable_ = false;
};

class OpenAiLlm : public RemoteLlm {
 public:
  OpenAiLlm(const RemoteOptions& opts, const Tokenizer& vocab);
  ~OpenAiLlm() override;

 protected:
  Status CheckServer(bool* reachable) override;
  Expected<LlmReply> Execute(const LlmRequest& req, LlmCall& call, CallError* err) override;
};

}  // namespace tlr
