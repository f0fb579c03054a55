// HttpFront: the poller, the workers and the request framing (net layer). See http_front.h.
//
// Framing agrees with what httplib will read: header lines end at '\n', lines without CRLF are
// skipped, a header name is the exact bytes before ':' (compared case-insensitively), the body is
// chunked only for exactly "Transfer-Encoding: chunked". Anything ambiguous (two Content-Lengths,
// another transfer coding, chunk trailers) is refused with 400 rather than guessed, and httplib
// only ever sees the bytes of one request, so no bytes can leak into the next one.
#include "net/http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "net/metrics.h"

namespace tlr {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxChunkLine = 1024;
constexpr double kDrainSeconds = 1.0;          // a refused connection's input is discarded this long
constexpr uint64_t kDrainBytes = 64ull << 20;  // or up to this much, then it is closed
constexpr size_t kReadChunk = 64 << 10;
// A reply's bytes the client has not taken yet wait in memory up to this much; the worker then
// returns to the pool and the poller sends the rest. Past it (a stream or a large file to a client
// that does not read) the worker waits for the client, up to the write timeout.
constexpr size_t kMaxPendingReply = 1 << 20;
constexpr int kReadsPerEvent = 4;

Clock::time_point After(double s) {
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string KiB(uint64_t bytes) { return std::to_string(bytes >> 10) + " KiB"; }

const char* Reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string ErrorResponse(int status, const std::string& code, const std::string& message) {
  const nlohmann::json j = {{"error", {{"code", code}, {"message", message}, {"type", code}, {"param", nullptr}}}};
  const std::string body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) +
                  "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nConnection: close\r\n";
  if (status == 503) r += "Retry-After: 1\r\n";
  return r + "\r\n" + body;
}

void Address(const sockaddr_storage& a, std::string* ip, int* port) {
  char b[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, b, sizeof b);
    *port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, b, sizeof b);
    *port = ntohs(v6->sin6_port);
  }
  *ip = b;
}

}  // namespace

