// Raw HTTP/1.1 requests for the tests that send what no well-behaved client would (apps layer,
// tests only): hostile_requests_test and the soak's bad-request sender. Send writes the bytes
// as they are on a new loopback connection and reads one response.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace tlr {

struct RawResponse {
  int status = 0;  // 0: no complete response within the wait
  std::string body;
};

// Sends `request` as is on a new connection; reads one response (headers, then Content-Length
// bytes of body), waiting at most 20 s for it.
inline RawResponse Send(int port, const std::string& request) {
  RawResponse r;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return r;
  }
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (and stop reading) before the body is sent
    sent += static_cast<size_t>(n);
  }
  std::string in;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    const size_t head = in.find("\r\n\r\n");
    if (head == std::string::npos) continue;
    size_t length = 0;
    const size_t cl = in.find("Content-Length: ");
    if (cl != std::string::npos && cl < head) length = std::stoul(in.substr(cl + 16));
    if (in.size() >= head + 4 + length) {
      r.status = std::stoi(in.substr(9, 3));
      r.body = in.substr(head + 4, length);
      break;
    }
  }
  close(fd);
  return r;
}

inline std::string Post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

inline std::string Get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"; }

inline std::string Nested(const std::string& open, const std::string& close, int depth) {
  std::string s;
  s.reserve((open.size() + close.size()) * static_cast<size_t>(depth));
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

// A 4xx with the usual JSON error body; returns its code.
inline std::string ErrorCode(const RawResponse& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error")) return "not a JSON error: " + r.body.substr(0, 100);
  return j["error"].value("code", "?");
}

}  // namespace tlr
