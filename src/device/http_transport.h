// HttpTransport (device layer): the HTTP client under the remote LLM backends (remote_llm.h).
// It knows nothing about a protocol: it sends requests to one server and gives back status and
// body, with keep-alive connections (one per request in flight, reused), a deadline for the
// whole request (connect, send and receive: a reply trickled byte by byte or a chunked reply
// that never ends fails when it passes), a cap on the reply's size, retries with
// exponential backoff on server errors, TLS verification and an optional simulated network
// delay (half before a request is sent, half after its answer, per request; requests in flight
// at once overlap their delays as on a real network).
//
// Thread-safe: several threads may send at once; each request borrows a connection of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "device/llm_backend.h"
#include "device/server_url.h"

namespace httplib {
class Client;
}

namespace tlr {

struct HttpOptions {
  std::string url;               // http[s]://host[:port][/prefix] (see ServerUrl)
  std::string api_key;           // sent as a Bearer token
  std::string ca_file;           // https: CA bundle to verify the server with (default: system's)
  bool verify_tls = true;
  double timeout_s = 10;         // deadline of a request with its retries (connect, send, receive),
                                 // not counting the simulated delays
  uint64_t max_reply_bytes = 16ull << 20;  // a longer reply body fails the request
  int retries = 2;               // further attempts after a failed one
  double backoff_s = 0.05;       // before the first retry; doubles
  double sim_rtt_s = 0;          // simulated network round trip, per HTTP request
  double sim_jitter_s = 0;       // +- uniform
  uint64_t seed = 1;             // for the jitter
};

struct HttpResult {
  bool sent = false;   // a response came back
  int status = 0;
  std::string body;
  std::string error;   // network error when !sent
  bool tls_failure = false;
  bool timed_out = false;  // the deadline passed
  bool too_large = false;  // the reply body exceeded max_reply_bytes
  bool cancelled = false;  // the call was cancelled before the request was sent
  // The server's Retry-After (retry-after-ms, else Retry-After in seconds); -1: none given.
  double retry_after_s = -1;
};

// A reply's wait from its retry-after-ms and Retry-After header values (either may be empty;
// an HTTP date or a malformed value counts as none): seconds, or -1.
double ParseRetryAfter(const std::string& retry_after_ms, const std::string& retry_after);

class HttpTransport {
 public:
  explicit HttpTransport(const HttpOptions& opts);
  ~HttpTransport();
  // Fails for a URL that ParseServerUrl refuses or negative timeouts.
  static Status Validate(const HttpOptions& opts);

  using Clock = std::chrono::steady_clock;
  // The deadline of a request (or of several, e.g. a call's resync rounds) started now.
  Clock::time_point Deadline() const;

  // One request. `call` (may be null): a cancelled call skips the request, and its simulated
  // delays end early. `deadline` (may be null: now + timeout_s) is moved later by the simulated
  // delays, which do not count against it.
  HttpResult Request(const std::string& method, const std::string& path, const std::string& body,
                     LlmCall* call = nullptr, Clock::time_point* deadline = nullptr);
  // POSTs until a response that is not a server-side transient error (500, 502, 504) comes back,
  // the retries are used up or the deadline passes. 429 and 503 are the server shedding load: not
  // retried (the caller waits their Retry-After).
  HttpResult PostWithRetries(const std::string& path, const std::string& body, LlmCall* call = nullptr,
                             Clock::time_point* deadline = nullptr);
  // DELETE with a short timeout (goodbyes).
  void DeleteQuietly(const std::string& path);

  const HttpOptions& options() const { return opts_; }
  int64_t http_requests() const;
  int64_t retries() const;
  double sim_delay_s() const;

 private:
  class Watchdog;
  std::unique_ptr<httplib::Client> NewClient(double timeout_s) const;
  std::unique_ptr<httplib::Client> Borrow();
  void Return(std::unique_ptr<httplib::Client> c);
  double DrawDelay();

  HttpOptions opts_;
  std::string origin_, prefix_;  // from opts_.url
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;  // keep-alive connections not in use
  std::mt19937_64 rng_;
  std::unique_ptr<Watchdog> watchdog_;  // stops requests whose deadline passed
  int64_t http_requests_ = 0, retries_ = 0;
  double sim_delay_s_ = 0;
};

}  // namespace tlr