RequestScan ScanRequest(std::string_view buf, const FrontLimits& lim, ScanState* st) {
  RequestScan out;
  auto fail = [&out](int status, const char* code, std::string message) {
    out.kind = RequestScan::Kind::kError;
    out.status = status;
    out.code = code;
    out.message = std::move(message);
    return out;
  };
  auto done = [&out](size_t length) {
    out.kind = RequestScan::Kind::kComplete;
    out.length = length;
    return out;
  };
  const std::string too_large = "the request body exceeds the server's limit of " + KiB(lim.max_body_bytes) +
                                (lim.max_body_flag.empty() ? "" : " (" + lim.max_body_flag + ")");
  // 1. The header, line by line.
  while (st->header_len == 0) {
    const size_t nl = buf.find('\n', st->line_start);
    if (nl == std::string_view::npos || nl + 1 > lim.max_header_bytes) {
      if (buf.size() > lim.max_header_bytes) {
        return fail(431, "headers_too_large", "the request line and headers exceed " + KiB(lim.max_header_bytes));
      }
      return out;
    }
    const std::string_view line = buf.substr(st->line_start, nl + 1 - st->line_start);
    const bool first = st->line_start == 0;
    st->line_start = nl + 1;
    if (first) {
      const std::string_view method = line.substr(0, line.find(' '));
      st->needs_body = method == "POST" || method == "PUT" || method == "PATCH";
      continue;
    }
    if (line == "\r\n") {
      st->header_len = nl + 1;
      break;
    }
    if (line.size() < 2 || line[line.size() - 2] != '\r') continue;  // httplib skips it too
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1, line.size() - colon - 3);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    if (IEquals(name, "Content-Length")) {
      if (st->has_length) return fail(400, "bad_http_request", "more than one Content-Length header");
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return fail(400, "bad_http_request", "Content-Length must be a decimal number of bytes");
      }
      st->has_length = true;
      st->content_length = std::stoull(std::string(value));
    } else if (IEquals(name, "Transfer-Encoding")) {
      if (st->chunked || !IEquals(value, "chunked")) {
        return fail(400, "bad_http_request", "the only Transfer-Encoding accepted is a single 'chunked'");
      }
      st->chunked = true;
    } else if (IEquals(name, "Expect") && IEquals(value, "100-continue")) {
      st->expect_continue = true;
    }
  }
  if (st->chunked && st->has_length) {  // RFC 9112 6.1: a sender must not; framing would be ambiguous
    return fail(400, "bad_http_request", "both Content-Length and Transfer-Encoding: chunked (send one)");
  }
  out.expect_continue = st->expect_continue;
  const size_t header = st->header_len;
  // 2. The body.
  if (!st->chunked) {
    if (!st->has_length) {
      if (st->needs_body) {
        return fail(400, "bad_http_request",
                    "malformed HTTP request (a POST needs a body with a Content-Length, e.g. {}, or "
                    "Transfer-Encoding: chunked)");
      }
      return done(header);
    }
    if (st->content_length > lim.max_body_bytes) return fail(413, "body_too_large", too_large);
    return buf.size() >= header + st->content_length ? done(header + st->content_length) : out;
  }
  if (st->chunk_pos == 0) st->chunk_pos = header;
  for (;;) {
    const size_t pos = st->chunk_pos;
    const size_t eol = buf.find("\r\n", pos);
    if (eol == std::string_view::npos || eol - pos > kMaxChunkLine) {
      if (buf.size() - pos > kMaxChunkLine) return fail(400, "bad_http_request", "a chunk-size line is too long");
      return out;
    }
    uint64_t size = 0;
    size_t i = pos;
    for (; i < eol && std::isxdigit(static_cast<unsigned char>(buf[i])); ++i) {
      if (i - pos >= 15) return fail(413, "body_too_large", too_large);
      size = size * 16 + static_cast<uint64_t>(std::isdigit(static_cast<unsigned char>(buf[i]))
                                                   ? buf[i] - '0'
                                                   : std::tolower(static_cast<unsigned char>(buf[i])) - 'a' + 10);
    }
    if (i == pos || (i < eol && buf[i] != ';' && buf[i] != ' ' && buf[i] != '\t')) {
      return fail(400, "bad_http_request", "malformed chunk-size line in a chunked body");
    }
    if (size == 0) {
      if (buf.size() < eol + 4) return out;
      if (buf.substr(eol + 2, 2) != "\r\n") return fail(400, "bad_http_request", "chunked trailers are not accepted");
      return done(eol + 4);
    }
    if (st->decoded + size > lim.max_body_bytes) return fail(413, "body_too_large", too_large);
    const size_t data_end = eol + 2 + size;
    if (buf.size() < data_end + 2) return out;
    if (buf.substr(data_end, 2) != "\r\n") return fail(400, "bad_http_request", "a chunk does not end with CRLF");
    st->decoded += size;
    st->chunk_pos = data_end + 2;
    // Framing itself is bounded too (one-byte chunks with long extensions).
    if (st->chunk_pos - header > 2 * lim.max_body_bytes + 65536) return fail(413, "body_too_large", too_large);
  }
}

