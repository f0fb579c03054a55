// Request parsing of the server's endpoints (see server_requests.h).
#include "server/server_requests.h"

#include <nlohmann/json.hpp>

#include "net/protocol.h"
#include "net/server_json.h"
#include "util/json_fields.h"

namespace tlr::server {

using nlohmann::json;

Expected<NextRequest> ParseNextRequest(const json& j, const EngineLimits& limits, int64_t n_vocab) {
  NextRequest nr;
  std::string hash;
  int64_t base = 0, n = 1, top = 0, timeout_ms = 0, lookahead = 0;
  const json* sampling = nullptr;
  JsonFields f(j);
  f.String("session", &nr.session).String("request_id", &nr.request_id).String("prefix_hash", &hash);
  f.Int("base", 0, int64_t{1} << 40, &base).Int("n", 1, limits.max_tokens_per_call, &n);
  f.Int("top_logprobs", 0, 20, &top).Int("lookahead", 0, limits.max_tokens_per_call, &lookahead);
  f.Int("timeout_ms", 0, 3600000, &timeout_ms);
  TLR_RETURN_IF_ERROR(f.status());
  if (nr.session.empty()) return Status::Error("'session' is required");
  if (nr.request_id.size() > 128) return Status::Error("'request_id' is longer than 128 characters");
  if (hash.empty() && base == 0) hash = HashHex(TokenPrefixHash({}));  // nothing to compare
  if (hash.empty()) return Status::Error("'prefix_hash' is required when base > 0");
  if (!ParseHashHex(hash, &nr.prefix_hash)) return Status::Error("'prefix_hash' must be 16 hex digits");
  if (!f.Has("append")) return Status::Error("'append' (token ids) is required");
  const json* heal = nullptr;
  f.TokenIds("append", n_vocab, &nr.append).Object("sampling", &sampling).Array("prefix_bytes", &heal);
  TLR_RETURN_IF_ERROR(f.status());
  if (heal) {  // bytes, not a string: the held-back text may end inside a UTF-8 character
    if (heal->size() > 256) return Status::Error("'prefix_bytes' holds more than 256 bytes");
    for (size_t i = 0; i < heal->size(); ++i) {
      const json& b = (*heal)[i];
      if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() > 255) {
        return Status::Error("'prefix_bytes' must be an array of integers 0..255 (element " + std::to_string(i) +
                             " is " + b.dump().substr(0, 40) + ")");
      }
      nr.heal.push_back(static_cast<char>(b.get<int>()));
    }
  }
  if (sampling) TLR_RETURN_IF_ERROR(GetSampling(*sampling, &nr.sampling).WithPrefix("sampling"));
  nr.base = base;
  nr.n = static_cast<int>(n);
  nr.lookahead = static_cast<int>(lookahead);
  nr.top_logprobs = static_cast<int>(top);
  nr.timeout_s = static_cast<double>(timeout_ms) / 1e3;
  return nr;
}

Expected<ScoreRequest> ParseScoreRequest(const json& j, const EngineLimits& limits, int64_t n_vocab) {
  ScoreRequest sr;
  int64_t top = 0;
  const json* seqs = nullptr;
  JsonFields f(j);
  f.Array("sequences", &seqs, kRequired).Int("top_logprobs", 0, 20, &top);
  TLR_RETURN_IF_ERROR(f.status());
  if (seqs->empty() || seqs->size() > kMaxScoreSequences) {
    return Status::Error("'sequences' must hold 1.." + std::to_string(kMaxScoreSequences) + " sequences of token ids");
  }
  for (size_t i = 0; i < seqs->size(); ++i) {
    std::vector<int32_t> ids;
    TLR_RETURN_IF_ERROR(ReadTokenIds((*seqs)[i], "'sequences[" + std::to_string(i) + "]'", n_vocab, &ids));
    if (ids.empty()) return Status::Error("'sequences[" + std::to_string(i) + "]' is empty");
    if (static_cast<int64_t>(ids.size()) > limits.max_context) {
      return Status::Error("'sequences[" + std::to_string(i) + "]' has " + std::to_string(ids.size()) +
                           " tokens, past the server's context of " + std::to_string(limits.max_context));
    }
    sr.sequences.push_back(std::move(ids));
  }
  sr.top_logprobs = static_cast<int>(top);
  return sr;
}

}  // namespace tlr::server
