// Request parsing of the server's native endpoint (server layer, internal to the server): a JSON
// body in, a checked request or an error naming the field out. The handler in llm_server.cc
// calls it, and so does the request fuzzer (server_request_fuzz.cc), which drives it and the
// OpenAI endpoints' parsing (shared with the device: net/openai_requests.h) without a socket.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "server/llm_engine.h"
#include "util/status.h"

namespace tlr::server {

// POST /tlr/v1/next.
Expected<NextRequest> ParseNextRequest(const nlohmann::json& body, const EngineLimits& limits, int64_t n_vocab);

// POST /tlr/v1/score: {"sequences": [[token ids], ...], "top_logprobs": k}.
struct ScoreRequest {
  std::vector<std::vector<int32_t>> sequences;
  int top_logprobs = 0;
};
inline constexpr size_t kMaxScoreSequences = 64;
Expected<ScoreRequest> ParseScoreRequest(const nlohmann::json& body, const EngineLimits& limits, int64_t n_vocab);

}  // namespace tlr::server