Status BindAndListen(httplib::Server* http, const std::string& host, int port, int backlog, int* bound_port,
                     std::thread* thread) {
  auto listen_fd = std::make_shared<socket_t>(INVALID_SOCKET);
  http->set_socket_options([listen_fd](socket_t sock) {
    *listen_fd = sock;
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });
  if (port == 0) {
    *bound_port = http->bind_to_any_port(host.c_str());
    if (*bound_port < 0) return Status::Error("cannot listen on " + host);
  } else {
    if (!http->bind_to_port(host.c_str(), port)) {
      return Status::Error("cannot listen on " + host + ":" + std::to_string(port) +
                           " (in use, or not an address of this machine; --port 0 picks a free one)");
    }
    *bound_port = port;
  }
  // httplib listens with a backlog of 5, which resets a burst of connects; listen() again on the
  // bound socket raises it (Linux updates the backlog of a listening socket).
  if (*listen_fd != INVALID_SOCKET && ::listen(*listen_fd, std::max(1, backlog)) != 0) {
    return Status::Error(std::string("cannot set the listen backlog: ") + std::strerror(errno));
  }
  *thread = std::thread([http] { http->listen_after_bind(); });
  // httplib's stop() does nothing until the listening thread has marked the server running, so a
  // Stop() right after Start() would leave that thread in accept() for good (seen: a test whose
  // server was stopped at once hung its teardown). Return only once it runs.
  for (int i = 0; i < 10000 && !http->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!http->is_running()) return Status::Error("the HTTP listener on " + host + " did not start");
  return Status::Ok();
}

// One client connection. Owned by exactly one of: the accept path, the poller, the ready queue,
// a worker.
struct HttpFront::Conn {
  int fd = -1;
  std::string buf;               // received, not yet handled (starts at a request's first byte)
  ScanState scan;
  size_t request_len = 0;        // a complete request of this many bytes is at buf's front
  bool in_request = false;       // some of a request has arrived (its deadline runs)
  bool continue_sent = false;
  bool draining = false;         // refused: input is discarded until EOF or the deadline
  bool counted = false;          // counts in open_
  uint64_t drained = 0;
  Clock::time_point deadline;
  Clock::time_point complete_at;  // when the request at buf's front was complete (queued for a worker)
  std::string out;               // reply bytes not sent yet (from out_pos)
  size_t out_pos = 0;
  bool flushing = false;         // with the poller to send `out`; no request is read meanwhile
  bool close_after_flush = false;
  size_t pending() const { return out.size() - out_pos; }
  std::string remote_ip, local_ip;
  int remote_port = 0, local_port = 0;
};

