// Typed, total JSON reading (see json_fields.h).
#include "util/json_fields.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

namespace tlr {

using nlohmann::json;

int JsonNestingDepth(std::string_view text, int stop) {
  // Brackets inside strings do not nest; a string ends at an unescaped quote. For invalid
  // JSON this is still an upper bound of what the parser reaches before it fails: it lexes
  // strings the same way.
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest >= stop) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Expected<json> ParseJson(std::string_view text, int max_depth) {
  if (JsonNestingDepth(text, max_depth + 1) > max_depth) {
    return Status::Error("JSON nested deeper than " + std::to_string(max_depth) + " levels");
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Error("not valid JSON");
  return j;
}

std::string DumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

JsonFields::JsonFields(const json& j, std::string what) : j_(j), what_(std::move(what)) {
  if (!j_.is_object()) status_ = Status::Error(what_.empty() ? "not a JSON object" : what_ + " is not a JSON object");
}

JsonFields& JsonFields::Fail(const std::string& message) {
  if (status_.ok()) status_ = Status::Error(what_.empty() ? message : what_ + ": " + message);
  return *this;
}

JsonFields& JsonFields::Wrong(std::string_view key, const std::string& what) {
  return Fail("'" + std::string(key) + "' " + what);
}

bool JsonFields::Has(std::string_view key) const {
  if (!j_.is_object()) return false;
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

const json* JsonFields::Find(std::string_view key, Need need) {
  if (!status_.ok()) return nullptr;
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) {
    if (need == Need::kRequired) Wrong(key, it == j_.end() ? "is required" : "must not be null");
    return nullptr;
  }
  return &*it;
}

JsonFields& JsonFields::Int(std::string_view key, int64_t lo, int64_t hi, int64_t* out, Need need) {
  const json* v = Find(key, need);
  if (!v) return *this;
  if (!v->is_number_integer()) return Wrong(key, "must be an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Wrong(key, "is out of range");
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) return Wrong(key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
  *out = x;
  return *this;
}

JsonFields& JsonFields::Number(std::string_view key, double lo, double hi, double* out, Need need) {
  const json* v = Find(key, need);
  if (!v) return *this;
  if (!v->is_number()) return Wrong(key, "must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "%g..%g", lo, hi);
    return Wrong(key, std::string("must be a number in ") + range);
  }
  *out = x;
  return *this;
}

JsonFields& JsonFields::Bool(std::string_view key, bool* out, Need need) {
  const json* v = Find(key, need);
  if (!v) return *this;
  if (!v->is_boolean()) return Wrong(key, "must be true or false");
  *out = v->get<bool>();
  return *this;
}

JsonFields& JsonFields::String(std::string_view key, std::string* out, Need need) {
  const json* v = Find(key, need);
  if (!v) return *this;
  if (!v->is_string()) return Wrong(key, "must be a string");
  *out = v->get<std::string>();
  return *this;
}

JsonFields& JsonFields::TokenIds(std::string_view key, int64_t n_vocab, std::vector<int32_t>* out, Need need) {
  const json* v = Find(key, need);
  if (!v) return *this;
  Status s = ReadTokenIds(*v, "'" + std::string(key) + "'", n_vocab, out);
  return s.ok() ? *this : Fail(s.message());
}

JsonFields& JsonFields::Numbers(std::string_view key, std::vector<float>* out, float null_as, Need need) {
  const json* v = Find(key, need);
  if (!v) return *this;
  if (!v->is_array()) return Wrong(key, "must be an array of numbers");
  out->clear();
  out->reserve(v->size());
  for (const json& e : *v) {
    if (e.is_null()) {
      out->push_back(null_as);
    } else if (e.is_number()) {
      out->push_back(static_cast<float>(e.get<double>()));
    } else {
      return Wrong(key, "must be an array of numbers");
    }
  }
  return *this;
}

JsonFields& JsonFields::Array(std::string_view key, const json** out, Need need) {
  *out = nullptr;
  const json* v = Find(key, need);
  if (!v) return *this;
  if (!v->is_array()) return Wrong(key, "must be an array");
  *out = v;
  return *this;
}

JsonFields& JsonFields::Object(std::string_view key, const json** out, Need need) {
  *out = nullptr;
  const json* v = Find(key, need);
  if (!v) return *this;
  if (!v->is_object()) return Wrong(key, "must be an object");
  *out = v;
  return *this;
}

Status ReadTokenIds(const json& v, std::string_view name, int64_t n_vocab, std::vector<int32_t>* out) {
  if (!v.is_array()) return Status::Error(std::string(name) + " must be an array of token ids");
  out->clear();
  out->reserve(v.size());
  for (const json& e : v) {
    if (!e.is_number_integer()) return Status::Error(std::string(name) + " must hold integer token ids");
    const bool in_range = e.is_number_unsigned() ? e.get<uint64_t>() < static_cast<uint64_t>(n_vocab)
                                                 : e.get<int64_t>() >= 0 && e.get<int64_t>() < n_vocab;
    if (!in_range) {
      return Status::Error(std::string(name) + " holds token id " + e.dump() + " outside the vocabulary (0.." +
                           std::to_string(n_vocab - 1) + ")");
    }
    out->push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return Status::Ok();
}

}  // namespace tlr
