// Builds without sockets (the browser's: TLR_SOCKETS=OFF): what tcp_connect.cc does elsewhere.
// Every LLM call there goes through the app's transport hook (HttpOptions.stack); nothing can
// be connected to or diagnosed from here.
#include "device/http/server_url.h"

namespace tlr {

int ConnectTcp(const ServerUrl& url, std::chrono::steady_clock::time_point, std::string* why,
               const std::function<bool()>&) {
  *why = "this build has no sockets of its own (the transport hook carries its calls to " + url.Origin() + ")";
  return -1;
}

std::string DiagnoseConnection(const ServerUrl&, double) { return ""; }

bool SpeaksPlainHttp(const ServerUrl&, double) { return false; }

}  // namespace tlr
