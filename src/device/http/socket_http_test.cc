// The built-in HTTP client against a scripted peer on loopback (unit): the replies real servers
// send (Content-Length, chunked with extensions and trailers, read-until-close, interim 100),
// keep-alive reuse and a server that closed an idle connection, and the failures: too large,
// trickled past the deadline, not HTTP, refused, cancelled.
#include "device/http/socket_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <thread>

#include "device/llm/llm_backend.h"

namespace tlr {
namespace {

using Clock = std::chrono::steady_clock;

// Accepts connections; for each request calls `reply(index, request, fd)`, which writes whatever
// it wants and returns false to close the connection.
class Peer {
 public:
  explicit Peer(std::function<bool(int, const std::string&, int)> reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 16);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~Peer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  int connections() const { return connections_; }
  std::string last_request() {
    std::lock_guard<std::mutex> l(mu_);
    return last_;
  }

 private:
  void Run() {
    while (!stop_) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++connections_;
      std::string in;
      char buf[4096];
      for (;;) {
        size_t end;
        while ((end = in.find("\r\n\r\n")) == std::string::npos) {
          const ssize_t n = recv(c, buf, sizeof buf, 0);
          if (n <= 0) goto done;
          in.append(buf, static_cast<size_t>(n));
        }
        size_t body = 0;
        if (size_t p = in.find("Content-Length: "); p != std::string::npos && p < end) body = std::stoul(in.substr(p + 16));
        while (in.size() < end + 4 + body) {
          const ssize_t n = recv(c, buf, sizeof buf, 0);
          if (n <= 0) goto done;
          in.append(buf, static_cast<size_t>(n));
        }
        const std::string req = in.substr(0, end + 4 + body);
        in.erase(0, req.size());
        {
          std::lock_guard<std::mutex> l(mu_);
          last_ = req;
        }
        if (!reply_(requests_++, req, c)) break;
      }
    done:
      close(c);
    }
  }
  std::function<bool(int, const std::string&, int)> reply_;
  int fd_, port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0}, requests_{0};
  std::mutex mu_;
  std::string last_;
  std::thread thread_;
};

void Send(int fd, const std::string& s) { send(fd, s.data(), s.size(), MSG_NOSIGNAL); }

std::unique_ptr<SocketHttp> Client(int port) {
  auto c = SocketHttp::Create(ParseServerUrl("http://127.0.0.1:" + std::to_string(port)).value(), {});
  EXPECT_TRUE(c.ok());
  return std::move(c).value();
}

HttpResult Post(SocketHttp* c, int port, const std::string& body, double timeout_s = 2, uint64_t max = 1 << 20,
                LlmCall* call = nullptr) {
  HttpExchange x;
  x.method = "POST";
  x.url = "http://127.0.0.1:" + std::to_string(port) + "/tlr/v1/next";
  x.headers = {{"Content-Type", "application/json"}};
  x.body = body;
  return c->Exchange(x, Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1e3)), call, max);
}

