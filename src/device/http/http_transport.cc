// HttpTransport: deadlines, retries and the simulated network over an HttpStack (see
// http_transport.h).
#include "device/http/http_transport.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "device/http/socket_http.h"

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

namespace {

Expected<std::shared_ptr<HttpStack>> MakeStack(const HttpOptions& opts) {
  if (opts.stack) return opts.stack;
  TLR_ASSIGN_OR_RETURN(const ServerUrl url, ParseServerUrl(opts.url));
#if !TLR_HAS_SOCKETS
  return Status::Error("this build of TLR has no HTTP client of its own (TLR_SOCKETS=OFF): give the LLM a transport "
                       "hook (tlr_llm_params.http_hook) to carry its calls to " + url.Origin());
#endif
  TlsOptions tls;
  tls.verify = opts.verify_tls;
  tls.ca_file = opts.ca_file;
  TLR_ASSIGN_OR_RETURN(std::unique_ptr<SocketHttp> s, SocketHttp::Create(url, tls));
  return std::shared_ptr<HttpStack>(std::move(s));
}

}  // namespace

HttpTransport::HttpTransport(const HttpOptions& opts) : opts_(opts), rng_(opts.seed) {
  if (auto u = ParseServerUrl(opts.url); u.ok()) {
    origin_ = u->Origin();
    prefix_ = u->prefix;
  } else {
    origin_ = opts.url;  // Validate refuses it; requests fail
  }
  if (auto s = MakeStack(opts); s.ok()) {
    stack_ = std::move(s).value();
  } else {
    stack_error_ = s.status().message();
  }
}

HttpTransport::~HttpTransport() = default;

Status HttpTransport::Validate(const HttpOptions& opts) {
  TLR_ASSIGN_OR_RETURN(const ServerUrl url, ParseServerUrl(opts.url));
  for (char c : opts.api_key) {  // it goes into a header line: CR/LF would add headers of its own
    if (static_cast<unsigned char>(c) < ' ' || c == 0x7f) {
      return Status::Error("the API key contains a control character (a line break?): give the key alone");
    }
  }
  if (opts.max_reply_bytes == 0) return Status::Error("the reply size limit must be positive");
  if (opts.timeout_s <= 0 || opts.retries < 0 || opts.sim_rtt_s < 0 || opts.sim_jitter_s < 0 || opts.backoff_s < 0) {
    return Status::Error("timeouts, retries and simulated delays must not be negative");
  }
  return MakeStack(opts).status();
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

HttpExchange HttpTransport::NewExchange(const std::string& method, const std::string& path,
                                        const std::string& body) const {
  HttpExchange x;
  x.method = method;
  x.url = origin_ + prefix_ + path;
  x.body = body;
  x.headers.emplace_back("User-Agent", "tlr");
  if (!opts_.api_key.empty()) x.headers.emplace_back("Authorization", "Bearer " + opts_.api_key);
  return x;
}

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
  HttpExchange x = NewExchange(method, path, body);
  if (method == "POST") {
    x.headers.emplace_back("Content-Type", "application/json");
    // How long this request may take: servers that honour it (tlr serve's OpenAI endpoints)
    // refuse at once what they cannot answer in that time.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
    x.headers.emplace_back("X-TLR-Timeout-Ms", std::to_string(std::max<int64_t>(1, left)));
  }
  if (!stack_) {
    h.error = stack_error_;
  } else if (Clock::now() >= *deadline) {
    h.timed_out = true;
  } else {
    h = stack_->Exchange(x, *deadline, call, opts_.max_reply_bytes);
    h.attempted = true;
    if (!h.sent && !h.cancelled && Clock::now() >= *deadline) h.timed_out = true;
  }
  if (h.sent) {
    h.retry_after_s = ParseRetryAfter(h.Header("retry-after-ms"), h.Header("retry-after"));
  } else if (h.timed_out) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.3g", opts_.timeout_s);
    h.error = std::string("no complete reply within the ") + secs + " s timeout";
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
  bool attempted = false;  // by any attempt
  for (int attempt = 0; attempt <= opts_.retries; ++attempt) {
    if (attempt > 0) {
      if (h.timed_out || h.too_large || Clock::now() + Us(wait) >= *deadline) break;
      {
        std::lock_guard<std::mutex> l(mu_);
        ++retries_;
      }
      if (!Pause(call, wait)) {
        h.cancelled = true;
        break;
      }
      wait *= 2;
    }
    h = Request("POST", path, body, call, deadline);
    attempted = attempted || h.attempted;
    if (h.cancelled) break;
    if (h.sent && h.status != 500 && h.status != 502 && h.status != 504) break;
  }
  h.attempted = attempted;
  return h;
}

void HttpTransport::DeleteQuietly(const std::string& path) {
  if (!stack_) return;
  stack_->Exchange(NewExchange("DELETE", path, ""), Clock::now() + Us(0.5), nullptr, 1 << 16);
}

}  // namespace tlr
