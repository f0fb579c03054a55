// HookHttpStack and the answers an app gives it (tlr_http_complete, tlr_http_fail). See
// http_hook.h. The app holds an exchange by a handle: a number looked up in a registry, never
// one a pending exchange holds (on a 32-bit target the numbers wrap after 2^32 exchanges). The first of the app's answer and TLR's giving up takes the
// exchange out of the registry, so a later answer (a second one, one crossing `cancel`, one
// after TLR stopped waiting) finds nothing and is dropped without touching freed memory.
#include "capi/http_hook.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/llm/llm_backend.h"

namespace {

struct PendingExchange {
  std::mutex mu;
  std::condition_variable cv;
  bool answered = false;
  std::chrono::steady_clock::time_point answered_at;
  tlr::HttpResult result;
  uint64_t max_reply_bytes = 0;

  void Answer(tlr::HttpResult r) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (!answered) {
        answered = true;
        answered_at = std::chrono::steady_clock::now();
        result = std::move(r);
      }
    }
    cv.notify_all();
  }
};

// Exchanges waiting for the app's answer, by handle.
class Registry {
 public:
  tlr_http_exchange* Add(std::shared_ptr<PendingExchange> ex) {
    std::lock_guard<std::mutex> l(mu_);
    while (next_ == 0 || live_.count(next_)) ++next_;  // 0 stays NULL; a wrapped counter skips live ones
    const uintptr_t id = next_++;
    live_[id] = std::move(ex);
    return reinterpret_cast<tlr_http_exchange*>(id);
  }
  // The exchange, taken out: null when it was answered or given up already (or never was).
  std::shared_ptr<PendingExchange> Take(tlr_http_exchange* handle) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(handle));
    if (it == live_.end()) return nullptr;
    std::shared_ptr<PendingExchange> ex = std::move(it->second);
    live_.erase(it);
    return ex;
  }

 private:
  std::mutex mu_;
  std::unordered_map<uintptr_t, std::shared_ptr<PendingExchange>> live_;
  uintptr_t next_ = 1;
};

Registry& Exchanges() {
  static Registry* r = new Registry();  // never destroyed: an app thread may answer during exit
  return *r;
}

}  // namespace

namespace tlr {

bool HookGuard::Enter() {
  std::lock_guard<std::mutex> l(mu_);
  if (!alive_) return false;
  ++inside_;
  return true;
}

void HookGuard::Leave() {
  std::lock_guard<std::mutex> l(mu_);
  if (--inside_ == 0) cv_.notify_all();
}

bool HookGuard::alive() const {
  std::lock_guard<std::mutex> l(mu_);
  return alive_;
}

void HookGuard::Close() {
  std::unique_lock<std::mutex> l(mu_);
  alive_ = false;
  cv_.wait(l, [this] { return inside_ == 0; });
}

HttpResult HookHttpStack::Exchange(const HttpExchange& x, Clock::time_point deadline, LlmCall* call,
                                   uint64_t max_reply_bytes) {
  auto ex = std::make_shared<PendingExchange>();
  ex->max_reply_bytes = max_reply_bytes;
  std::vector<const char*> headers;
  for (const auto& [k, v] : x.headers) {
    headers.push_back(k.c_str());
    headers.push_back(v.c_str());
  }
  headers.push_back(nullptr);
  tlr_http_request req;
  req.method = x.method.c_str();
  req.url = x.url.c_str();
  req.headers = headers.data();
  req.body = x.body.data();
  req.body_len = x.body.size();
  req.timeout_s = std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
  HttpResult h;
  if (!guard_->Enter()) {
    h.error = "the LLM was freed (tlr_llm_free): its HTTP hook is not called any more";
    return h;
  }
  tlr_http_exchange* handle = Exchanges().Add(ex);
  hook_.send(hook_.user_data, handle, &req);
  guard_->Leave();

  bool stopped = false, answered_late = false;
  bool freed = false;
  {
    std::unique_lock<std::mutex> l(ex->mu);
    // In slices of 50 ms, so that a cancelled call (or a freed LLM) is seen in time.
    while (!ex->answered) {
      if (call && call->cancelled()) {
        h.cancelled = true;
        break;
      }
      if (!guard_->alive()) {
        freed = true;
        break;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        h.timed_out = true;
        break;
      }
      ex->cv.wait_until(l, std::min(deadline, now + std::chrono::milliseconds(50)));
    }
    // An answer given inside `send` came before the loop could watch the call: one past the
    // deadline, or for a call cancelled meanwhile, counts as none (the deadline and cancel hold
    // even for an app whose `send` blocks).
    if (ex->answered && !h.cancelled && call && call->cancelled()) h.cancelled = true;
    if (ex->answered && !h.cancelled && ex->answered_at > deadline) h.timed_out = true;
    if (ex->answered && !h.cancelled && !h.timed_out) {
      h = std::move(ex->result);
    } else {
      stopped = true;
      answered_late = ex->answered;
    }
  }
  if (stopped) {
    Exchanges().Take(handle);  // an answer from now on is dropped
    h.error = h.cancelled ? "cancelled"
              : freed     ? "the LLM was freed (tlr_llm_free) while its HTTP hook had the request"
                          : "the app's HTTP stack gave no answer in time";
    if (hook_.cancel && !answered_late && guard_->Enter()) {  // (an answered exchange is the app's no more)
      hook_.cancel(hook_.user_data, handle);
      guard_->Leave();
    }
  }
  return h;
}

}  // namespace tlr

void tlr_http_complete(tlr_http_exchange* handle, int status, const char* const* headers, const char* body,
                       size_t body_len) {
  std::shared_ptr<PendingExchange> exchange = Exchanges().Take(handle);
  if (!exchange) return;  // answered already, given up, or not an exchange
  tlr::HttpResult r;
  if (status < 100 || status > 599) {
    r.error = "the app's HTTP stack answered with status " + std::to_string(status) + " (not 100..599)";
  } else if (!body && body_len > 0) {
    r.error = "the app's HTTP stack answered with a NULL body of " + std::to_string(body_len) + " bytes";
  } else if (body_len > exchange->max_reply_bytes) {
    r.too_large = true;
    r.error = "the reply is larger than the " + std::to_string(exchange->max_reply_bytes >> 10) + " KiB limit";
  } else {
    r.sent = true;
    r.status = status;
    if (body) r.body.assign(body, body_len);
    for (size_t i = 0; headers && headers[i] && headers[i + 1] && i < 2000; i += 2) {
      r.AddHeader(headers[i], headers[i + 1]);
    }
  }
  exchange->Answer(std::move(r));
}

void tlr_http_fail(tlr_http_exchange* handle, const char* message) {
  std::shared_ptr<PendingExchange> exchange = Exchanges().Take(handle);
  if (!exchange) return;
  tlr::HttpResult r;
  r.error = std::string("the app's HTTP stack failed: ") + (message && *message ? message : "no reason given");
  exchange->Answer(std::move(r));
}
