// The responses of the OpenAI-compatible endpoints (net layer), one writer for `tlr serve`'s
// /v1/completions and /v1/chat/completions and the device's routed ones (`tlr ui`): the id and
// object names, choices (text, or the assistant message for chat), stream chunks (the role first,
// then deltas, the finish reason last), usage and the stream's end, in OpenAI's and vLLM's shapes.
// One writer per request; pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tlr {

class OpenAiWriter {
 public:
  // `n`: unique per request (ids "chatcmpl-N" / "cmpl-N"); `created` is now.
  OpenAiWriter(bool chat, uint64_t n, std::string model);

  bool chat() const { return chat_; }
  const std::string& id() const { return id_; }

  // One choice of a whole response: `text` as the choice's "text", or for chat as the assistant
  // message; `logprobs`: null or the request's logprobs in the endpoint's shape.
  nlohmann::json Choice(size_t index, const std::string& text, const std::string& finish,
                        nlohmann::json logprobs = nullptr) const;
  // The whole response.
  nlohmann::json Response(nlohmann::json choices, nlohmann::json usage) const;

  // A chat stream's first chunk: the assistant's role, no content yet.
  nlohmann::json RoleChunk() const;
  // A stream chunk of choice 0 carrying `delta`; `finish` null until the last chunk (whose chat
  // delta is empty when no text is left).
  nlohmann::json Chunk(const std::string& delta, const nlohmann::json& finish = nullptr,
                       nlohmann::json logprobs = nullptr) const;
  // The chunk stream_options.include_usage asks for: usage and no choices.
  nlohmann::json UsageChunk(nlohmann::json usage) const;

  // {"prompt_tokens", "completion_tokens", "total_tokens"}.
  static nlohmann::json Usage(int64_t prompt_tokens, int64_t completion_tokens);
  // "stop" when the generation ended itself (end of generation, a stop string), else "length".
  static const char* FinishReason(bool stopped) { return stopped ? "stop" : "length"; }
  // The stream's last event.
  static constexpr const char* kDone = "data: [DONE]\n\n";

 private:
  nlohmann::json Envelope(const char* object, nlohmann::json choices) const;

  bool chat_;
  std::string id_, model_;
  int64_t created_;
};

}  // namespace tlr
