// JSON request helpers shared by the server's handlers and `tlr ui` (net layer): error and
// JSON responses that never throw, the request body parsed with a depth limit, and the
// sampling fields. Fields are read with util/json_fields.h.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "model/sampler.h"
#include "net/http_front.h"
#include "util/json_fields.h"
#include "util/status.h"

namespace tlr::server {

using nlohmann::json;

// A route pattern (httplib matches routes as regular expressions) that matches exactly `path`.
inline std::string ExactRoutePattern(std::string_view path) {
  std::string out;
  for (char c : path) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

inline void SendJson(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(DumpJson(j), "application/json");
}

// Error bodies may quote what the client sent (a path, a name): DumpJson replaces bytes that
// are not UTF-8 instead of throwing.
inline void SendError(httplib::Response& res, int status, const std::string& code, const std::string& message) {
  // OpenAI's shape, `param` included (null: the message names the field).
  SendJson(res, status, {{"error", {{"code", code}, {"message", message}, {"type", code}, {"param", nullptr}}}});
}

// A refusal to retry later (429, 503): Retry-After in whole seconds (at least 1, as HTTP has
// it), retry-after-ms (which OpenAI's client libraries read first) and retry_after_ms in the
// body, for clients that want the precise wait.
inline void SendRetryLater(httplib::Response& res, int status, const std::string& code, const std::string& message,
                           double retry_after_s) {
  const double s = retry_after_s > 0 ? retry_after_s : 1.0;
  res.set_header("Retry-After", std::to_string(static_cast<long long>(std::ceil(std::max(1.0, s)))));
  res.set_header("retry-after-ms", std::to_string(static_cast<long long>(std::ceil(s * 1e3))));
  SendJson(res, status,
           {{"error", {{"code", code}, {"message", message}, {"type", code}, {"param", nullptr},
                       {"retry_after_ms", std::ceil(s * 1e3)}}}});
}

// Range requests are ignored (RFC 9110 lets a server send the whole representation): httplib
// would otherwise build a multipart reply of every range asked, overlapping ones included, in
// memory (an 8 KB request for thousands of "0-" ranges made a 30 MB reply). httplib parsed the
// header into the request before routing; the request object is the server's own, not const.
inline void IgnoreRanges(const httplib::Request& req) { const_cast<httplib::Request&>(req).ranges.clear(); }

// A JSON body for the errors httplib produces itself, before any handler ran. `too_large`:
// what the 413 says (the body limit). (httplib keeps the connection open after its own 400 or
// 414 until its read timeout; a Connection: close set here is sent but not acted on.)
inline void DescribeHttpError(const httplib::Request& req, httplib::Response& res, const std::string& too_large) {
  if (!res.body.empty()) return;
  // A request httplib itself could not read: whatever follows it on the connection cannot be
  // trusted to start a request (bytes after a bad request line were served as the next request:
  // smuggling behind a proxy), so the connection closes after the reply.
  if (res.status == 400 || res.status == 413 || res.status == 414 || res.status == 431) {
    res.set_header("Connection", "close");
    HttpFront::CloseAfterReply();
  }
  switch (res.status) {
    case 404: SendError(res, 404, "not_found", "no endpoint " + req.method + " " + req.path); break;
    case 413:
      // The body limits are the front's (HttpFront); Debian's httplib refuses a form body
      // (curl -d sends one) past 8 KiB on its own, whatever the server's limit.
      if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
        SendError(res, 413, "body_too_large",
                  "a body sent as a form (Content-Type: application/x-www-form-urlencoded, what curl -d sends) "
                  "is limited to 8 KiB by the HTTP library; send it as JSON (-H 'Content-Type: application/json')");
        break;
      }
      SendError(res, 413, "body_too_large", too_large);
      break;
    case 400:
      SendError(res, 400, "bad_http_request",
                "malformed HTTP request: the request line (METHOD /path HTTP/1.1) or a header line (8 KB at most "
                "each) could not be read, or a POST has no Content-Length (send {} for an empty body)");
      break;
    case 414: SendError(res, 414, "uri_too_long", "the request target (path and query) is longer than 8 KB"); break;
    case 416: SendError(res, 416, "bad_range", "the Range header cannot be read (a readable one is ignored)"); break;
    default: SendError(res, res.status, "http_error", "HTTP error " + std::to_string(res.status));
  }
}

// A POST/PUT/PATCH must say how long its body is (Content-Length, or chunked); otherwise
// httplib would read until the client closes the connection. For such a request fills `res`
// with a 400 (and asks to close the connection) and returns true. For pre-routing handlers,
// which run before the body is read.
inline bool RefuseBodyWithoutLength(const httplib::Request& req, httplib::Response& res) {
  if (req.method != "POST" && req.method != "PUT" && req.method != "PATCH") return false;
  std::string coding = req.get_header_value("Transfer-Encoding");  // names are case-insensitive
  for (char& c : coding) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (req.has_header("Content-Length") || coding.find("chunked") != std::string::npos) return false;
  res.set_header("Connection", "close");
  SendError(res, 400, "bad_http_request", "a " + req.method + " needs a Content-Length (send {} for an empty body)");
  return true;
}

// Parses the body as a JSON object (nesting refused past kMaxJsonDepth); on failure fills res
// with a 400 and returns nullopt.
inline std::optional<json> ParseBody(const httplib::Request& req, httplib::Response& res) {
  auto j = ParseJson(req.body);
  if (!j.ok()) {
    SendError(res, 400, "invalid_json", "the request body is " + j.status().message());
    return std::nullopt;
  }
  if (!j->is_object()) {
    SendError(res, 400, "invalid_request", "the request body must be a JSON object");
    return std::nullopt;
  }
  return std::move(j).value();
}

// Sampling fields (temperature, top_k, top_p, min_p, repeat_penalty or repetition_penalty,
// repeat_last_n, seed) from
// the object `j` on top of `*p`; checked with SamplerParams::Validate.
inline Status GetSampling(const json& j, SamplerParams* p) {
  double t = p->temperature, tp = p->top_p, mp = p->min_p, rp = p->repeat_penalty;
  int64_t tk = p->top_k, seed = static_cast<int64_t>(p->seed & 0x7fffffffffffffffull), last_n = p->repeat_last_n;
  JsonFields f(j);
  f.Number("temperature", 0, 100, &t).Number("top_p", 0, 1, &tp).Number("min_p", 0, 1, &mp);
  // repetition_penalty: vLLM's name for llama.cpp's repeat_penalty (the same multiplicative penalty)
  f.Number("repeat_penalty", 0, 100, &rp).Number("repetition_penalty", 0, 100, &rp);
  f.Int("top_k", -1, 1 << 20, &tk).Int("repeat_last_n", 0, 1 << 20, &last_n);
  f.Int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed);
  TLR_RETURN_IF_ERROR(f.status());
  p->temperature = static_cast<float>(t);
  p->top_p = static_cast<float>(tp);
  p->min_p = static_cast<float>(mp);
  p->repeat_penalty = static_cast<float>(rp);
  p->top_k = static_cast<int32_t>(tk);
  p->repeat_last_n = static_cast<int32_t>(last_n);
  p->seed = static_cast<uint64_t>(seed);
  return p->Validate();
}

}  // namespace tlr::server
