// SocketHttp: TLR's built-in HTTP/1.1 client (see socket_http.h).
#include "device/http/socket_http.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device/llm/llm_backend.h"
#include "util/utf8.h"

#if TLR_HAS_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0  // Apple platforms: ConnectTcp sets SO_NOSIGPIPE instead
#endif

namespace tlr {

bool BuiltWithTls() { return TLR_HAS_TLS != 0; }

std::string NoTlsMessage(const std::string& url) {
  return "'" + url + "' needs TLS, and this build of TLR has none (configured with -DTLR_TLS=off): use an http:// "
         "server, build with -DTLR_TLS=openssl, or carry the calls through the app's own HTTP stack (tlr_http_hook)";
}

namespace {

using Clock = std::chrono::steady_clock;
enum class Io { kOk, kTimeout, kCancelled, kBroken };

// Waits until the socket is ready for `events`, in slices of at most 50 ms so that a cancelled
// call is seen in time.
Io Wait(int fd, short events, Clock::time_point deadline, LlmCall* call) {
  for (;;) {
    if (call && call->cancelled()) return Io::kCancelled;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Io::kTimeout;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(50, left)));
    if (n > 0) return Io::kOk;  // the next I/O call tells what happened
    if (n < 0 && errno != EINTR) return Io::kBroken;
  }
}

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

bool ParseSize(const std::string& s, int base, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && (c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
    else return false;
    v = v * base + d;
  }
  *out = v;
  return true;
}

}  // namespace

#if TLR_HAS_TLS
struct SocketHttp::Tls {
  SSL_CTX* ctx = nullptr;
  bool verify = true;
  ~Tls() { SSL_CTX_free(ctx); }
};

// OpenSSL writes with write(2), which raises SIGPIPE on a connection the peer closed and would
// end an app that has not ignored it (MSG_NOSIGNAL cannot be passed through). Around each TLS
// call the signal is blocked for this thread, and one it raised is taken off again. The
// thread's OpenSSL error queue is emptied first, as SSL_get_error needs.
class TlsCallGuard {
 public:
  TlsCallGuard() {
    ERR_clear_error();
#ifndef SO_NOSIGPIPE
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
#endif
  }
  ~TlsCallGuard() {
#ifndef SO_NOSIGPIPE
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
#endif
  }

 private:
#ifndef SO_NOSIGPIPE
  sigset_t old_;
  bool was_pending_ = false;
#endif
};

static std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}
#else
struct SocketHttp::Tls {};
#endif

struct SocketHttp::Conn {
  int fd = -1;
  bool reused = false;
#if TLR_HAS_TLS
  SSL* ssl = nullptr;
#endif
  ~Conn() {
#if TLR_HAS_TLS
    if (ssl) SSL_free(ssl);
#endif
    if (fd >= 0) close(fd);
  }

  Io Write(const char* p, size_t n, Clock::time_point deadline, LlmCall* call) {
    while (n > 0) {
#if TLR_HAS_TLS
      if (ssl) {
        int w, err = 0;
        {
          TlsCallGuard guard;
          w = SSL_write(ssl, p, static_cast<int>(std::min<size_t>(n, 1 << 20)));
          if (w <= 0) err = SSL_get_error(ssl, w);
        }
        if (w > 0) {
          p += w, n -= static_cast<size_t>(w);
          continue;
        }
        if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) return Io::kBroken;
        if (Io r = Wait(fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, call); r != Io::kOk) return r;
        continue;
      }
#endif
      const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
      if (w > 0) {
        p += w, n -= static_cast<size_t>(w);
      } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (Io r = Wait(fd, POLLOUT, deadline, call); r != Io::kOk) return r;
      } else {
        return Io::kBroken;
      }
    }
    return Io::kOk;
  }

  // Some bytes into `out` (appended); *eof when the server closed the connection.
  Io Read(std::string* out, bool* eof, Clock::time_point deadline, LlmCall* call) {
    char buf[16384];
    *eof = false;
    for (;;) {
#if TLR_HAS_TLS
      if (ssl) {
        int r, err = 0;
        unsigned long queued = 0;
        int sys_errno = 0;
        {
          TlsCallGuard guard;
          r = SSL_read(ssl, buf, sizeof buf);
          if (r <= 0) {
            err = SSL_get_error(ssl, r);
            sys_errno = errno;
            queued = ERR_peek_error();
          }
        }
        if (r > 0) {
          out->append(buf, static_cast<size_t>(r));
          return Io::kOk;
        }
        // A clean close, or a close without close_notify (no error queued, no errno); a reset
        // (errno set) breaks the reply instead of ending it.
        if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && queued == 0 && sys_errno == 0)) {
          *eof = true;
          return Io::kOk;
        }
        if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) return Io::kBroken;
        if (Io w = Wait(fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, call); w != Io::kOk) return w;
        continue;
      }
