// The app's own HTTP stack under the device's LLM calls (capi layer): an HttpStack
// (device/http/http_stack.h) that hands each exchange to the tlr_http_hook of include/tlr.h and waits
// for the app's tlr_http_complete / tlr_http_fail, its deadline or the call's cancellation.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "device/http/http_stack.h"
#include "tlr.h"

namespace tlr {

// Whether the app's hook may still be called: its tlr_llm is alive. A device's prompt cache may
// keep the stack (and its calls) past tlr_llm_free; after Close() returns the hook is never called
// again and a wait for one of its answers ends within 50 ms (what "user_data must outlive the
// tlr_llm" promises the app).
class HookGuard {
 public:
  // True (and counted until Leave) when the hook may be called now.
  bool Enter();
  void Leave();
  bool alive() const;
  // No call after this; waits for the calls into the hook under way.
  void Close();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool alive_ = true;
  int inside_ = 0;
};

class HookHttpStack : public HttpStack {
 public:
  HookHttpStack(const tlr_http_hook& hook, std::shared_ptr<HookGuard> guard)
      : hook_(hook), guard_(std::move(guard)) {}
  HttpResult Exchange(const HttpExchange& x, Clock::time_point deadline, LlmCall* call,
                      uint64_t max_reply_bytes) override;

 private:
  tlr_http_hook hook_;
  std::shared_ptr<HookGuard> guard_;
};

}  // namespace tlr
