// Request parsing of the server's endpoints (server layer, internal to the server): a JSON body
// in, a checked request or an error naming the field out. The handlers in llm_server.cc and
// openai_api.cc call these, and so does the request fuzzer (server_request_fuzz.cc), which
// drives them without a socket. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "server/llm_engine.h"
#include "util/status.h"

namespace tlr::server {

// POST /tlr/v1/next.
Expected<NextRequest> ParseNextRequest(const nlohmann::json& body, const EngineLimits& limits, int64_t n_vocab);

// POST /v1/completions and /v1/chat/completions.
struct CompletionParams {
  std::vector<int32_t> prompt;
  int max_tokens = 16;             // -1 (chat, not given): as many as fit
  SamplerParams sampling;
  int logprobs = -1;               // -1: none; else top-k count (0 = just the chosen token)
  std::vector<std::string> stop;
  bool stream = false;
  bool ids_as_tokens = false;      // vLLM's return_tokens_as_token_ids
  bool chat = false;
};
// chat_template renders the messages of a chat request (required when chat).
Expected<CompletionParams> ParseCompletionRequest(const nlohmann::json& body, bool chat, const Tokenizer& tok,
                                                  const ChatTemplate* chat_template);

}  // namespace tlr::server