// The bytes of one request for httplib to parse; replies go to the socket as far as it takes them
// without waiting, the rest to c->out (sent by the poller once the handler is done).
class HttpFront::ConnStream : public httplib::Stream {
 public:
  ConnStream(Conn* c, double write_timeout_s) : c_(c), write_timeout_s_(write_timeout_s) {}
  bool is_readable() const override { return pos_ < c_->request_len; }
  bool is_writable() const override {
    char b;  // the peer closing shows as end of file
    if (::recv(c_->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return false;
    if (c_->pending() < kMaxPendingReply) return true;
    pollfd p{c_->fd, POLLOUT, 0};
    return ::poll(&p, 1, static_cast<int>(write_timeout_s_ * 1e3)) > 0 && !(p.revents & (POLLERR | POLLHUP));
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, c_->request_len - pos_);
    std::memcpy(ptr, c_->buf.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (failed_) return -1;
    c_->out.append(ptr, size);
    if (!SendPending(c_)) failed_ = true;
    // Past the limit the client must read some before more is taken.
    const Clock::time_point deadline = After(write_timeout_s_);
    while (!failed_ && c_->pending() > kMaxPendingReply) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{c_->fd, POLLOUT, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0 || (p.revents & (POLLERR | POLLHUP)) || !SendPending(c_)) {
        failed_ = true;
      }
    }
    return failed_ ? -1 : static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_->remote_ip;
    port = c_->remote_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_->local_ip;
    port = c_->local_port;
  }
  // httplib answers 500 for a descriptor past FD_SETSIZE (its select()); this stream never selects.
  socket_t socket() const override { return c_->fd < FD_SETSIZE ? c_->fd : INVALID_SOCKET; }
  bool failed() const { return failed_; }

 private:
  Conn* c_;
  double write_timeout_s_;
  size_t pos_ = 0;
  bool failed_ = false;
};

bool HttpFront::SendPending(Conn* c) {
  while (c->pending() > 0) {
    const ssize_t n = ::send(c->fd, c->out.data() + c->out_pos, c->pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c->out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false;
  }
  if (c->pending() == 0) {
    c->out.clear();
    c->out_pos = 0;
  } else if (c->out_pos > (64u << 10) && c->out_pos > c->out.size() / 2) {
    c->out.erase(0, c->out_pos);
    c->out_pos = 0;
  }
  return true;
}

namespace {

// httplib's accept loop hands each socket to its task queue; HttpFront's handling of a new
// socket never blocks, so it runs right there.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

HttpFront::HttpFront(FrontLimits limits, Metrics* metrics) : limits_(limits), metrics_(metrics) {
  limits_.workers = std::max(1, limits_.workers);
  limits_.max_connections = std::max(1, limits_.max_connections);
  new_task_queue = [] { return new InlineQueue; };
  keep_alive_timeout_sec_ = static_cast<time_t>(std::max(1.0, limits_.idle_timeout_s));  // the Keep-Alive header
  keep_alive_max_count_ = 1000000;
  if (metrics_) {
    metrics_->DeclareGauge("tlr_http_connections", "Open HTTP connections");
    metrics_->DeclareCounter("tlr_http_refused_total",
                             "Connections and requests refused before a handler by reason (too_many_connections, "
                             "request_timeout, headers_too_large, body_too_large, bad_http_request)");
  }
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  poller_ = std::thread([this] { PollerLoop(); });
  for (int i = 0; i < limits_.workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

HttpFront::~HttpFront() {
  Close();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void HttpFront::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return;
    closed_ = true;
  }
  closing_ = true;
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  ready_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
  for (auto& t : workers_) t.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& c : incoming_) Destroy(std::move(c));
  for (auto& c : ready_) Destroy(std::move(c));
  incoming_.clear();
  ready_.clear();
}

void HttpFront::CountRefusal(const char* reason) {
  if (metrics_) metrics_->Add("tlr_http_refused_total", 1, {{"reason", reason}});
}

bool HttpFront::process_and_close_socket(socket_t sock) {
  auto c = std::make_unique<Conn>();
  c->fd = sock;
  ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK);
  int one = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&a), &len) == 0) Address(a, &c->remote_ip, &c->remote_port);
  len = sizeof a;
  if (getsockname(sock, reinterpret_cast<sockaddr*>(&a), &len) == 0) Address(a, &c->local_ip, &c->local_port);
  if (open_.load() >= limits_.max_connections) {
    Refuse(c.get(), 503, "too_many_connections",
           "the server has " + std::to_string(limits_.max_connections) +
               " connections open, its limit (--max-connections); try again shortly");
  } else {
    c->counted = true;
    const int n = ++open_;
    if (metrics_) metrics_->Set("tlr_http_connections", n);
    c->deadline = After(limits_.idle_timeout_s);
  }
  ToPoller(std::move(c));
  return true;
}

void HttpFront::ToPoller(ConnPtr c) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!closed_) {
      incoming_.push_back(std::move(c));
      c = nullptr;
    }
  }
  if (c) return Destroy(std::move(c));
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void HttpFront::Dispatch(ConnPtr c) {
  c->complete_at = Clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    ready_.push_back(std::move(c));
  }
  ready_cv_.notify_one();
}

void HttpFront::Destroy(ConnPtr c) {
  if (!c) return;
  ::close(c->fd);
  if (c->counted) {
    const int n = --open_;
    if (metrics_) metrics_->Set("tlr_http_connections", n);
  }
}

