// The browser build's bridge to JavaScript (capi layer; only in the WebAssembly build): the C API
// (tlr.h) behind a few functions that take and give JSON, so that the worker (web/tlr_worker.js)
// never lays out C structs, and the transport hook's requests go out through the worker's
// synchronous XMLHttpRequest (allowed in workers): the calling thread blocks in the request, as
// a native build's built-in client would, and the answer completes the exchange before `send`
// returns.
//
//   tlrw_device_open(json)         {"slm": path, "router": path or kind, "kv_slots", "n_ctx",
//                                   "n_threads"} -> handle
//   tlrw_llm_open(json)            {"server": url, "backend", "api_key", "timeout_s", "retries",
//                                   "server_model"} or {"model": path} -> handle
//   tlrw_generate(dev, llm, json)  {"prompt": text | "messages": [{role, content}], "mode",
//                                   "threshold", "max_tokens", "pipeline", "temperature", "seed",
//                                   "chat"} -> status; each token goes to Module.tlrOnToken, and
//   tlrw_last_stats()              the last generation's stats as JSON (tlr_stats' fields).
//   tlrw_alloc, tlrw_add_file      model files as bytes in memory (the build has no file system)
// Handles are freed with tlr_device_free / tlr_llm_free; errors read with tlr_last_error.
#include <emscripten.h>

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tlr.h"
#include "util/mapped_file.h"