#endif
      const ssize_t r = recv(fd, buf, sizeof buf, 0);
      if (r > 0) {
        out->append(buf, static_cast<size_t>(r));
        return Io::kOk;
      }
      if (r == 0) {
        *eof = true;
        return Io::kOk;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Io::kBroken;
      if (Io w = Wait(fd, POLLIN, deadline, call); w != Io::kOk) return w;
    }
  }

  // An idle keep-alive connection the server has closed (or sent something on) is not reusable.
  bool StillOpen() const {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }
};

Expected<std::unique_ptr<SocketHttp>> SocketHttp::Create(const ServerUrl& origin, const TlsOptions& tls) {
  std::unique_ptr<SocketHttp> s(new SocketHttp());
  s->origin_ = origin;
  if (origin.scheme != "https") return s;
#if TLR_HAS_TLS
  s->tls_ = std::make_unique<Tls>();
  s->tls_->verify = tls.verify;
  s->tls_->ctx = SSL_CTX_new(TLS_client_method());
  if (!s->tls_->ctx) return Status::Error("cannot set up TLS: " + OpenSslError());
  SSL_CTX_set_min_proto_version(s->tls_->ctx, TLS1_2_VERSION);
  // A server that closes without close_notify ends a read-until-close body, as browsers take it.
  SSL_CTX_set_options(s->tls_->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  if (tls.verify) {
    SSL_CTX_set_verify(s->tls_->ctx, SSL_VERIFY_PEER, nullptr);
    const int ok = tls.ca_file.empty() ? SSL_CTX_set_default_verify_paths(s->tls_->ctx)
                                       : SSL_CTX_load_verify_locations(s->tls_->ctx, tls.ca_file.c_str(), nullptr);
    if (ok != 1) {
      return Status::Error(tls.ca_file.empty() ? "cannot load the system's CA certificates: " + OpenSslError()
                                               : "cannot load the CA file '" + tls.ca_file + "': " + OpenSslError());
    }
  }
  return s;
#else
  (void)tls;
  return Status::Error(NoTlsMessage(origin.ToString()));
#endif
}

SocketHttp::~SocketHttp() = default;

std::unique_ptr<SocketHttp::Conn> SocketHttp::Borrow() {
  std::lock_guard<std::mutex> l(mu_);
  while (!idle_.empty()) {
    std::unique_ptr<Conn> c = std::move(idle_.back());
    idle_.pop_back();
    if (c->StillOpen()) {
      c->reused = true;
      return c;
    }
  }
  return nullptr;
}

void SocketHttp::Return(std::unique_ptr<Conn> c) {
  std::lock_guard<std::mutex> l(mu_);
  if (idle_.size() < 64) idle_.push_back(std::move(c));
}

HttpResult SocketHttp::Exchange(const HttpExchange& x, Clock::time_point deadline, LlmCall* call,
                                uint64_t max_reply_bytes) {
  HttpResult h;
  const std::string origin = origin_.Origin();
  if (x.url.compare(0, origin.size(), origin) != 0 ||
      (x.url.size() > origin.size() && x.url[origin.size()] != '/')) {
    h.error = "the request's URL '" + x.url + "' is not on " + origin;
    return h;
  }
  const std::string path = x.url.size() > origin.size() ? x.url.substr(origin.size()) : "/";
  const bool default_port = (origin_.scheme == "http" && origin_.port == 80) || (origin_.scheme == "https" && origin_.port == 443);
  std::string req = x.method + " " + path + " HTTP/1.1\r\nHost: " + origin_.host +
                    (default_port ? "" : ":" + std::to_string(origin_.port)) + "\r\n";
  for (const auto& [k, v] : x.headers) req += k + ": " + v + "\r\n";
  if (!x.body.empty() || x.method == "POST" || x.method == "PUT" || x.method == "DELETE") {
    req += "Content-Length: " + std::to_string(x.body.size()) + "\r\n";
  }
  req += "\r\n";
  req += x.body;
  const bool head = x.method == "HEAD";

  // A reused keep-alive connection the server closed meanwhile fails before any reply byte:
  // then once more on a fresh connection.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<Conn> c = attempt == 0 ? Borrow() : nullptr;
    if (!c) {
      c = std::make_unique<Conn>();
      std::string why;
      c->fd = ConnectTcp(origin_, deadline, &why, [call] { return call && call->cancelled(); });
      if (c->fd < 0) {
        h.cancelled = call && call->cancelled();
        h.timed_out = !h.cancelled && Clock::now() >= deadline;
        h.error = h.cancelled ? "cancelled" : "could not connect: " + why;
        return h;
      }
#if TLR_HAS_TLS
      if (tls_) {
        c->ssl = SSL_new(tls_->ctx);
        if (!c->ssl) {
          h.error = "cannot set up TLS: " + OpenSslError();
          return h;
        }
        SSL_set_fd(c->ssl, c->fd);
        std::string host = origin_.host;
        const bool ip = host.front() == '[' || host.find_first_not_of("0123456789.") == std::string::npos;
        if (host.front() == '[') host = host.substr(1, host.size() - 2);
        if (!ip) SSL_set_tlsext_host_name(c->ssl, host.c_str());
        if (tls_->verify) {
          X509_VERIFY_PARAM* param = SSL_get0_param(c->ssl);
          if (ip) X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
          else SSL_set1_host(c->ssl, host.c_str());
        }
        for (;;) {
          int r, err = 0;
          {
            TlsCallGuard guard;
            r = SSL_connect(c->ssl);
            if (r != 1) err = SSL_get_error(c->ssl, r);
          }
          if (r == 1) break;
          Io w = Io::kBroken;
          if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
            w = Wait(c->fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, call);
            if (w == Io::kOk) continue;
          }
          h.cancelled = w == Io::kCancelled;
          h.timed_out = w == Io::kTimeout;
          h.tls_failure = w == Io::kBroken;
          const long verify = SSL_get_verify_result(c->ssl);
          h.error = h.cancelled ? "cancelled"
                    : h.timed_out ? "the TLS handshake did not finish in time"
                    : verify != X509_V_OK ? std::string("the server's TLS certificate did not verify (") +
                                                X509_verify_cert_error_string(verify) + ")"
                                          : "the TLS handshake failed (" + OpenSslError() + ")";
          ERR_clear_error();
          return h;
        }
      }
#endif
    }
    bool nothing = false;
    h = Attempt(c.get(), req, head, deadline, call, max_reply_bytes, &nothing);
    if (h.sent) {
      if (c->fd >= 0) Return(std::move(c));  // kept alive
      return h;
    }
    if (!(c->reused && nothing) || h.cancelled || h.timed_out) return h;
  }
  return h;
}