void HttpFront::Refuse(Conn* c, int status, const std::string& code, const std::string& message) {
  const std::string r = ErrorResponse(status, code, message);
  // Best effort: a short reply fits in the socket's send buffer.
  (void)!::send(c->fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(c->fd, SHUT_WR);
  c->draining = true;
  c->buf.clear();
  c->buf.shrink_to_fit();
  c->deadline = After(kDrainSeconds);
  CountRefusal(code.c_str());
}

bool HttpFront::ReadAvailable(Conn* c) {
  char tmp[kReadChunk];
  for (int i = 0; i < kReadsPerEvent; ++i) {
    const ssize_t n = ::recv(c->fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n > 0) {
      if (c->draining) {
        c->drained += static_cast<uint64_t>(n);
        if (c->drained > kDrainBytes) return false;
        continue;
      }
      if (!c->in_request) {
        c->in_request = true;
        c->deadline = After(limits_.request_timeout_s);
      }
      c->buf.append(tmp, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof tmp) return true;
      continue;
    }
    if (n == 0) return false;  // the client closed (a half-sent request is dropped)
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

bool HttpFront::CheckRequest(Conn* c) {
  const RequestScan s = ScanRequest(c->buf, limits_, &c->scan);
  if (s.kind == RequestScan::Kind::kComplete) {
    c->request_len = s.length;
    return true;
  }
  if (s.kind == RequestScan::Kind::kError) {
    Refuse(c, s.status, s.code, s.message);
    return false;
  }
  if (s.expect_continue && !c->continue_sent) {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    (void)!::send(c->fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    c->continue_sent = true;
  }
  return false;
}

void HttpFront::PollerLoop() {
  std::unordered_map<int, ConnPtr> parked;
  epoll_event events[256];
  Clock::time_point next_sweep = Clock::now();
  auto unpark = [&](int fd) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    auto it = parked.find(fd);
    ConnPtr c = std::move(it->second);
    parked.erase(it);
    return c;
  };
  while (!closing_) {
    const int n = epoll_wait(epoll_fd_, events, 256, 100);
    std::vector<ConnPtr> in;
    {
      std::lock_guard<std::mutex> l(mu_);
      in.swap(incoming_);
    }
    for (ConnPtr& c : in) {
      if (!c->flushing && !c->draining && !c->buf.empty() && CheckRequest(c.get())) {
        Dispatch(std::move(c));
        continue;
      }
      epoll_event ev{};
      ev.events = c->flushing ? EPOLLOUT : EPOLLIN | EPOLLRDHUP;
      ev.data.fd = c->fd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        Destroy(std::move(c));
        continue;
      }
      const int fd = c->fd;
      parked[fd] = std::move(c);
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof v);
        continue;
      }
      auto it = parked.find(fd);
      if (it == parked.end()) continue;
      Conn* c = it->second.get();
      if (c->flushing) {
        const size_t before = c->pending();
        if ((events[i].events & (EPOLLERR | EPOLLHUP)) || !SendPending(c)) {
          Destroy(unpark(fd));
          continue;
        }
        // A slow reader that takes some keeps its time: only a reply that cannot be sent for the
        // write timeout ends the connection.
        if (c->pending() < before) c->deadline = After(limits_.write_timeout_s);
        if (c->pending() == 0) {  // all sent: on to the next request, as a worker would
          ConnPtr done = unpark(fd);
          done->flushing = false;
          if (done->close_after_flush) {
            Destroy(std::move(done));
            continue;
          }
          done->deadline = After(done->in_request ? limits_.request_timeout_s : limits_.idle_timeout_s);
          {
            std::lock_guard<std::mutex> l(mu_);
            incoming_.push_back(std::move(done));  // registered for reading (or dispatched) next round
          }
          const uint64_t one = 1;
          (void)!::write(wake_fd_, &one, sizeof one);
        }
        continue;
      }
      if (!ReadAvailable(c)) {
        Destroy(unpark(fd));
      } else if (!c->draining && CheckRequest(c)) {
        Dispatch(unpark(fd));
      }
    }
    const Clock::time_point now = Clock::now();
    if (now < next_sweep) continue;
    next_sweep = now + std::chrono::milliseconds(100);
    std::vector<int> expired;
    for (auto& [fd, c] : parked) {
      if (now >= c->deadline) expired.push_back(fd);
    }
    for (int fd : expired) {
      Conn* c = parked[fd].get();
      if (c->in_request && !c->draining && !c->flushing) {
        Refuse(c, 408, "request_timeout",
               "the request did not arrive within " + std::to_string(static_cast<int>(limits_.request_timeout_s)) +
                   " s (--request-timeout)");
      } else {
        Destroy(unpark(fd));
      }
    }
  }
  for (auto& [fd, c] : parked) Destroy(std::move(c));
}