namespace {

using nlohmann::json;

// One request of the transport hook, answered before it returns (tlr_http_complete or _fail):
// a synchronous XMLHttpRequest, allowed in workers. Self-contained, so it runs on any thread of
// the threaded build (each WebAssembly thread is a worker of its own, without the page's
// functions): the pipelined decoder's LLM calls go out from their own thread there.
EM_JS(void, tlrw_js_send, (void* exchange, const char* method, const char* url, const char* headers_json,
                           const char* body, size_t body_len, double timeout_s), {
  body >>>= 0;  // a pointer above 2 GiB of memory (the heap may grow to 4 GiB)
  var m = UTF8ToString(method), u = UTF8ToString(url), headers = JSON.parse(UTF8ToString(headers_json));
  var str = function(s) { var n = lengthBytesUTF8(s) + 1, p = _malloc(n); stringToUTF8(s, p, n); return p; };
  var fail = function(why) { var p = str(why); _tlr_http_fail(exchange, p); _free(p); };
  var xhr = new XMLHttpRequest();
  try {
    xhr.open(m, u, false);
    xhr.timeout = Math.max(1, Math.round(timeout_s * 1000));
    for (var k in headers) xhr.setRequestHeader(k, headers[k]);
    xhr.send(m === 'GET' || m === 'DELETE' ? null : HEAPU8.slice(body, body + body_len));
  } catch (e) {
    fail('no answer from ' + u + ' (' + (e && e.message || e) + ')');
    return;
  }
  if (xhr.status === 0) {
    fail('no answer from ' + u + ' (unreachable, or the browser blocked the call)');
    return;
  }
  var text = new TextEncoder().encode(xhr.responseText);
  var p = _malloc(text.length + 1), h = str(xhr.getAllResponseHeaders());
  HEAPU8.set(text, p);
  _tlrw_http_complete(exchange, xhr.status, h, p, text.length);
  _free(h);
  _free(p);
});
// Each token, to the worker (web/tlr_worker.js sets Module.tlrOnToken): always on the thread
// that called tlrw_generate.
EM_JS(int, tlrw_js_token, (const char* token_json), { return Module.tlrOnToken(JSON.parse(UTF8ToString(token_json))) | 0; });

void Send(void*, tlr_http_exchange* exchange, const tlr_http_request* r) {
  json headers = json::object();
  for (const char* const* h = r->headers; h && h[0] && h[1]; h += 2) headers[h[0]] = h[1];
  tlrw_js_send(exchange, r->method, r->url, headers.dump().c_str(), r->body, r->body_len, r->timeout_s);
}

const tlr_http_hook kHook = {sizeof(tlr_http_hook), Send, nullptr, nullptr};

std::string g_stats;

template <typename T>
T Get(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it != j.end() && !it->is_null() ? it->template get<T>() : fallback;
}

int OnToken(const tlr_token* t, void*) {
  static const char* kSources[] = {"SLM", "LLM", "FALLBACK"};
  json j = {{"id", t->id},
            {"text", std::string(t->text, t->text_len)},
            {"source", kSources[t->source >= 0 && t->source <= 2 ? t->source : 0]},
            {"confidence", t->confidence},
            {"end", t->end != 0},
            {"llm_ms", t->llm_ms},
            {"at_ms", t->at_ms}};
  if (t->llm_error && *t->llm_error) j["llm_error"] = t->llm_error;
  return tlrw_js_token(j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

json StatsJson(const tlr_stats& s) {
  static const char* kStops[] = {"eos", "max_tokens", "callback", "cancelled"};
  return {{"prompt_tokens", s.prompt_tokens}, {"prompt_reused", s.prompt_reused},
          {"generated", s.generated},         {"routed", s.routed},
          {"fallbacks", s.fallbacks},         {"llm_calls", s.llm_calls},
          {"stop", kStops[s.stop >= 0 && s.stop <= 3 ? s.stop : 0]},
          {"threshold", s.threshold},         {"ttft_ms", s.ttft_ms},
          {"tbt_ms", s.tbt_ms},               {"total_ms", s.total_ms},
          {"slm_ms", s.slm_ms},               {"router_ms", s.router_ms},
          {"llm_ms", s.llm_ms},               {"stall_ms", s.stall_ms},
          {"http_requests", s.http_requests}, {"retries", s.retries},
          {"failed_calls", s.failed_calls},   {"llm_failure", s.llm_failure},
          {"llm_prefilled", s.llm_prefilled}, {"llm_generated", s.llm_generated},
          {"llm_forward_ms", s.llm_forward_ms},
          // Derived as DecodeStatsJson derives them (device/decode/token_json.h: one schema).
          {"routed_pct", s.generated ? 100.0 * static_cast<double>(s.routed) / static_cast<double>(s.generated) : 0.0},
          {"llm_generated_per_routed", s.routed ? static_cast<double>(s.llm_generated) / static_cast<double>(s.routed) : 0.0},
          {"spec_resolved", s.spec_resolved}, {"spec_hits", s.spec_hits}, {"spec_branch_hits", s.spec_branch_hits},
          {"spec_hit_pct", s.spec_resolved ? 100.0 * static_cast<double>(s.spec_hits + s.spec_branch_hits) /
                                                 static_cast<double>(s.spec_resolved) : 0.0},
          {"lookahead_used", s.lookahead_used}, {"wasted_slm_steps", s.wasted_slm_steps},
          {"cancelled_calls", s.cancelled_calls}, {"resyncs", s.resyncs}};
}

// A request the worker built wrong (its JSON): said by tlrw_last_error.
std::string g_error;
int BadJson(const std::string& what) {
  g_error = what;
  return TLR_ERR_INVALID_ARGUMENT;
}

// A value of the wrong type in a request (a page's threshold given as a word, say) makes the
// JSON library throw: that is the request's error, not a crash of the worker.
template <typename R, typename F>
R Guarded(R on_error, F&& f) {
  g_error.clear();
  try {
    return f();
  } catch (const std::exception& e) {
    g_error = std::string("a value of the wrong type in the request: ") + e.what();
    return on_error;
  }
}

}  // namespace

extern "C" {

// Why the last call failed: its JSON, or what tlr_last_error says.
EMSCRIPTEN_KEEPALIVE const char* tlrw_last_error() { return g_error.empty() ? tlr_last_error() : g_error.c_str(); }

static tlr_device* DeviceOpen(const char* params_json) {
  json j = json::parse(params_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return (BadJson("tlrw_device_open: not a JSON object"), nullptr);
  tlr_device_params p;
  tlr_device_params_init(&p);
  const std::string slm = Get<std::string>(j, "slm", ""), router = Get<std::string>(j, "router", "");
  p.slm_path = slm.c_str();
  p.router = router.c_str();
  p.kv_slots = Get<int>(j, "kv_slots", p.kv_slots);
  p.n_threads = Get<int>(j, "n_threads", p.n_threads);  // above 1 only in the threaded build
  p.n_ctx = Get<int64_t>(j, "n_ctx", p.n_ctx);
  p.weight_cache = "off";  // the browser's file system is memory: a second copy would double it
  tlr_device* d = nullptr;
  return tlr_device_open(&p, &d) == TLR_OK ? d : nullptr;
}

static tlr_llm* LlmOpen(const char* params_json) {
  json j = json::parse(params_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return (BadJson("tlrw_llm_open: not a JSON object"), nullptr);
  tlr_llm_params p;
  tlr_llm_params_init(&p);
  const std::string server = Get<std::string>(j, "server", ""), model = Get<std::string>(j, "model", "");
  const std::string backend = Get<std::string>(j, "backend", "tlr"), key = Get<std::string>(j, "api_key", "");
  const std::string server_model = Get<std::string>(j, "server_model", "");
  if (!server.empty()) {
    p.server_url = server.c_str();
    p.http_hook = &kHook;  // the browser's XMLHttpRequest
  }
  if (!model.empty()) p.model_path = model.c_str();
  p.backend = backend.c_str();
  if (!key.empty()) p.api_key = key.c_str();
  if (!server_model.empty()) p.server_model = server_model.c_str();
  p.timeout_s = Get<double>(j, "timeout_s", p.timeout_s);
  p.retries = Get<int>(j, "retries", p.retries);
  p.weight_cache = "off";
  tlr_llm* l = nullptr;
  return tlr_llm_open(&p, &l) == TLR_OK ? l : nullptr;
}

static int Generate(tlr_device* dev, const tlr_llm* llm, const char* request_json) {
  json j = json::parse(request_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return BadJson("tlrw_generate: not a JSON object");
  tlr_generate_params p;
  tlr_generate_params_init(&p);
  const std::string mode = Get<std::string>(j, "mode", "joint");
  p.mode = mode == "small_only" ? TLR_MODE_SMALL_ONLY : mode == "large_only" ? TLR_MODE_LARGE_ONLY : TLR_MODE_JOINT;
  if (mode != "joint" && mode != "small_only" && mode != "large_only") p.mode = -1;  // refused by name below
  p.threshold = Get<float>(j, "threshold", p.threshold);
  p.max_tokens = Get<int>(j, "max_tokens", p.max_tokens);
  p.pipeline = Get<bool>(j, "pipeline", p.pipeline != 0) ? 1 : 0;
  p.temperature = Get<float>(j, "temperature", p.temperature);
  p.seed = Get<uint64_t>(j, "seed", p.seed);
  p.chat = Get<bool>(j, "chat", false) ? 1 : 0;
  tlr_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  int rc;
  if (auto m = j.find("messages"); m != j.end()) {
    if (!m->is_array()) return BadJson("tlrw_generate: messages is not an array");
    std::vector<std::string> text;
    for (const json& msg : *m) {
      if (!msg.is_object()) return BadJson("tlrw_generate: a message is not an object");
      text.push_back(Get<std::string>(msg, "role", ""));
      text.push_back(Get<std::string>(msg, "content", ""));
    }
    std::vector<tlr_message> msgs;
    for (size_t i = 0; i + 1 < text.size(); i += 2) msgs.push_back({text[i].c_str(), text[i + 1].c_str()});
    rc = tlr_generate_chat(dev, llm, msgs.data(), msgs.size(), &p, OnToken, nullptr, &st);
  } else {
    const std::string prompt = Get<std::string>(j, "prompt", "");
    rc = tlr_generate(dev, llm, prompt.c_str(), &p, OnToken, nullptr, &st);
  }
  g_stats = rc == TLR_OK ? StatsJson(st).dump() : "null";
  return rc;
}

EMSCRIPTEN_KEEPALIVE tlr_device* tlrw_device_open(const char* params_json) {
  return Guarded<tlr_device*>(nullptr, [&] { return DeviceOpen(params_json); });
}
EMSCRIPTEN_KEEPALIVE tlr_llm* tlrw_llm_open(const char* params_json) {
  return Guarded<tlr_llm*>(nullptr, [&] { return LlmOpen(params_json); });
}
EMSCRIPTEN_KEEPALIVE int tlrw_generate(tlr_device* dev, const tlr_llm* llm, const char* request_json) {
  return Guarded<int>(TLR_ERR_INVALID_ARGUMENT, [&] { return Generate(dev, llm, request_json); });
}

EMSCRIPTEN_KEEPALIVE const char* tlrw_last_stats() { return g_stats.c_str(); }

// Model files: the worker downloads straight into WebAssembly memory (tlrw_alloc), then names
// the bytes (tlrw_add_file) for tlrw_device_open; the model keeps them while it lives.
EMSCRIPTEN_KEEPALIVE uint8_t* tlrw_alloc(size_t size) { return tlr::AllocateMemoryFile(size); }
EMSCRIPTEN_KEEPALIVE void tlrw_add_file(const char* name, uint8_t* bytes, size_t size) { tlr::AddMemoryFile(name, bytes, size); }
EMSCRIPTEN_KEEPALIVE void tlrw_remove_file(const char* name) { tlr::RemoveMemoryFile(name); }

// The worker's answer to a request: status, the response headers as XMLHttpRequest gives them
// ("name: value\r\n" lines) and the body.
EMSCRIPTEN_KEEPALIVE void tlrw_http_complete(tlr_http_exchange* exchange, int status, const char* header_lines,
                                             const char* body, size_t body_len) {
  std::vector<std::string> kv;
  const std::string all = header_lines ? header_lines : "";
  size_t at = 0;
  while (at < all.size()) {
    size_t end = all.find("\r\n", at);
    if (end == std::string::npos) end = all.size();
    const std::string line = all.substr(at, end - at);
    if (const size_t colon = line.find(':'); colon != std::string::npos) {
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      kv.push_back(line.substr(0, colon));
      kv.push_back(line.substr(v));
    }
    at = end + 2;
  }
  std::vector<const char*> ptrs;
  for (const std::string& s : kv) ptrs.push_back(s.c_str());
  ptrs.push_back(nullptr);
  tlr_http_complete(exchange, status, ptrs.data(), body, body_len);
}

}  // extern "C"
