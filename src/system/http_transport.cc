// HttpTransport: keep-alive connections, retries and the simulated network (see http_transport.h).
#include "system/http_transport.h"

#include <httplib.h>

#include <chrono>
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

HttpTransport::HttpTransport(const HttpOptions& opts) : opts_(opts), rng_(opts.seed) {}

HttpTransport::~HttpTransport() = default;

Status HttpTransport::Validate(const HttpOptions& opts) {
  if (opts.url.rfind("http://", 0) != 0 && opts.url.rfind("https://", 0) != 0) {
    return Status::Error("server URL '" + opts.url + "' must start with http:// or https://");
  }
  if (opts.timeout_s <= 0 || opts.retries < 0 || opts.sim_rtt_s < 0 || opts.sim_jitter_s < 0 || opts.backoff_s < 0) {
    return Status::Error("timeouts, retries and simulated delays must not be negative");
  }
  httplib::Client probe(opts.url);
  if (!probe.is_valid()) return Status::Error("cannot use server URL '" + opts.url + "'");
  return Status::Ok();
}

std::unique_ptr<httplib::Client> HttpTransport::NewClient(double timeout_s) const {
  auto c = std::make_unique<httplib::Client>(opts_.url);
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

HttpResult HttpTransport::Request(const std::string& method, const std::string& path, const std::string& body,
                                  LlmCall* call) {
  HttpResult h;
  const double d = DrawDelay();
  if (!Pause(call, d / 2)) {
    h.cancelled = true;
    h.error = "cancelled";
    return h;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    ++http_requests_;
    sim_delay_s_ += d;
  }
  std::unique_ptr<httplib::Client> c = Borrow();
  httplib::Result res = method == "GET" ? c->Get(path.c_str()) : c->Post(path.c_str(), body, "application/json");
  if (!res) {
    h.error = httplib::to_string(res.error());
    h.tls_failure = res.error() == httplib::Error::SSLServerVerification ||
                    (res.error() == httplib::Error::SSLConnection && opts_.url.rfind("https://", 0) == 0);
    // A failed connection is not reused.
  } else {
    h.sent = true;
    h.status = res->status;
    h.body = std::move(res->body);
    Return(std::move(c));
  }
  Pause(call, d / 2);  // the answer's way back (cut short for a cancelled call: nobody reads it)
  return h;
}

HttpResult HttpTransport::PostWithRetries(const std::string& path, const std::string& body, LlmCall* call) {
  double wait = opts_.backoff_s;
  HttpResult h;
  for (int attempt = 0; attempt <= opts_.retries; ++attempt) {
    if (attempt > 0) {
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
    h = Request("POST", path, body, call);
    if (h.cancelled) return h;
    if (h.sent && h.status != 500 && h.status != 502 && h.status != 504) return h;
  }
  return h;
}

void HttpTransport::DeleteQuietly(const std::string& path) {
  std::unique_ptr<httplib::Client> c = NewClient(0.5);
  c->Delete(path.c_str());
}

}  // namespace tlr
