// HookHttpStack and the answers an app gives it (tlr_http_complete, tlr_http_fail). See
// http_hook.h. An exchange is shared by TLR (waiting) and the app (answering): whichever lets go
// last frees it, so an answer after TLR stopped waiting is safe and dropped.
#include "capi/http_hook.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "device/llm/llm_backend.h"

struct tlr_http_exchange {
  std::mutex mu;
  std::condition_variable cv;
  bool answered = false;
  tlr::HttpResult result;
  uint64_t max_reply_bytes = 0;
  std::atomic<int> refs{2};  // TLR's and the app's
  std::atomic<bool> app_answered{false};  // a second answer (e.g. from the app's cancel path) is ignored

  // True for the app's first answer only.
  bool FirstAnswer() { return !app_answered.exchange(true); }

  void Release() {
    if (refs.fetch_sub(1) == 1) delete this;
  }
  void Answer(tlr::HttpResult r) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (!answered) {
        answered = true;
        result = std::move(r);
      }
    }
    cv.notify_all();
  }
};

namespace tlr {

HttpResult HookHttpStack::Exchange(const HttpExchange& x, Clock::time_point deadline, LlmCall* call,
                                   uint64_t max_reply_bytes) {
  auto* ex = new tlr_http_exchange();
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
  hook_.send(hook_.user_data, ex, &req);

  HttpResult h;
  bool stopped = false;
  {
    std::unique_lock<std::mutex> l(ex->mu);
    // In slices of 50 ms, so that a cancelled call is seen in time.
    while (!ex->answered) {
      if (call && call->cancelled()) {
        h.cancelled = true;
        break;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        h.timed_out = true;
        break;
      }
      ex->cv.wait_until(l, std::min(deadline, now + std::chrono::milliseconds(50)));
    }
    if (ex->answered) {
      h = std::move(ex->result);
    } else {
      stopped = true;
    }
  }
  if (stopped) {
    h.error = h.cancelled ? "cancelled" : "the app's HTTP stack gave no answer in time";
    if (hook_.cancel) hook_.cancel(hook_.user_data, ex);
  }
  ex->Release();
  return h;
}

}  // namespace tlr

void tlr_http_complete(tlr_http_exchange* exchange, int status, const char* const* headers, const char* body,
                       size_t body_len) {
  if (!exchange || !exchange->FirstAnswer()) return;
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
  exchange->Release();
}

void tlr_http_fail(tlr_http_exchange* exchange, const char* message) {
  if (!exchange || !exchange->FirstAnswer()) return;
  tlr::HttpResult r;
  r.error = std::string("the app's HTTP stack failed: ") + (message && *message ? message : "no reason given");
  exchange->Answer(std::move(r));
  exchange->Release();
}
