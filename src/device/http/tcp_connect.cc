// Connecting to a server and telling why it cannot be reached (see server_url.h): the sockets
// part of the device's networking, left out of builds without sockets (the browser's: there the
// app's transport hook carries every call, and no_sockets.cc says so).
#include "device/http/server_url.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ops/thread_pool.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0  // Apple platforms: SO_NOSIGPIPE on the socket instead
#endif

namespace tlr {

namespace {

std::string Seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, s < 0.1 ? "%.2g" : s < 10 ? "%.1f" : "%.0f", s);
  return b;
}

enum class PlainReply { kHttp, kHttpsPortNotice, kTls, kClosed, kOther, kNone };

// Sends a plain HTTP request on a connected socket and looks at the start of the reply.
PlainReply ProbePlain(int fd, const ServerUrl& url, std::chrono::steady_clock::time_point deadline) {
  const std::string req = "GET " + (url.prefix.empty() ? std::string("/") : url.prefix) + " HTTP/1.0\r\nHost: " +
                          url.host + "\r\nConnection: close\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return PlainReply::kNone;
  std::string got;
  bool closed = false;
  char b[512];
  while (got.size() < sizeof b) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = recv(fd, b, sizeof b - got.size(), 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    got.append(b, static_cast<size_t>(n));
    if (got.size() >= 5 && got.compare(0, 5, "HTTP/") != 0) break;  // not HTTP: the first bytes tell
  }
  if (got.empty()) return closed ? PlainReply::kClosed : PlainReply::kNone;
  if (got.compare(0, std::min<size_t>(got.size(), 5), "HTTP/") == 0 && got.size() >= 5) {
    // nginx and others answer a plain request on their TLS port in plain HTTP, saying so.
    std::string lower = got;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return lower.find("https") != std::string::npos ? PlainReply::kHttpsPortNotice : PlainReply::kHttp;
  }
  // A TLS record: handshake (22) or alert (21), then version 3.x.
  const auto* u = reinterpret_cast<const unsigned char*>(got.data());
  if (got.size() >= 2 && (u[0] == 21 || u[0] == 22) && u[1] == 3) return PlainReply::kTls;
  return PlainReply::kOther;
}

// A name lookup that a blocking getaddrinfo would let run past the deadline (a slow or absent
// resolver takes seconds): numeric addresses at once; names on a helper thread that is waited
// for in 50 ms slices and left behind (it frees its result when it ends) at the deadline or a
// cancellation. With TLR_MAX_THREADS=1 (no threads) the lookup blocks as getaddrinfo does.
// False with *why set when it was given up; else *rc and *res as getaddrinfo's.
struct Lookup {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int rc = 0;
  addrinfo* res = nullptr;
  ~Lookup() {
    if (res) freeaddrinfo(res);
  }
};

bool Resolve(const std::string& host, int port, std::chrono::steady_clock::time_point deadline,
             const std::function<bool()>& cancelled, addrinfo** res, int* rc, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  hints.ai_flags = AI_NUMERICHOST;
  *rc = getaddrinfo(host.c_str(), service.c_str(), &hints, res);
  if (*rc != EAI_NONAME || MaxThreads() == 1) {
    if (*rc == EAI_NONAME) {
      hints.ai_flags = 0;
      *rc = getaddrinfo(host.c_str(), service.c_str(), &hints, res);
    }
    return true;
  }
  hints.ai_flags = 0;
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host, service, hints] {
    addrinfo* r = nullptr;
    const int code = getaddrinfo(host.c_str(), service.c_str(), &hints, &r);
    std::lock_guard<std::mutex> l(lookup->mu);
    lookup->rc = code;
    lookup->res = r;
    lookup->done = true;
    lookup->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> l(lookup->mu);
  while (!lookup->done) {
    if (cancelled && cancelled()) {
      *why = "cancelled";
      return false;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      *why = "host name '" + host + "' not resolved in time (the name server does not answer)";
      return false;
    }
    lookup->cv.wait_until(l, std::min(deadline, now + std::chrono::milliseconds(50)));
  }
  *rc = lookup->rc;
  if (*rc == 0) {  // the caller frees its copy; the lookup's own goes with it
    *res = lookup->res;
    lookup->res = nullptr;
  }
  return true;
}

}  // namespace