HttpResult SocketHttp::Attempt(Conn* c, const std::string& request, bool head, Clock::time_point deadline,
                               LlmCall* call, uint64_t max_reply_bytes, bool* nothing_received) {
  HttpResult h;
  *nothing_received = true;
  const auto fail = [&](Io io, const std::string& broken_what) {
    h.timed_out = io == Io::kTimeout;
    h.cancelled = io == Io::kCancelled;
    h.error = h.cancelled ? "cancelled" : h.timed_out ? "no complete reply in time" : broken_what;
    return h;
  };
  if (Io io = c->Write(request.data(), request.size(), deadline, call); io != Io::kOk) {
    return fail(io, "the connection broke while sending the request");
  }
  std::string in;
  bool eof = false;
  const auto more = [&]() {
    if (eof) return Io::kBroken;
    const Io io = c->Read(&in, &eof, deadline, call);
    if (!in.empty()) *nothing_received = false;
    return io == Io::kOk && eof ? Io::kBroken : io;
  };
  const std::string broke = "the connection broke before a complete reply";
  // Status line and headers (interim 1xx replies skipped).
  bool keep_alive = true;
  for (;;) {
    size_t end;
    while ((end = in.find("\r\n\r\n")) == std::string::npos) {
      if (in.size() > 65536) return fail(Io::kBroken, "the reply's headers are longer than 64 KiB");
      if (Io io = more(); io != Io::kOk) return fail(io, broke);
    }
    const std::string head_block = in.substr(0, end);
    in.erase(0, end + 4);
    const size_t line_end = head_block.find("\r\n");
    const std::string status_line = head_block.substr(0, line_end);
    uint64_t status = 0;
    if (status_line.compare(0, 7, "HTTP/1.") != 0 || status_line.size() < 12 ||
        !ParseSize(status_line.substr(9, 3), 10, &status)) {
      return fail(Io::kBroken, "the reply is not HTTP (status line '" + status_line.substr(0, 40) + "')");
    }
    h.status = static_cast<int>(status);
    keep_alive = status_line[7] == '1';
    h.headers.clear();
    size_t pos = line_end == std::string::npos ? head_block.size() : line_end + 2;
    while (pos < head_block.size()) {
      size_t e = head_block.find("\r\n", pos);
      if (e == std::string::npos) e = head_block.size();
      const std::string line = head_block.substr(pos, e - pos);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) h.AddHeader(Trim(line.substr(0, colon)), Trim(line.substr(colon + 1)));
      pos = e + 2;
    }
    if (h.status == 101) return fail(Io::kBroken, "the server switched protocols (101), which TLR does not ask for");
    if (h.status >= 100 && h.status < 200) continue;
    break;
  }
  const std::string connection = AsciiLower(h.Header("connection"));
  if (connection == "close") keep_alive = false;
  if (connection == "keep-alive") keep_alive = true;
  std::string body;
  const auto too_large = [&] {
    h.too_large = true;
    h.error = "the reply is larger than the " + std::to_string(max_reply_bytes >> 10) + " KiB limit";
    return h;
  };
  if (head || h.status == 204 || h.status == 304) {
    // no body
  } else if (AsciiLower(h.Header("transfer-encoding")).find("chunked") != std::string::npos) {
    for (;;) {
      size_t e;
      while ((e = in.find("\r\n")) == std::string::npos) {
        if (in.size() > 4096) return fail(Io::kBroken, "a chunk header of the reply is malformed");
        if (Io io = more(); io != Io::kOk) return fail(io, broke);
      }
      std::string size_text = in.substr(0, e);
      size_text = Trim(size_text.substr(0, size_text.find(';')));
      uint64_t n = 0;
      if (!ParseSize(size_text, 16, &n)) return fail(Io::kBroken, "a chunk header of the reply is malformed");
      in.erase(0, e + 2);
      if (n == 0) {  // trailers up to an empty line
        while (true) {
          while ((e = in.find("\r\n")) == std::string::npos) {
            if (in.size() > 65536) return fail(Io::kBroken, "the reply's trailers are longer than 64 KiB");
            if (Io io = more(); io != Io::kOk) return fail(io, broke);
          }
          const bool last = e == 0;
          in.erase(0, e + 2);
          if (last) break;
        }
        break;
      }
      if (n > max_reply_bytes - body.size()) return too_large();  // (body.size() <= max: no overflow)
      while (in.size() < n + 2) {
        if (Io io = more(); io != Io::kOk) return fail(io, broke);
      }
      if (in.compare(n, 2, "\r\n") != 0) return fail(Io::kBroken, "a chunk of the reply is malformed");
      body.append(in, 0, n);
      in.erase(0, n + 2);
    }
  } else if (const std::string cl = h.Header("content-length"); !cl.empty()) {
    uint64_t n = 0;
    if (!ParseSize(cl, 10, &n)) return fail(Io::kBroken, "the reply's Content-Length '" + cl + "' is not a number");
    if (n > max_reply_bytes) return too_large();
    while (in.size() < n) {
      if (Io io = more(); io != Io::kOk) return fail(io, broke);
    }
    body = in.substr(0, n);
    in.erase(0, n);
  } else {  // the body runs until the server closes
    keep_alive = false;
    while (!eof) {
      if (in.size() > max_reply_bytes) return too_large();
      const Io io = c->Read(&in, &eof, deadline, call);
      if (io != Io::kOk) return fail(io, broke);
    }
    if (in.size() > max_reply_bytes) return too_large();
    body = std::move(in);
    in.clear();
  }
  if (!keep_alive || !in.empty()) {  // leftover bytes: the connection's state is unknown
    close(c->fd);
    c->fd = -1;
  }
  h.body = std::move(body);
  h.sent = true;
  return h;
}

}  // namespace tlr
