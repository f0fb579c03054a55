// HttpTransport: keep-alive connections, retries and the simulated network (see http_transport.h).
#include "device/http_transport.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <thread>

namespace tlr {

namespace {

std::chrono::microseconds Us(double s) { return std::chrono::microseconds(static_cast<int64_t>(s * 1e6)); }

// Sleeps, or waits on the call so that a cancellation ends the wait; false when cancelled.
bool Pause(LlmCall* call, double seconds) {
  if (seconds <= 0) return !(call && call->cancelled());
  if (call) return call->SleepUnlessCancelled(seconds);
  std::this_thread::sleep_for(Us(seconds));
  return true;
}

}  // namespace

// One thread that shuts down the socket of a request whose deadline passed: httplib's own
// timeouts bound each read and write, not the request, and Client::stop() is the one call
// that is safe from another thread while a request runs.
class HttpTransport::Watchdog {
 public:
  Watchdog() : thread_([this] { Run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  uint64_t Arm(httplib::Client* c, Clock::time_point deadline) {
    std::lock_guard<std::mutex> l(mu_);
    const uint64_t id = next_++;
    armed_.emplace(id, Entry{c, deadline});
    cv_.notify_all();
    return id;
  }
  // True when the deadline stopped the request. After Disarm the client is never touched.
  bool Disarm(uint64_t id) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = armed_.find(id);
    const bool fired = it->second.fired;
    armed_.erase(it);
    return fired;
  }

 private:
  struct Entry {
    httplib::Client* client;
    Clock::time_point deadline;
    bool fired = false;
  };
  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    while (!quit_) {
      Clock::time_point next = Clock::time_point::max();
      const auto now = Clock::now();
      for (auto& [id, e] : armed_) {
        if (e.fired) continue;
        if (e.deadline <= now) {
          e.client->stop();
          e.fired = true;
        } else {
          next = std::min(next, e.deadline);
        }
      }
      if (next == Clock::time_point::max()) cv_.wait(l);
      else cv_.wait_until(l, next);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> armed_;
  uint64_t next_ = 0;
  bool quit_ = false;
  std::thread thread_;
};

// What a failed request met, in words (httplib's own names are single words: "Connection").
static std::string DescribeHttpError(httplib::Error err) {
  switch (err) {
    case httplib::Error::Connection: return "could not connect";
    case httplib::Error::ConnectionTimeout: return "no reply to the connection attempt";
    case httplib::Error::Read: return "the connection broke before a complete reply";
    case httplib::Error::Write: return "the connection broke while sending the request";
    case httplib::Error::SSLConnection: return "the TLS handshake failed";
    case httplib::Error::SSLLoadingCerts: return "the CA certificates could not be loaded";
    case httplib::Error::SSLServerVerification: return "the server's TLS certificate did not verify";
    case httplib::Error::Canceled: return "the request was stopped";
    default: return "the request failed (" + httplib::to_string(err) + ")";
  }
}

HttpTransport::HttpTransport(const HttpOptions& opts)
    : opts_(opts), rng_(opts.seed), watchdog_(std::make_unique<Watchdog>()) {
  if (auto u = ParseServerUrl(opts.url); u.ok()) {
    origin_ = u->Origin();
    prefix_ = u->prefix;
  } else {
    origin_ = opts.url;  // Validate refuses it; requests fail
  }
}

HttpTransport::~HttpTransport() = default;

Status HttpTransport::Validate(const HttpOptions& opts) {
  TLR_ASSIGN_OR_RETURN(const ServerUrl url, ParseServerUrl(opts.url));
  if (opts.max_reply_bytes == 0) return Status::Error("the reply size limit must be positive");
  if (opts.timeout_s <= 0 || opts.retries < 0 || opts.sim_rtt_s < 0 || opts.sim_jitter_s < 0 || opts.backoff_s < 0) {
    return Status::Error("timeouts, retries and simulated delays must not be negative");
  }
  httplib::Client probe(url.Origin());
  if (!probe.is_valid()) return Status::Error("cannot use server URL '" + opts.url + "'");
  return Status::Ok();
}

std::unique_ptr<httplib::Client> HttpTransport::NewClient(double timeout_s) const {
  auto c = std::make_unique<httplib::Client>(origin_);
  c->set_connection_timeout(Us(timeout_s));
  c->set_read_timeout(Us(timeout_s));
  c->set_write_timeout(Us(timeout_s));
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  if (!opts_.api_key.empty()) c->set_bearer_token_auth(opts_.api_key);
  c->enable_server_certificate_verification(opts_.verify_tls);
  if (!opts_.ca_file.empty()) c->set_ca_cert_path(opts_.ca_file.c_str());
  return c;
}

std::unique_ptr<httplib::Client> HttpTransport::Borrow() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return NewClient(opts_.timeout_s);
}

void HttpTransport::Return(std::unique_ptr<httplib::Client> c) {
  std::lock_guard<std::mutex> l(mu_);
  if (idle_.size() < 64) idle_.push_back(std::move(c));
}

double HttpTransport::DrawDelay() {
  if (opts_.sim_rtt_s <= 0 && opts_.sim_jitter_s <= 0) return 0;
  std::lock_guard<std::mutex> l(mu_);
  std::uniform_real_distribution<double> u(-opts_.sim_jitter_s, opts_.sim_jitter_s);
  return std::max(0.0, opts_.sim_rtt_s + u(rng_));
}

int64_t HttpTransport::http_requests() const {
  std::lock_guard<std::mutex> l(mu_);
  return http_requests_;
}

int64_t HttpTransport::retries() const {
  std::lock_guard<std::mutex> l(mu_);
  return retries_;
}

double HttpTransport::sim_delay_s() const {
  std::lock_guard<std::mutex> l(mu_);
  return sim_delay_s_;
}

double ParseRetryAfter(const std::string& retry_after_ms, const std::string& retry_after) {
  const auto number = [](const std::string& v, double* out) {
    if (v.empty() || v.size() > 16) return false;
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (end != v.c_str() + v.size() || !(x >= 0) || x > 1e9) return false;
    *out = x;
    return true;
  };
  double x = 0;
  if (number(retry_after_ms, &x)) return x / 1e3;
  if (number(retry_after, &x)) return x;
  return -1;
}

HttpTransport::Clock::time_point HttpTransport::Deadline() const { return Clock::now() + Us(opts_.timeout_s); }

HttpResult HttpTransport::Request(const std::string& method, const std::string& path, const std::string& body,
                                  LlmCall* call, Clock::time_point* deadline) {
  HttpResult h;
  Clock::time_point own_deadline = Deadline();
  if (!deadline) deadline = &own_deadline;
  const double d = DrawDelay();
  if (!Pause(call, d / 2)) {
    h.cancelled = true;
    h.error = "cancelled";
    return h;
  }
  *deadline += Us(d);  // the simulated delays do not count against the deadline
  {
    std::lock_guard<std::mutex> l(mu_);
    ++http_requests_;
    sim_delay_s_ += d;
  }
  httplib::Request req;
  req.method = method;
  req.path = prefix_ + path;
  if (method == "POST") {
    req.body = body;
    req.set_header("Content-Type", "application/json");
    // How long this request may take: servers that honour it (tlr serve's OpenAI endpoints)
    // refuse at once what they cannot answer in that time.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
    req.set_header("X-TLR-Timeout-Ms", std::to_string(std::max<int64_t>(1, left)));
  }
  // The body is collected here rather than by httplib, so that a reply over the cap stops
  // being read (httplib would take any length the server announces or sends).
  std::string reply;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (reply.size() + n > opts_.max_reply_bytes) {
      h.too_large = true;
      return false;
    }
    reply.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  std::unique_ptr<httplib::Client> c = Borrow();
  bool ok = false;
  if (Clock::now() < *deadline) {
    const uint64_t armed = watchdog_->Arm(c.get(), *deadline);
    ok = c->send(req, res, err);
    h.timed_out = watchdog_->Disarm(armed);
  } else {
    h.timed_out = true;
  }
  if (!ok || h.timed_out || h.too_large) {
    if (h.timed_out) {
      h.error = "no complete reply within the " + std::to_string(static_cast<int>(std::ceil(opts_.timeout_s))) +
                " s timeout";
    } else if (h.too_large) {
      h.error = "the reply is larger than the " + std::to_string(opts_.max_reply_bytes >> 10) + " KiB limit";
    } else {
      h.error = DescribeHttpError(err);
    }
    h.tls_failure = err == httplib::Error::SSLServerVerification ||
                    (err == httplib::Error::SSLConnection && opts_.url.rfind("https://", 0) == 0);
    // A failed connection is not reused.
  } else {
    h.sent = true;
    h.status = res.status;
    h.body = std::move(reply);
    h.retry_after_s = ParseRetryAfter(res.get_header_value("retry-after-ms"), res.get_header_value("Retry-After"));
    Return(std::move(c));
  }
  Pause(call, d / 2);  // the answer's way back (cut short for a cancelled call: nobody reads it)
  return h;
}

HttpResult HttpTransport::PostWithRetries(const std::string& path, const std::string& body, LlmCall* call,
                                          Clock::time_point* deadline) {
  Clock::time_point own_deadline = Deadline();
  if (!deadline) deadline = &own_deadline;
  double wait = opts_.backoff_s;
  HttpResult h;
  for (int attempt = 0; attempt <= opts_.retries; ++attempt) {
    if (attempt > 0) {
      if (h.timed_out || h.too_large || Clock::now() + Us(wait) >= *deadline) return h;
      {
        std::lock_guard<std::mutex> l(mu_);
        ++retries_;
      }
      if (!Pause(call, wait)) {
        h.cancelled = true;
        return h;
      }
      wait *= 2;
    }
    h = Request("POST", path, body, call, deadline);
    if (h.cancelled) return h;
    if (h.sent && h.status != 500 && h.status != 502 && h.status != 504) return h;
  }
  return h;
}

void HttpTransport::DeleteQuietly(const std::string& path) {
  std::unique_ptr<httplib::Client> c = NewClient(0.5);
  c->Delete((prefix_ + path).c_str(), {{"Content-Length", "0"}});  // without it a server reads until the close
}

}  // namespace tlr
