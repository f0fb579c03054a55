// Slow and many clients against the real server on a loopback port (label server): slowloris
// sockets and idle keep-alive connections do not take the server away from a new device, the
// connection limit and request deadline answer with a clear status, a chunked body past
// --max-body is refused while it arrives, session quotas per client address and per API key,
// the listen backlog, and a burst of simultaneous connects. Plus the request framing on its own.
#include "net/http_front.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "net/metrics.h"
#include "server/llm_engine.h"
#include "server/llm_server.h"
#include "util/test_support.h"

namespace tlr {
namespace {

using nlohmann::json;

// ---- Framing ---------------------------------------------------------------------------------

RequestScan Scan(std::string_view req, uint64_t max_body = 1 << 20) {
  FrontLimits lim;
  lim.max_body_bytes = max_body;
  ScanState st;
  return ScanRequest(req, lim, &st);
}

TEST(RequestScanTest, FramesLengthAndChunkedBodies) {
  const std::string get = "GET /health HTTP/1.1\r\nHost: a\r\n\r\nGET /next";
  RequestScan s = Scan(get);
  ASSERT_EQ(s.kind, RequestScan::Kind::kComplete);
  EXPECT_EQ(s.length, get.size() - 9);  // the pipelined request after it is not part of it
  s = Scan("POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_EQ(s.kind, RequestScan::Kind::kComplete);
  EXPECT_EQ(s.length, 41u);
  EXPECT_EQ(Scan("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\n{}").kind, RequestScan::Kind::kIncomplete);
  const std::string chunked = "POST /x HTTP/1.1\r\ntransfer-encoding: Chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
  s = Scan(chunked);
  ASSERT_EQ(s.kind, RequestScan::Kind::kComplete);
  EXPECT_EQ(s.length, chunked.size());
  EXPECT_EQ(Scan(chunked.substr(0, chunked.size() - 1)).kind, RequestScan::Kind::kIncomplete);
  // Byte by byte, resuming: the same answer.
  FrontLimits lim;
  ScanState st;
  for (size_t n = 1; n < chunked.size(); ++n) {
    ASSERT_EQ(ScanRequest(std::string_view(chunked).substr(0, n), lim, &st).kind, RequestScan::Kind::kIncomplete) << n;
  }
  EXPECT_EQ(ScanRequest(chunked, lim, &st).kind, RequestScan::Kind::kComplete);
}

TEST(RequestScanTest, RefusesWhatItCannotFrameExactly) {
  auto status = [](std::string_view req, uint64_t max_body = 1 << 20) {
    RequestScan s = Scan(req, max_body);
    return s.kind == RequestScan::Kind::kError ? s.status : 0;
  };
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nHost: a\r\n\r\n"), 400);  // no length: not "wait for close"
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}"), 400);
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}"), 400);
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 400);
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400);
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\r\n\r\n"), 400);
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nContent-Length: 2000\r\n\r\n", 1000), 413);
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n300\r\n", 1000), 0);
  EXPECT_EQ(status("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n", 1000), 413);
  EXPECT_EQ(status("GET / HTTP/1.1\r\nX: " + std::string(70000, 'a')), 431);
  // A line without CR is skipped (as httplib does), so it cannot smuggle a length.
  RequestScan s = Scan("POST /x HTTP/1.1\r\nContent-Length: 9\nContent-Length: 2\r\n\r\n{}");
  ASSERT_EQ(s.kind, RequestScan::Kind::kComplete);
  EXPECT_TRUE(Scan("POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n").expect_continue);
}

// ---- Raw sockets -----------------------------------------------------------------------------

// A blocking TCP connection to 127.0.0.1:port from `source` (any 127.x address), or -1.
int Connect(int port, const char* source = nullptr, double timeout_s = 10) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(timeout_s), static_cast<suseconds_t>((timeout_s - static_cast<time_t>(timeout_s)) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (source) {
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, source, &src.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads one response (header and Content-Length body), or what came before EOF or the timeout.
std::string ReadResponse(int fd) {
  std::string r;
  char b[4096];
  for (;;) {
    const size_t end = r.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t len = 0;
      const size_t cl = r.find("Content-Length: ");
      if (cl != std::string::npos && cl < end) len = std::stoul(r.substr(cl + 16));
      if (r.size() >= end + 4 + len) return r;
    }
    const ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n <= 0) return r;
    r.append(b, static_cast<size_t>(n));
  }
}

