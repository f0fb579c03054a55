// HttpStack (device layer): what carries one HTTP exchange to the LLM's server under
// HttpTransport (http_transport.h): TLR's built-in client (socket_http.h) or an app's own
// network stack handed in through the C API (tlr_http_hook in include/tlr.h). It knows nothing
// about retries, simulated delays or protocols: one request in, one reply (or a failure) out.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tlr {

class LlmCall;

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpExchange {
  std::string method;   // "GET", "POST", "DELETE"
  std::string url;      // absolute: scheme://host:port/path
  HttpHeaders headers;  // besides Host, Content-Length and Connection, which the stack adds
  std::string body;
};

struct HttpResult {
  bool sent = false;   // a response came back
  int status = 0;
  HttpHeaders headers;  // the reply's, names in lower case
  std::string body;
  std::string error;   // what went wrong when !sent, in words
  bool tls_failure = false;
  bool timed_out = false;  // the deadline passed
  bool too_large = false;  // the reply body exceeded the limit
  bool cancelled = false;  // the call was cancelled
  // The request was handed to the stack (HttpTransport sets it): without a reply it may still
  // have reached the server.
  bool attempted = false;
  // The server's Retry-After (retry-after-ms, else Retry-After in seconds); -1: none given.
  double retry_after_s = -1;
  // The value of a reply header (name in lower case), or "".
  std::string Header(const std::string& name) const;
  // Adds a reply header, its name lowered (what Header looks up).
  void AddHeader(std::string_view name, std::string value);
};

class HttpStack {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~HttpStack() = default;
  // Carries one exchange. Returns when the reply is complete, `deadline` passes (timed_out),
  // `call` (may be null) is cancelled (cancelled) or the reply grows past max_reply_bytes
  // (too_large). Thread-safe: several exchanges may be in flight at once.
  virtual HttpResult Exchange(const HttpExchange& x, Clock::time_point deadline, LlmCall* call,
                              uint64_t max_reply_bytes) = 0;
};

}  // namespace tlr
