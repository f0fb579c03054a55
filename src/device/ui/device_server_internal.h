// What device_server.cc and ui_openai.cc share (device layer, internal to DeviceServer): a job (one
// generation's place in the queue and its stream), a checked request and small helpers.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device/decode/decoder.h"
#include "device/ui/device_server.h"
#include "net/sse_stream.h"

namespace tlr {

// One generation: its SSE chunks (when streamed), produced by a worker thread, sent by httplib's
// thread; `cancelled` stops it (or takes it out of the queue).
struct DeviceServer::Job : SseStream {
  std::atomic<bool> superseded{false};  // the page's: cancelled by a newer one
  uint64_t id = 0;
  bool api = false;                     // an OpenAI request (counts against max_queue)
  ~Job() override { StopWorker(); }     // the worker reads the members above
};

// A checked generation request.
struct DeviceServer::Request {
  std::vector<int32_t> prompt;
  DecodeOptions decode;
  size_t router = 0;  // index into DeviceServerModels::routers
};

namespace ui {

inline constexpr int kMaxSpan = 16;  // tokens per routed call a request may ask for

inline double Ms(double s) { return s * 1e3; }

// A named SSE event (the page's stream).
inline std::string Sse(const char* event, const nlohmann::json& data) {
  return std::string("event: ") + event + "\ndata: " +
         data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace ui
}  // namespace tlr