int StatusOf(const std::string& response) {
  return response.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(response.c_str() + 9) : 0;
}

std::string Exchange(int port, const std::string& request, const char* source = nullptr) {
  const int fd = Connect(port, source);
  if (fd < 0) return "";
  std::string r = SendAll(fd, request) ? ReadResponse(fd) : "";
  ::close(fd);
  return r;
}

std::string Post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds) ::close(fd);
  }
};

class ConnTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { llm_ = Model::Load(kDemo + "llm.gguf")->release(); }
  static void TearDownTestSuite() { delete llm_; }
  void Start(ServerOptions so = {}, EngineLimits lim = {}) {
    engine_ = std::make_unique<LlmEngine>(*llm_, nullptr, lim, &metrics_);
    so.port = 0;
    server_ = std::make_unique<LlmServer>(engine_.get(), &metrics_, so);
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  // A health check by a new client, which must be answered while the others hang on.
  void ExpectHealthy() {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(10);
    c.set_read_timeout(10);
    auto res = c.Get("/health");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
  }
  // A device: a session and one routed call.
  void ExpectDeviceWorks(const std::string& headers = "") {
    const std::string created = Exchange(port_, Post("/tlr/v1/sessions", "{}", headers));
    ASSERT_EQ(StatusOf(created), 201) << created;
    const json j = json::parse(created.substr(created.find("\r\n\r\n") + 4));
    const std::string next = Exchange(
        port_, Post("/tlr/v1/next",
                    json{{"session", j["session"]}, {"request_id", "r1"}, {"base", 0}, {"append", {1, 2, 3}}, {"n", 1}}.dump(),
                    headers));
    EXPECT_EQ(StatusOf(next), 200) << next;
  }
  static Model* llm_;
  Metrics metrics_;
  std::unique_ptr<LlmEngine> engine_;
  std::unique_ptr<LlmServer> server_;
  int port_ = 0;
};
Model* ConnTest::llm_ = nullptr;

TEST_F(ConnTest, SlowlorisSocketsDoNotStarveHealthOrDevices) {
  Start();
  Fds slow;
  for (int i = 0; i < 256; ++i) {
    const int fd = Connect(port_);
    ASSERT_GE(fd, 0) << i;
    slow.fds.push_back(fd);
    ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));  // never finished
  }
  ExpectHealthy();
  ExpectDeviceWorks();
}