int ConnectTcp(const ServerUrl& url, std::chrono::steady_clock::time_point deadline, std::string* why,
               const std::function<bool()>& cancelled) {
  std::string host = url.host;
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo* res = nullptr;
  int rc = 0;
  if (!Resolve(host, url.port, deadline, cancelled, &res, &rc, why)) return -1;
  if (rc != 0) {
    *why = "host name '" + host + "' not resolved (" + gai_strerror(rc) + ")";
    return -1;
  }
  int last_errno = 0;
  bool timed_out = false;
  int fd = -1;
  int addresses = 0;
  for (addrinfo* a = res; a; a = a->ai_next) ++addresses;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next, --addresses) {
    // Each address gets its share of the time left, so that one that never answers (an IPv6
    // route that goes nowhere) leaves time for the next.
    const auto now = std::chrono::steady_clock::now();
    const auto attempt_deadline = addresses > 1 && deadline > now ? now + (deadline - now) / addresses : deadline;
    const int s = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (s < 0) {
      last_errno = errno;
      continue;
    }
    fcntl(s, F_SETFD, FD_CLOEXEC);
#ifdef SO_NOSIGPIPE  // Apple platforms: no MSG_NOSIGNAL; a peer that closed must not raise SIGPIPE
    const int on = 1;
    setsockopt(s, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof on);
#endif
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    int err = connect(s, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      int n = 0;
      while (n == 0) {  // in slices, so that a cancellation is seen within 50 ms
        if (cancelled && cancelled()) {
          close(s);
          freeaddrinfo(res);
          *why = "cancelled";
          return -1;
        }
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(attempt_deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{s, POLLOUT, 0};
        n = poll(&p, 1, static_cast<int>(std::min<int64_t>(50, left.count())));
        if (n < 0 && errno == EINTR) n = 0;
      }
      if (n <= 0) {
        timed_out = true;
        err = ETIMEDOUT;
      } else {
        socklen_t len = sizeof err;
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      fd = s;
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    } else {
      last_errno = err;
      close(s);
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) return fd;
  if (timed_out && last_errno == ETIMEDOUT) {
    *why = "no reply to the connection attempt (a firewall, or no such host on the network)";
  } else if (last_errno == ECONNREFUSED) {
    *why = "connection refused (nothing listens on port " + std::to_string(url.port) + " there)";
  } else if (last_errno == EHOSTUNREACH || last_errno == ENETUNREACH) {
    *why = "no route to host";
  } else {
    *why = std::string("cannot connect: ") + std::strerror(last_errno);
  }
  return -1;
}

std::string DiagnoseConnection(const ServerUrl& url, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(std::max(0.05, timeout_s) * 1e6));
  std::string why;
  const int fd = ConnectTcp(url, deadline, &why);
  if (fd < 0) {
    if (why.rfind("no reply", 0) == 0) why += " within " + Seconds(timeout_s) + " s";
    return why;
  }
  const PlainReply r = ProbePlain(fd, url, deadline);
  close(fd);
  if (url.scheme == "http" && r == PlainReply::kTls) {
    return "the server speaks TLS: use https://" + url.ToString().substr(7);
  }
  if (url.scheme == "https" && r == PlainReply::kHttp) {
    return "the server speaks plain HTTP, not TLS: use http://" + url.ToString().substr(8);
  }
  if (url.scheme == "http" && r == PlainReply::kClosed) {
    return "the server closed the connection without an HTTP reply (an HTTPS server? then use https://)";
  }
  if (url.scheme == "http" && r == PlainReply::kHttpsPortNotice) {
    return "the server says this port wants HTTPS: use https://" + url.ToString().substr(7);
  }
  if (r == PlainReply::kNone) return "a connection opens, but nothing answered within " + Seconds(timeout_s) + " s";
  return "";
}

bool SpeaksPlainHttp(const ServerUrl& url, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(std::max(0.05, timeout_s) * 1e6));
  std::string why;
  const int fd = ConnectTcp(url, deadline, &why);
  if (fd < 0) return false;
  const bool plain = ProbePlain(fd, url, deadline) == PlainReply::kHttp;
  close(fd);
  return plain;
}

}  // namespace tlr