TEST(SocketHttp, ContentLengthAndKeepAlive) {
  Peer peer([](int, const std::string& req, int fd) {
    const std::string body = "{\"echo\":" + std::to_string(req.size()) + "}";
    Send(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nRetry-After: 3\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n" + body);
    return true;
  });
  auto c = Client(peer.port());
  for (int i = 0; i < 3; ++i) {
    HttpResult h = Post(c.get(), peer.port(), "{\"a\":1}");
    ASSERT_TRUE(h.sent) << h.error;
    EXPECT_EQ(h.status, 200);
    EXPECT_EQ(h.body.substr(0, 8), "{\"echo\":");
    EXPECT_EQ(h.Header("retry-after"), "3");
  }
  EXPECT_EQ(peer.connections(), 1);  // one connection, kept alive
  const std::string req = peer.last_request();
  EXPECT_EQ(req.rfind("POST /tlr/v1/next HTTP/1.1\r\n", 0), 0u) << req;
  EXPECT_NE(req.find("Host: 127.0.0.1:" + std::to_string(peer.port()) + "\r\n"), std::string::npos);
  EXPECT_NE(req.find("Content-Length: 7\r\n"), std::string::npos);
  EXPECT_EQ(req.substr(req.size() - 7), "{\"a\":1}");
}

TEST(SocketHttp, ChunkedInterimAndUntilClose) {
  Peer peer([](int i, const std::string&, int fd) {
    if (i == 0) {
      Send(fd, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n");
      return true;
    }
    Send(fd, "HTTP/1.0 503 Service Unavailable\r\n\r\nbusy until close");
    return false;
  });
  auto c = Client(peer.port());
  HttpResult h = Post(c.get(), peer.port(), "{}");
  ASSERT_TRUE(h.sent) << h.error;
  EXPECT_EQ(h.body, "hello, world");
  h = Post(c.get(), peer.port(), "{}");  // on the same connection
  ASSERT_TRUE(h.sent) << h.error;
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.body, "busy until close");
  EXPECT_EQ(peer.connections(), 1);
}

TEST(SocketHttp, ServerClosedIdleConnectionIsReplaced) {
  Peer peer([](int, const std::string&, int fd) {
    Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    return false;  // closes after answering, without saying so
  });
  auto c = Client(peer.port());
  for (int i = 0; i < 3; ++i) {
    HttpResult h = Post(c.get(), peer.port(), "{}");
    ASSERT_TRUE(h.sent) << i << ": " << h.error;
    EXPECT_EQ(h.body, "ok");
  }
  EXPECT_EQ(peer.connections(), 3);
}

TEST(SocketHttp, FailuresAreNamed) {
  Peer peer([](int i, const std::string&, int fd) {
    switch (i) {
      case 0: Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n"); return false;
      case 1: Send(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + std::string(1024, 'x') + "\r\n"); return false;
      case 2: Send(fd, "SSH-2.0-OpenSSH_9.2\r\n\r\n"); return false;
      case 3: Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: x1\r\n\r\n"); return false;
      default:  // trickles a byte every 100 ms: never a complete reply in time
        for (int k = 0; k < 10; ++k) {
          Send(fd, "H");
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return false;
    }
  });
  auto c = Client(peer.port());
  HttpResult h = Post(c.get(), peer.port(), "{}", 2, 4096);
  EXPECT_TRUE(h.too_large) << h.error;
  h = Post(c.get(), peer.port(), "{}", 2, 512);
  EXPECT_TRUE(h.too_large) << h.error;
  h = Post(c.get(), peer.port(), "{}");
  EXPECT_FALSE(h.sent);
  EXPECT_NE(h.error.find("not HTTP"), std::string::npos) << h.error;
  h = Post(c.get(), peer.port(), "{}");
  EXPECT_FALSE(h.sent);
  EXPECT_NE(h.error.find("Content-Length"), std::string::npos) << h.error;
  const auto t0 = Clock::now();
  h = Post(c.get(), peer.port(), "{}", 0.5);
  EXPECT_TRUE(h.timed_out) << h.error;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.9);
}

// Chunk sizes near 2^64 must not wrap the size cap (a crash, or a body that grows without limit).
TEST(SocketHttp, HugeChunkSizesAreTooLargeNotACrash) {
  Peer peer([](int i, const std::string&, int fd) {
    Send(fd, i == 0 ? "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nA\r\nffffffffffffffff\r\n\r\n"
                    : "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nABC\r\nfffffffffffffffd\r\n");
    return false;
  });
  auto c = Client(peer.port());
  for (int i = 0; i < 2; ++i) {
    HttpResult h = Post(c.get(), peer.port(), "{}", 2, 4096);
    EXPECT_FALSE(h.sent);
    EXPECT_TRUE(h.too_large) << i << ": " << h.error;
  }
}

TEST(SocketHttp, CancelledCallStopsWaiting) {
  Peer peer([](int, const std::string&, int) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return false;
  });
  auto c = Client(peer.port());
  LlmCall call([] {});
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    call.Cancel();
  });
  const auto t0 = Clock::now();
  HttpResult h = Post(c.get(), peer.port(), "{}", 5, 1 << 20, &call);
  canceller.join();
  EXPECT_TRUE(h.cancelled) << h.error;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
}

TEST(SocketHttp, RefusedAndTlsOff) {
  int port;
  {
    Peer gone([](int, const std::string&, int) { return false; });
    port = gone.port();
  }
  auto c = Client(port);
  HttpResult h = Post(c.get(), port, "{}");
  EXPECT_FALSE(h.sent);
  EXPECT_NE(h.error.find("connection refused"), std::string::npos) << h.error;
  auto tls = SocketHttp::Create(ParseServerUrl("https://127.0.0.1:1").value(), {});
  if (BuiltWithTls()) {
    EXPECT_TRUE(tls.ok());
  } else {
    ASSERT_FALSE(tls.ok());
    EXPECT_NE(tls.status().message().find("-DTLR_TLS"), std::string::npos) << tls.status().message();
  }
  TlsOptions bad_ca;
  bad_ca.ca_file = "/nonexistent/ca.pem";
  if (BuiltWithTls()) {
    EXPECT_FALSE(SocketHttp::Create(ParseServerUrl("https://127.0.0.1:1").value(), bad_ca).ok());
  }
}

}  // namespace
}  // namespace tlr