void HttpFront::WorkerLoop() {
  for (;;) {
    ConnPtr c;
    {
      std::unique_lock<std::mutex> l(mu_);
      ready_cv_.wait(l, [this] { return closed_ || !ready_.empty(); });
      if (closed_) return;
      c = std::move(ready_.front());
      ready_.pop_front();
    }
    Serve(std::move(c));
  }
}

namespace {
thread_local int t_client_fd = -1;  // the socket of the request this worker thread handles
thread_local std::chrono::steady_clock::time_point t_complete_at;  // when that request was complete
thread_local bool t_close_after_reply = false;  // CloseAfterReply() during that request
}  // namespace

double HttpFront::CurrentRequestAge() {
  if (t_client_fd < 0) return 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_complete_at).count();
}

bool HttpFront::CurrentClientGone() {
  if (t_client_fd < 0) return false;
  char byte;
  const ssize_t n = recv(t_client_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // a pipelined request is waiting: the client is there
  if (n == 0) return true;  // orderly close
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset or another error
}

void HttpFront::CloseAfterReply() { t_close_after_reply = true; }

void HttpFront::Serve(ConnPtr c) {
  for (;;) {
    ConnStream strm(c.get(), limits_.write_timeout_s);
    bool connection_closed = false;
    t_client_fd = c->fd;
    t_complete_at = c->complete_at;
    t_close_after_reply = false;
    const bool ok = process_request(strm, closing_.load(), connection_closed, nullptr);
    // httplib keeps an HTTP/1.0 connection whose client sent "Connection: Keep-Alive", even
    // after a reply that only the connection's end delimits.
    connection_closed = connection_closed || t_close_after_reply;
    t_close_after_reply = false;
    t_client_fd = -1;
    c->buf.erase(0, c->request_len);
    c->request_len = 0;
    c->scan = {};
    c->in_request = !c->buf.empty();
    c->continue_sent = false;
    if (!ok || strm.failed() || closing_) return Destroy(std::move(c));
    if (c->pending() > 0) {  // the client has not taken the whole reply yet: the poller sends the rest
      c->flushing = true;
      c->close_after_flush = connection_closed;
      c->deadline = After(limits_.write_timeout_s);
      return ToPoller(std::move(c));
    }
    if (connection_closed) return Destroy(std::move(c));
    c->deadline = After(c->in_request ? limits_.request_timeout_s : limits_.idle_timeout_s);
    // A pipelined request that is already complete is served right away.
    if (!c->in_request || !CheckRequest(c.get())) return ToPoller(std::move(c));
    c->complete_at = Clock::now();
  }
}

int BearerKeyIndex(const std::string& header, const std::vector<std::string>& keys) {
  const std::string prefix = "Bearer ";
  if (header.size() <= prefix.size() || header.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string given = header.substr(prefix.size());
  int index = -1;
  for (size_t j = 0; j < keys.size(); ++j) {
    const std::string& k = keys[j];
    unsigned diff = given.size() != k.size();
    for (size_t i = 0; i < k.size(); ++i) diff |= static_cast<unsigned>(k[i] ^ (i < given.size() ? given[i] : 0));
    if (diff == 0) index = static_cast<int>(j);
  }
  return index;
}

bool IsLoopbackHost(const std::string& host) {
  if (strcasecmp(host.c_str(), "localhost") == 0) return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace tlr
