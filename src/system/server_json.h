// JSON request helpers shared by the server's handlers (system layer, internal to the
// server): typed field access that reports what was wrong instead of throwing.
#pragma once

#include <httplib.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "model/sampler.h"
#include "util/status.h"

namespace tlr::server {

using nlohmann::json;

inline void SendError(httplib::Response& res, int status, const std::string& code, const std::string& message) {
  res.status = status;
  json j = {{"error", {{"code", code}, {"message", message}, {"type", code}}}};
  res.set_content(j.dump(), "application/json");
}

inline void SendJson(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// Parses the body as a JSON object; on failure fills res with a 400 and returns nullopt.
inline std::optional<json> ParseBody(const httplib::Request& req, httplib::Response& res) {
  json j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    SendError(res, 400, "invalid_json", "the request body is not valid JSON");
    return std::nullopt;
  }
  if (!j.is_object()) {
    SendError(res, 400, "invalid_request", "the request body must be a JSON object");
    return std::nullopt;
  }
  return j;
}

// Field readers: absent (or null) -> the default; present with the wrong type or out of
// range -> false with *err naming the field.
inline bool GetInt(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out, std::string* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    *err = std::string("'") + key + "' must be an integer";
    return false;
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    *err = std::string("'") + key + "' is out of range";
    return false;
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    *err = std::string("'") + key + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi);
    return false;
  }
  *out = v;
  return true;
}

inline bool GetNumber(const json& j, const char* key, double lo, double hi, double* out, std::string* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_number()) {
    *err = std::string("'") + key + "' must be a number";
    return false;
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    *err = std::string("'") + key + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi);
    return false;
  }
  *out = v;
  return true;
}

inline bool GetBool(const json& j, const char* key, bool* out, std::string* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    *err = std::string("'") + key + "' must be true or false";
    return false;
  }
  *out = it->get<bool>();
  return true;
}

inline bool GetString(const json& j, const char* key, std::string* out, std::string* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_string()) {
    *err = std::string("'") + key + "' must be a string";
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

// An array of token ids (each checked against n_vocab); false with *err otherwise.
inline bool GetTokenArray(const json& v, const char* what, int64_t n_vocab, std::vector<int32_t>* out, std::string* err) {
  if (!v.is_array()) {
    *err = std::string("'") + what + "' must be an array of token ids";
    return false;
  }
  out->clear();
  out->reserve(v.size());
  for (const json& e : v) {
    if (!e.is_number_integer() && !e.is_number_unsigned()) {
      *err = std::string("'") + what + "' must hold integer token ids";
      return false;
    }
    if (e.is_number_unsigned() ? e.get<uint64_t>() >= static_cast<uint64_t>(n_vocab)
                               : (e.get<int64_t>() < 0 || e.get<int64_t>() >= n_vocab)) {
      *err = std::string("'") + what + "' holds token id " + e.dump() + " outside the vocabulary (0.." +
             std::to_string(n_vocab - 1) + ")";
      return false;
    }
    out->push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return true;
}

// Sampling fields (temperature, top_k, top_p, min_p, repeat_penalty, seed) from `j` on top of
// `*p`; checked with SamplerParams::Validate.
inline bool GetSampling(const json& j, SamplerParams* p, std::string* err) {
  double t = p->temperature, tp = p->top_p, mp = p->min_p, rp = p->repeat_penalty;
  int64_t tk = p->top_k, seed = static_cast<int64_t>(p->seed & 0x7fffffffffffffffull), last_n = p->repeat_last_n;
  if (!GetNumber(j, "temperature", 0, 100, &t, err) || !GetNumber(j, "top_p", 0, 1, &tp, err) ||
      !GetNumber(j, "min_p", 0, 1, &mp, err) || !GetNumber(j, "repeat_penalty", 0, 100, &rp, err) ||
      !GetInt(j, "top_k", -1, 1 << 20, &tk, err) || !GetInt(j, "repeat_last_n", 0, 1 << 20, &last_n, err) ||
      !GetInt(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed, err)) {
    return false;
  }
  p->temperature = static_cast<float>(t);
  p->top_p = static_cast<float>(tp);
  p->min_p = static_cast<float>(mp);
  p->repeat_penalty = static_cast<float>(rp);
  p->top_k = static_cast<int32_t>(tk);
  p->repeat_last_n = static_cast<int32_t>(last_n);
  p->seed = static_cast<uint64_t>(seed);
  Status s = p->Validate();
  if (!s.ok()) {
    *err = s.message();
    return false;
  }
  return true;
}

}  // namespace tlr::server