// Clients that pipeline requests and never read the replies: each reply waits in memory (or the
// worker for the client, past 1 MiB) and the connection's next request is read only once it is
// sent, so they hold no worker (a worker blocked writing for the 30 s write timeout, and as many
// such clients as workers stopped everyone else).
TEST_F(ConnTest, ClientsThatDoNotReadTheirRepliesDoNotStarveOthers) {
  ServerOptions so;
  so.http_threads = 4;
  Start(so);
  const std::string many = [] {
    std::string r;
    for (int i = 0; i < 1000; ++i) r += "GET /tlr/v1/vocabulary HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    return r;
  }();
  Fds deaf;
  for (int i = 0; i < 8; ++i) {  // twice the workers
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    deaf.fds.push_back(fd);
    ASSERT_EQ(::send(fd, many.data(), many.size(), MSG_NOSIGNAL), static_cast<ssize_t>(many.size()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the replies fill the sockets
  ExpectHealthy();
  ExpectDeviceWorks();
  // A deaf client that starts reading gets every reply, in order.
  const int fd = deaf.fds[0];
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  char buf[65536];
  int replies = 0;
  for (ssize_t n; replies < 1000 && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<size_t>(n));
    for (size_t at; (at = got.find("HTTP/1.1 200")) != std::string::npos;) {
      ++replies;
      got.erase(0, at + 12);
    }
  }
  EXPECT_EQ(replies, 1000);
}

// An HTTP/1.0 client knows no chunked encoding: its event stream comes as it is and ends with
// the connection (also when it asked to keep the connection); an HTTP/1.1 client gets chunks.
TEST_F(ConnTest, StreamsToHttp10ClientsAreNotChunked) {
  Start();
  const std::string body = R"({"prompt":"Question: where","max_tokens":3,"stream":true})";
  for (const std::string extra : {"", "Connection: keep-alive\r\n", "Connection: Keep-Alive\r\n"}) {
    const int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    std::string req = Post("/v1/completions", body, extra);
    req.replace(req.find("HTTP/1.1"), 8, "HTTP/1.0");
    ASSERT_TRUE(SendAll(fd, req));
    std::string r;
    char b[4096];
    ssize_t n;
    while ((n = ::recv(fd, b, sizeof b, 0)) > 0) r.append(b, static_cast<size_t>(n));
    ::close(fd);
    EXPECT_EQ(n, 0) << "the connection did not end with the stream (" << extra << ")";
    EXPECT_EQ(StatusOf(r), 200) << r;
    const size_t end = r.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos) << r;
    EXPECT_EQ(r.substr(0, end).find("Transfer-Encoding"), std::string::npos) << r;
    const std::string events = r.substr(end + 4);
    EXPECT_EQ(events.rfind("data: {", 0), 0u) << events;
    EXPECT_TRUE(events.ends_with("data: [DONE]\n\n")) << events;
  }
  const std::string r11 = Exchange(port_, Post("/v1/completions", body));
  EXPECT_NE(r11.substr(0, r11.find("\r\n\r\n")).find("Transfer-Encoding: chunked"), std::string::npos) << r11;
}

TEST_F(ConnTest, IdleKeepAliveConnectionsDoNotStarveANewClient) {
  Start();
  Fds idle;
  for (int i = 0; i < 100; ++i) {  // more than the 64 request threads
    const int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    idle.fds.push_back(fd);
    ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_EQ(StatusOf(ReadResponse(fd)), 200) << i;  // and the connection stays open, idle
  }
  ExpectHealthy();
  ExpectDeviceWorks();
  // The idle connections still work.
  ASSERT_TRUE(SendAll(idle.fds[0], "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  EXPECT_EQ(StatusOf(ReadResponse(idle.fds[0])), 200);
}

TEST_F(ConnTest, ConnectionLimitAnswers503) {
  ServerOptions so;
  so.max_connections = 8;
  Start(so);
  Fds open;
  for (int i = 0; i < 8; ++i) open.fds.push_back(Connect(port_));
  // The server counts a connection once it accepted it: wait until all 8 are (a request answered on each).
  for (int fd : open.fds) {
    ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_EQ(StatusOf(ReadResponse(fd)), 200);
  }
  const std::string r = Exchange(port_, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 503) << r;
  EXPECT_NE(r.find("too_many_connections"), std::string::npos) << r;
  ::close(open.fds.back());
  open.fds.pop_back();
  // Once one closes, a new client gets in (the server notices the close within its poll interval).
  std::string again;
  for (int attempt = 0; attempt < 50 && StatusOf(again) != 200; ++attempt) {
    again = Exchange(port_, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    if (StatusOf(again) != 200) ::usleep(20000);
  }
  EXPECT_EQ(StatusOf(again), 200) << again;
}

TEST_F(ConnTest, RequestThatNeverEndsGets408AndPostWithoutLengthGets400) {
  ServerOptions so;
  so.request_timeout_s = 0.5;
  Start(so);
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: 127"));
  const std::string r = ReadResponse(fd);
  ::close(fd);
  EXPECT_EQ(StatusOf(r), 408) << r;
  const std::string p = Exchange(port_, "POST /tlr/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(StatusOf(p), 400) << p;
  EXPECT_NE(p.find("bad_http_request"), std::string::npos) << p;
  // A chunked body is a length, whatever the case of the coding's name (RFC 9112: case-insensitive).
  for (const char* coding : {"chunked", "Chunked", "CHUNKED"}) {
    const std::string c = Exchange(port_, std::string("POST /tlr/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n") +
                                              "Transfer-Encoding: " + coding + "\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
    EXPECT_EQ(StatusOf(c), 201) << coding << ": " << c;
  }
}

// A request that cannot be read (a bad request line, a target past 8 KiB, both Content-Length
// and chunked) is answered, and its connection closed: what follows on it is not served as a
// request (smuggling behind a proxy). A form body (curl -d) past httplib's 8 KiB is told apart.
TEST_F(ConnTest, UnreadableRequestsCloseTheConnection) {
  Start(ServerOptions{});
  const std::string then = Post("/tlr/v1/sessions", "{}");
  for (const std::string bad :
       {std::string("GET /health HTTP/9.9\r\n\r\n"), "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n",
        std::string("POST /tlr/v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")}) {
    SCOPED_TRACE(bad.substr(0, 40));
    const int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, bad + then));
    const std::string first = ReadResponse(fd);
    EXPECT_TRUE(StatusOf(first) == 400 || StatusOf(first) == 414) << first.substr(0, 300);
    EXPECT_NE(first.find("Connection: close"), std::string::npos) << first.substr(0, 300);
    EXPECT_EQ(first.find("HTTP/1.1 201"), std::string::npos) << "the bytes after it were served: " << first;
    char b;
    EXPECT_EQ(::recv(fd, &b, 1, 0), 0) << "the connection stayed open";
    ::close(fd);
  }
  const std::string body = R"({"prompt": ")" + std::string(9000, 'a') + R"(", "max_tokens": 1})";
  const std::string r = Exchange(port_, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                        "application/x-www-form-urlencoded\r\nContent-Length: " +
                                            std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(StatusOf(r), 413) << r.substr(0, 300);
  EXPECT_NE(r.find("Content-Type: application/json')"), std::string::npos) << r.substr(0, 600);
  EXPECT_EQ(r.find("--max-body"), std::string::npos) << r.substr(0, 600);
  ExpectHealthy();
}

TEST_F(ConnTest, ChunkedBodyPastMaxBodyIsRefusedWhileItArrives) {
  ServerOptions so;
  so.max_body_bytes = 64 << 10;
  Start(so);
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "POST /tlr/v1/next HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n"));
  // Up to 256 MiB in 64 KiB chunks: the server must stop taking them long before that.
  const std::string chunk = "10000\r\n" + std::string(65536, ' ') + "\r\n";
  uint64_t sent = 0;
  while (sent < (256ull << 20) && SendAll(fd, chunk)) sent += 65536;
  EXPECT_LT(sent, 256ull << 20) << "the server read a 256 MiB chunked body with --max-body 64K";
  const std::string r = ReadResponse(fd);
  ::close(fd);
  EXPECT_EQ(StatusOf(r), 413) << r.substr(0, 300);
  EXPECT_NE(r.find("body_too_large"), std::string::npos);
  ExpectHealthy();
}

TEST_F(ConnTest, SessionQuotaPerClientAddress) {
  ServerOptions so;
  so.session_quota = 3;
  EngineLimits lim;
  lim.max_sessions = 8;
  Start(so, lim);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const std::string r = Exchange(port_, Post("/tlr/v1/sessions", "{}"));
    ASSERT_EQ(StatusOf(r), 201) << r;
    ids.push_back(json::parse(r.substr(r.find("\r\n\r\n") + 4))["session"]);
  }
  const std::string refused = Exchange(port_, Post("/tlr/v1/sessions", "{}"));
  EXPECT_EQ(StatusOf(refused), 429) << refused;
  EXPECT_NE(refused.find("session_quota"), std::string::npos) << refused;
  EXPECT_NE(refused.find("127.0.0.1"), std::string::npos) << refused;
  // Another client address is not affected.
  const std::string other = Exchange(port_, Post("/tlr/v1/sessions", "{}"), "127.0.0.2");
  EXPECT_EQ(StatusOf(other), 201) << other;
  // Deleting one frees a slot.
  EXPECT_EQ(StatusOf(Exchange(port_, "DELETE /tlr/v1/sessions/" + ids[0] + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")), 204);
  EXPECT_EQ(StatusOf(Exchange(port_, Post("/tlr/v1/sessions", "{}"))), 201);
}

TEST_F(ConnTest, SessionQuotaPerApiKey) {
  ServerOptions so;
  so.session_quota = 2;
  so.api_keys = {"key-one", "key-two"};
  Start(so);
  const std::string one = "Authorization: Bearer key-one\r\n", two = "Authorization: Bearer key-two\r\n";
  EXPECT_EQ(StatusOf(Exchange(port_, Post("/tlr/v1/sessions", "{}", one))), 201);
  EXPECT_EQ(StatusOf(Exchange(port_, Post("/tlr/v1/sessions", "{}", one), "127.0.0.3")), 201);
  const std::string refused = Exchange(port_, Post("/tlr/v1/sessions", "{}", one), "127.0.0.4");
  EXPECT_EQ(StatusOf(refused), 429) << refused;  // the key, not the address, counts
  EXPECT_NE(refused.find("API key #1"), std::string::npos) << refused;
  ExpectDeviceWorks(two);
}

TEST_F(ConnTest, ListenBacklogIsRealAndABurstOfConnectsIsAnswered) {
  Start();
  // The kernel reports a listening socket's backlog as its Send-Q.
  FILE* p = ::popen(("ss -Hltn 'sport = :" + std::to_string(port_) + "' 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[512] = {};
  const bool have = std::fgets(line, sizeof line, p) != nullptr;
  ::pclose(p);
  if (have) {
    char state[64];
    long recv_q = 0, send_q = 0;
    ASSERT_EQ(std::sscanf(line, "%63s %ld %ld", state, &recv_q, &send_q), 3) << line;
    EXPECT_GE(send_q, 512) << line;
  }
  // 500 connections at once, each with a request sent before any answer is read.
  Fds burst;
  for (int i = 0; i < 500; ++i) {
    const int fd = Connect(port_);
    ASSERT_GE(fd, 0) << "connect " << i << " failed";
    burst.fds.push_back(fd);
    ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) << i;
  }
  int answered = 0;
  for (int fd : burst.fds) answered += StatusOf(ReadResponse(fd)) == 200;
  EXPECT_EQ(answered, 500);
}

}  // namespace
}  // namespace tlr

namespace tlr {
namespace {

// CORS (--cors-origin): an allowed origin's preflight is answered 204 before the key check
// (browsers send no key with it) and its calls carry Access-Control-Allow-Origin; another
// origin's preflight is refused with the reason and its calls carry none; without the option
// no CORS header is ever sent.
TEST_F(ConnTest, CorsForTheConfiguredOriginsOnly) {
  ServerOptions so;
  so.api_keys = {"k1"};
  so.cors_origins = {"http://app.example:8000"};
  Start(so);
  const std::string preflight =
      "OPTIONS /tlr/v1/next HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://app.example:8000\r\n"
      "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization,content-type,x-tlr-timeout-ms\r\n\r\n";
  std::string r = Exchange(port_, preflight);
  EXPECT_EQ(StatusOf(r), 204) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Origin: http://app.example:8000"), std::string::npos) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Headers: authorization,content-type,x-tlr-timeout-ms"), std::string::npos) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS"), std::string::npos) << r;
  // The call itself: the key still counts; the reply carries the origin.
  const std::string origin = "Origin: http://app.example:8000\r\n";
  r = Exchange(port_, Post("/tlr/v1/sessions", "{}", origin));
  EXPECT_EQ(StatusOf(r), 401) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Origin: http://app.example:8000"), std::string::npos) << r;
  r = Exchange(port_, Post("/tlr/v1/sessions", "{}", origin + "Authorization: Bearer k1\r\n"));
  EXPECT_EQ(StatusOf(r), 201) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Origin: http://app.example:8000"), std::string::npos) << r;
  // Another origin.
  std::string other = preflight;
  other.replace(other.find("app.example:8000"), 16, "evil.example");
  r = Exchange(port_, other);
  EXPECT_EQ(StatusOf(r), 403) << r;
  EXPECT_NE(r.find("origin_not_allowed"), std::string::npos) << r;
  EXPECT_NE(r.find("--cors-origin"), std::string::npos) << r;
  r = Exchange(port_, Post("/tlr/v1/sessions", "{}", "Origin: http://evil.example\r\nAuthorization: Bearer k1\r\n"));
  EXPECT_EQ(StatusOf(r), 201) << r;
  EXPECT_EQ(r.find("Access-Control-Allow-Origin"), std::string::npos) << r;
}

TEST_F(ConnTest, NoCorsHeadersByDefault) {
  Start();
  const std::string r = Exchange(port_, Post("/tlr/v1/sessions", "{}", "Origin: http://app.example:8000\r\n"));
  EXPECT_EQ(StatusOf(r), 201) << r;
  EXPECT_EQ(r.find("Access-Control-Allow-Origin"), std::string::npos) << r;
}

// `tlr serve --web`'s files: served without a key (the page loads before anyone types one),
// cross-origin isolated, in memory or from disk; the API keeps its key, and a file gone from
// disk is a 404 that names it.
TEST_F(ConnTest, WebFilesNeedNoKeyAndIsolateThePage) {
  const std::string path = ::testing::TempDir() + "/web_files_test.wasm";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::string bytes(3 << 20, 'w');  // larger than one slice of the sender
    bytes[0] = '\0';
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  ServerOptions so;
  so.api_keys = {"k1"};
  auto file = [](std::string path, std::string type, std::string body, std::string disk) {
    WebFile f;
    f.path = std::move(path);
    f.content_type = std::move(type);
    f.body = std::move(body);
    f.file = std::move(disk);
    return f;
  };
  so.web_files = {file("/", "text/html; charset=utf-8", "<!doctype html>page", ""),
                  file("/tlr.wasm", WebContentType("tlr.wasm"), "", path),
                  file("/gone.js", WebContentType("gone.js"), "", path + ".missing"),
                  file("/models/a+b.gguf", "application/octet-stream", "", path)};
  WebFileVersion(path, &so.web_files[3].size, &so.web_files[3].mtime);
  Start(so);
  httplib::Client c("127.0.0.1", port_);
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->body, "<!doctype html>page");
  EXPECT_EQ(page->get_header_value("Cross-Origin-Opener-Policy"), "same-origin");
  EXPECT_EQ(page->get_header_value("Cross-Origin-Embedder-Policy"), "require-corp");
  auto wasm = c.Get("/tlr.wasm");
  ASSERT_TRUE(wasm);
  EXPECT_EQ(wasm->status, 200);
  EXPECT_EQ(wasm->get_header_value("Content-Type"), "application/wasm");
  ASSERT_EQ(wasm->body.size(), size_t{3} << 20);
  EXPECT_EQ(wasm->body[0], '\0');
  EXPECT_EQ(wasm->body.back(), 'w');
  auto gone = c.Get("/gone.js");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404);
  EXPECT_NE(gone->body.find("/gone.js"), std::string::npos) << gone->body;
  EXPECT_EQ(gone->body.find(path), std::string::npos) << "the server's file names stay on the server: " << gone->body;
  // A file whose URL names its version: served while it is that version (the path taken
  // literally: "+" is no pattern), refused once it changed; an empty file is an empty reply.
  auto pinned = c.Get("/models/a+b.gguf");
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned->status, 200);
  EXPECT_EQ(pinned->body.size(), size_t{3} << 20);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  pinned = c.Get("/models/a+b.gguf");
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned->status, 503);
  EXPECT_NE(pinned->body.find("restart"), std::string::npos) << pinned->body;
  auto empty = c.Get("/tlr.wasm");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 200);
  EXPECT_EQ(empty->body, "");
  // Only GET of those paths is free: the API and a POST to a page path want the key.
  auto info = c.Get("/tlr/v1/info");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->status, 401);
  auto post = c.Post("/", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);
  std::remove(path.c_str());
}

