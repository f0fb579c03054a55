// SocketHttp (device layer): TLR's built-in HTTP/1.1 client, the default HttpStack
// (http_stack.h). POSIX sockets; TLS through OpenSSL when the build has it (-DTLR_TLS=openssl,
// the default; TLR_HAS_TLS), with certificate and host name verification against the system's
// CA store or a given bundle. Keep-alive connections to one server, reused; Content-Length,
// chunked and read-until-close replies; no compression. Deadlines and cancellation are checked
// at least every 50 ms during every wait (connect, handshake, send, receive).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/http/http_stack.h"
#include "device/http/server_url.h"
#include "util/status.h"

namespace tlr {

struct TlsOptions {
  bool verify = true;   // verify the server's certificate and host name
  std::string ca_file;  // CA bundle (PEM); "": the system's
};

// Whether this build can speak TLS (built with -DTLR_TLS=openssl).
bool BuiltWithTls();
// The error for an https URL in a build without TLS, naming the option and the alternatives.
std::string NoTlsMessage(const std::string& url);

class SocketHttp : public HttpStack {
 public:
  // For one server (scheme, host and port of `origin`; the exchanges' URLs must be on it).
  static Expected<std::unique_ptr<SocketHttp>> Create(const ServerUrl& origin, const TlsOptions& tls);
  ~SocketHttp() override;

  HttpResult Exchange(const HttpExchange& x, Clock::time_point deadline, LlmCall* call,
                      uint64_t max_reply_bytes) override;

 private:
  struct Conn;
  struct Tls;
  SocketHttp() = default;
  std::unique_ptr<Conn> Borrow();
  void Return(std::unique_ptr<Conn> c);
  HttpResult Attempt(Conn* c, const std::string& request, bool head, Clock::time_point deadline, LlmCall* call,
                     uint64_t max_reply_bytes, bool* nothing_received);

  ServerUrl origin_;
  std::unique_ptr<Tls> tls_;  // null for http://
  std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> idle_;
};

}  // namespace tlr
