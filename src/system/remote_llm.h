// Remote LLM backends (system layer): the decoder's LLM over the network.
//
//   tlr     the native protocol of `tlr serve` (docs/protocol.md): a session on the server
//           holds this device's KV cache; each call sends only the tokens the server has not
//           seen (base + prefix hash + append), and a 409 (server evicted or restarted, a reply
//           was lost) makes the backend resend from what the server still holds.
//   openai  any OpenAI-compatible engine (SGLang, vLLM, llama.cpp server, `tlr serve`):
//           /v1/completions with the context as token ids and max_tokens = n; the engine's
//           prefix cache keeps resending the context cheap.
//
// Robustness: keep-alive connection reuse, a timeout per attempt, retries with exponential
// backoff (a retried call keeps its request_id, so the server never appends twice). When the
// server stays unreachable, Next fails fast for a while (the decoder then uses the SLM's
// token, source FALLBACK) and probes again later; the session resyncs when it is back.
// --sim-rtt adds a simulated network delay per HTTP round trip (for evaluations).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "system/llm_backend.h"
#include "util/status.h"

namespace httplib {
class Client;
}

namespace tlr {

struct RemoteOptions {
  std::string url;               // http://host:port or https://host:port
  std::string backend = "tlr";   // tlr | openai
  std::string api_key;           // sent as a Bearer token
  std::string model;             // openai: the model name (default: the first of /v1/models)
  std::string ca_file;           // https: CA bundle to verify the server with (default: system's)
  bool verify_tls = true;
  double timeout_s = 10;         // per attempt (connect, send, receive)
  int retries = 2;               // further attempts after a failed one
  double backoff_s = 0.05;       // before the first retry; doubles
  double retry_after_s = 1.0;    // after giving up: fail fast this long, then probe again
  double sim_rtt_s = 0;          // simulated network round trip, per HTTP request
  double sim_jitter_s = 0;       // +- uniform
  uint64_t seed = 1;             // for the jitter
};

struct RemoteStats {
  int64_t calls = 0;             // Next calls
  int64_t failed_calls = 0;      // Next calls that returned an error
  int64_t http_requests = 0;
  int64_t retries = 0;
  int64_t resyncs = 0;           // 409 / unknown-session recoveries
  int64_t sessions_created = 0;
  int64_t tokens_sent = 0;       // token ids sent to the server
  double sim_delay_s = 0;        // simulated network time added
};

class RemoteLlm : public LlmBackend {
 public:
  // Connects and checks the server: its vocabulary must match `vocab` (the SLM's tokenizer;
  // the openai backend checks when the server reports it, and uses the tokenizer to read
  // replies from engines that return text only). An unreachable server is not an error here
  // (the device falls back until it appears; see warning()); a wrong URL, key or vocabulary is.
  static Expected<std::unique_ptr<RemoteLlm>> Connect(const RemoteOptions& opts, const Tokenizer& vocab);
  ~RemoteLlm() override;

  Expected<LlmReply> Next(std::span<const int32_t> context, int n, const SamplerParams& sampling) override;
  void Reset() override;
  uint64_t vocab_fingerprint() const override { return vocab_.Fingerprint(); }
  std::string name() const override;

  const RemoteStats& stats() const { return stats_; }
  // Set when Connect could not verify something (server down, engine without a vocabulary
  // fingerprint); empty otherwise.
  const std::string& warning() const { return warning_; }

 private:
  RemoteLlm(const RemoteOptions& opts, const Tokenizer& vocab);
  struct Http;  // result of one request
  Http Request(const std::string& method, const std::string& path, const std::string& body);
  Http RequestWithRetries(const std::string& path, const std::string& body);
  Status CheckServer(bool* reachable);
  Expected<LlmReply> NextTlr(std::span<const int32_t> context, int n, const SamplerParams& sampling);
  Expected<LlmReply> NextOpenAi(std::span<const int32_t> context, int n, const SamplerParams& sampling);
  Status CreateSession();
  void SimulateDelay();

  RemoteOptions opts_;
  const Tokenizer& vocab_;
  std::unique_ptr<httplib::Client> client_;
  std::string session_;
  std::vector<int32_t> held_;   // what the server's session holds, as far as we know
  uint64_t request_seq_ = 0;
  std::string request_prefix_;
  bool down_ = false;
  bool transient_ = false;  // the last failure was an outage (no answer, 5xx)
  std::chrono::steady_clock::time_point retry_at_;
  double retry_after_s_ = 1.0;
  RemoteStats stats_;
  std::string warning_;
  std::mt19937_64 rng_;
};

}  // namespace tlr
