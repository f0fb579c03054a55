// Typed, total JSON reading (util layer): every place that reads JSON from the network or a
// file (the server's handlers, the device's remote backends, `tlr ui`) goes through these, so a
// missing, mistyped or out-of-range field is an error naming the field, never an exception or
// an abort.
//
//   ParseJson     text -> JSON, refusing nesting deeper than a limit before the parser sees it
//                 (a value nested 200k levels deep would otherwise overflow the stack when it is
//                 copied, printed or destroyed).
//   JsonFields    reads the fields of one object; the first failure is kept and every later read
//                 is skipped, so a chain of reads is checked once at the end:
//
//     JsonFields f(j, "the server's reply");
//     f.Int("version", -1, kMax, &version).TokenIds("tokens", n_vocab, &tokens, kRequired);
//     if (!f.ok()) return f.status();   // "the server's reply: 'tokens' must be ..."
//
// An absent field (or null) leaves the output untouched unless it is kRequired. Pure functions
// and a value type; thread-compatible.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace tlr {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON value; an error for invalid JSON or nesting deeper than max_depth.
Expected<nlohmann::json> ParseJson(std::string_view text, int max_depth = kMaxJsonDepth);
// The deepest nesting of arrays/objects in `text` (outside strings); stops counting at `stop`.
int JsonNestingDepth(std::string_view text, int stop);

// Serialises `j` compactly; invalid UTF-8 in strings becomes U+FFFD instead of throwing.
std::string DumpJson(const nlohmann::json& j);

enum class Need { kOptional, kRequired };
inline constexpr Need kRequired = Need::kRequired;

class JsonFields {
 public:
  // `j` must be an object (otherwise the reader starts failed); `what` prefixes messages
  // ("the server's reply"); may be empty. `j` must outlive the reader.
  explicit JsonFields(const nlohmann::json& j, std::string what = "");
  JsonFields(const nlohmann::json&& j, std::string what = "") = delete;  // would dangle

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // Records an error of the caller's own (for checks across fields); the first one stays.
  JsonFields& Fail(const std::string& message);

  bool Has(std::string_view key) const;  // present and not null
  JsonFields& Int(std::string_view key, int64_t lo, int64_t hi, int64_t* out, Need need = Need::kOptional);
  JsonFields& Number(std::string_view key, double lo, double hi, double* out, Need need = Need::kOptional);
  JsonFields& Bool(std::string_view key, bool* out, Need need = Need::kOptional);
  JsonFields& String(std::string_view key, std::string* out, Need need = Need::kOptional);
  // An array of token ids, each in [0, n_vocab).
  JsonFields& TokenIds(std::string_view key, int64_t n_vocab, std::vector<int32_t>* out, Need need = Need::kOptional);
  // An array of numbers (null entries read as `null_as`).
  JsonFields& Numbers(std::string_view key, std::vector<float>* out, float null_as = 0.0f,
                      Need need = Need::kOptional);
  // An array / object member: *out points into the JSON (nullptr when absent).
  JsonFields& Array(std::string_view key, const nlohmann::json** out, Need need = Need::kOptional);
  JsonFields& Object(std::string_view key, const nlohmann::json** out, Need need = Need::kOptional);

 private:
  // The member to read, or nullptr (absent/null, or an earlier failure); records "required".
  const nlohmann::json* Find(std::string_view key, Need need);
  JsonFields& Wrong(std::string_view key, const std::string& what);

  const nlohmann::json& j_;
  std::string what_;
  Status status_;
};

// Free-standing checks for values that are not object members (array elements, a whole body).
// `name` is how the message calls the value ("'prompt'", "choices[0]").
Status ReadTokenIds(const nlohmann::json& v, std::string_view name, int64_t n_vocab, std::vector<int32_t>* out);

}  // namespace tlr
