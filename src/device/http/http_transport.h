// HttpTransport (device layer): the HTTP client under the remote LLM backends (remote_llm.h).
// It knows nothing about a protocol: it sends requests to one server and gives back status and
// body, with a deadline for the whole request (connect, send and receive: a reply trickled byte
// by byte or a chunked reply that never ends fails when it passes), a cap on the reply's size,
// retries with exponential backoff on server errors and an optional simulated network delay
// (half before a request is sent, half after its answer, per request; requests in flight at
// once overlap their delays as on a real network). The exchanges themselves go through an
// HttpStack (http_stack.h): TLR's built-in client (socket_http.h: keep-alive connections, TLS
// verification) or the app's own.
//
// Thread-safe: several threads may send at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "device/http/http_stack.h"
#include "device/llm/llm_backend.h"
#include "device/http/server_url.h"

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
  // The app's own HTTP stack (the C API's tlr_http_hook); null: TLR's built-in client. With it,
  // TLS, proxies and certificates are the app's: ca_file and verify_tls do not apply.
  std::shared_ptr<HttpStack> stack;
};

// A reply's wait from its retry-after-ms and Retry-After header values (either may be empty;
// an HTTP date or a malformed value counts as none): seconds, or -1.
double ParseRetryAfter(const std::string& retry_after_ms, const std::string& retry_after);

class HttpTransport {
 public:
  explicit HttpTransport(const HttpOptions& opts);
  ~HttpTransport();
  // Fails for a URL that ParseServerUrl refuses, negative timeouts, an https URL in a build
  // without TLS (and no stack of the app's) or a CA file that does not load.
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
  // True when the app's own stack carries the requests (connection diagnosis by TLR's own
  // sockets then says nothing about the app's network).
  bool app_stack() const { return opts_.stack != nullptr; }
  int64_t http_requests() const;
  int64_t retries() const;
  double sim_delay_s() const;

 private:
  double DrawDelay();
  HttpExchange NewExchange(const std::string& method, const std::string& path, const std::string& body) const;

  HttpOptions opts_;
  std::string origin_, prefix_;  // from opts_.url
  std::shared_ptr<HttpStack> stack_;
  std::string stack_error_;  // why there is no stack_
  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  int64_t http_requests_ = 0, retries_ = 0;
  double sim_delay_s_ = 0;
};

}  // namespace tlr
