// The app's own HTTP stack under the device's LLM calls (capi layer): an HttpStack
// (device/http/http_stack.h) that hands each exchange to the tlr_http_hook of include/tlr.h and waits
// for the app's tlr_http_complete / tlr_http_fail, its deadline or the call's cancellation.
#pragma once

#include <memory>

#include "device/http/http_stack.h"
#include "tlr.h"

namespace tlr {

class HookHttpStack : public HttpStack {
 public:
  explicit HookHttpStack(const tlr_http_hook& hook) : hook_(hook) {}
  HttpResult Exchange(const HttpExchange& x, Clock::time_point deadline, LlmCall* call,
                      uint64_t max_reply_bytes) override;

 private:
  tlr_http_hook hook_;
};

}  // namespace tlr
