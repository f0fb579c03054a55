// Server URLs (see server_url.h). Connecting to one: tcp_connect.cc.
#include "device/http/server_url.h"

#include <cctype>
#include <string>

namespace tlr {

namespace {

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::string ServerUrl::Origin() const { return scheme + "://" + host + ":" + std::to_string(port); }
std::string ServerUrl::ToString() const { return Origin() + prefix; }

Expected<ServerUrl> ParseServerUrl(const std::string& url) {
  const auto bad = [&](const std::string& why) {
    return Status::Error("server URL '" + url + "': " + why + " (expected http[s]://host[:port][/path])");
  };
  ServerUrl u;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    u.scheme = "http";
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    u.scheme = "https";
    rest = url.substr(8);
  } else {
    return bad("it must start with http:// or https://");
  }
  if (rest.find_first_of("?#") != std::string::npos) return bad("a query or fragment has no place in it");
  for (char c : rest) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return bad("it contains a space or a control character");
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string::npos) return bad("credentials in the URL are not supported (give the key as --server-key; C API: api_key)");
  std::string port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return bad("an IPv6 address needs its closing ']'");
    u.host = authority.substr(0, close + 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("unexpected text after the IPv6 address");
      port = after.substr(1);
      if (port.empty()) return bad("the port after ':' is missing");
    }
    if (u.host.size() <= 2) return bad("the host is empty");
  } else {
    const size_t colon = authority.find(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return bad("the port after ':' is missing");
    }
    if (u.host.empty()) return bad("the host is empty");
  }
  if (!port.empty()) {
    if (!AllDigits(port) || port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535) {
      return bad("port '" + port + "' is not a number in 1..65535");
    }
    u.port = std::stoi(port);
  } else {
    u.port = u.scheme == "https" ? 443 : 80;
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.find("//") != std::string::npos) return bad("the path has an empty segment");
  u.prefix = path;
  return u;
}

}  // namespace tlr
