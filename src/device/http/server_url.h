// Server URLs (device layer): how the remote backends take `--server` apart, and why a server
// cannot be reached, told in words a user can act on.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "util/status.h"

namespace tlr {

// A server URL taken apart. Accepted: http[s]://host[:port][/path][/]. A trailing slash is
// dropped; a path is kept as the prefix of every request's path (a server behind a reverse proxy
// at https://example.com/llm/). Credentials in the URL, queries and fragments are errors.
struct ServerUrl {
  std::string scheme;   // "http" or "https"
  std::string host;     // a name, an IPv4 address, or an IPv6 address in brackets
  int port = 0;         // as given, else 80 / 443
  std::string prefix;   // "" or "/a/b" (no trailing slash)
  std::string Origin() const;    // scheme://host:port
  std::string ToString() const;  // Origin() + prefix
};
Expected<ServerUrl> ParseServerUrl(const std::string& url);

// A TCP socket (non-blocking, TCP_NODELAY) connected to the URL's host and port within the
// deadline, or -1 with *why set in words ("connection refused (nothing listens on port N
// there)", "no reply to the connection attempt ...", "host name 'x' not resolved (...)", "no
// route to host", "cancelled" when `cancelled` (may be empty) turned true while waiting).
int ConnectTcp(const ServerUrl& url, std::chrono::steady_clock::time_point deadline, std::string* why,
               const std::function<bool()>& cancelled = {});

// Why a server cannot be reached, found by connecting to it (at most timeout_s): "connection
// refused", "no reply to the connection attempt within N s", "host name 'x' not resolved (...)",
// "no route to host"; when a connection opens, what a plain HTTP request there gets back says
// whether the scheme is wrong ("the server speaks TLS: use https://..."). Empty when nothing can
// be told.
std::string DiagnoseConnection(const ServerUrl& url, double timeout_s);
// For an https URL: true when the server answers a plain HTTP request in plain HTTP (it does not
// speak TLS), found within timeout_s.
bool SpeaksPlainHttp(const ServerUrl& url, double timeout_s);

}  // namespace tlr