// Keyless downloads are capped: while 8 readers hold model downloads open, the 9th is told to
// come back (503, Retry-After), and the API still answers.
TEST_F(ConnTest, KeylessDownloadsAreCapped) {
  const std::string path = ::testing::TempDir() + "/web_files_cap.gguf";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string mb(1 << 20, 'm');
    for (int i = 0; i < 64; ++i) std::fwrite(mb.data(), 1, mb.size(), f);  // more than socket buffers hold
    std::fclose(f);
  }
  ServerOptions so;
  WebFile model;
  model.path = "/models/slm.gguf";
  model.content_type = "application/octet-stream";
  model.file = path;
  so.web_files = {model};
  Start(so);
  std::vector<int> readers;
  for (int i = 0; i < 8; ++i) {  // ask, never read
    const int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "GET /models/slm.gguf HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    readers.push_back(fd);
  }
  httplib::Client c("127.0.0.1", port_);
  int status = 0;
  for (int i = 0; i < 100 && status != 503; ++i) {  // until the 8 are all sending
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = c.Head("/models/slm.gguf");
    ASSERT_TRUE(r);
    status = r->status;
    if (status == 503) {
      EXPECT_EQ(r->get_header_value("Retry-After"), "2");
    }
  }
  EXPECT_EQ(status, 503);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  for (int fd : readers) ::close(fd);
  for (int i = 0; i < 100 && status != 200; ++i) {  // the slots come back when the readers leave
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = c.Head("/models/slm.gguf");
    ASSERT_TRUE(r);
    status = r->status;
  }
  EXPECT_EQ(status, 200);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tlr
