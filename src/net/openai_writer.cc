// The OpenAI response writer (see openai_writer.h).
#include "net/openai_writer.h"

#include <ctime>

namespace tlr {

using nlohmann::json;

OpenAiWriter::OpenAiWriter(bool chat, uint64_t n, std::string model)
    : chat_(chat),
      id_(std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(n)),
      model_(std::move(model)),
      created_(static_cast<int64_t>(std::time(nullptr))) {}

json OpenAiWriter::Envelope(const char* object, json choices) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}, {"choices", std::move(choices)}};
}

json OpenAiWriter::Choice(size_t index, const std::string& text, const std::string& finish, json logprobs) const {
  json c = {{"index", index}, {"finish_reason", finish}, {"logprobs", std::move(logprobs)}};
  if (chat_) c["message"] = {{"role", "assistant"}, {"content", text}};
  else c["text"] = text;
  return c;
}

json OpenAiWriter::Response(json choices, json usage) const {
  json r = Envelope(chat_ ? "chat.completion" : "text_completion", std::move(choices));
  r["usage"] = std::move(usage);
  return r;
}

json OpenAiWriter::RoleChunk() const {
  json c = {{"index", 0}, {"finish_reason", nullptr}, {"logprobs", nullptr},
            {"delta", {{"role", "assistant"}, {"content", ""}}}};
  return Envelope("chat.completion.chunk", json::array({std::move(c)}));
}

json OpenAiWriter::Chunk(const std::string& delta, const json& finish, json logprobs) const {
  json c = {{"index", 0}, {"finish_reason", finish}, {"logprobs", std::move(logprobs)}};
  if (chat_) c["delta"] = !finish.is_null() && delta.empty() ? json::object() : json{{"content", delta}};
  else c["text"] = delta;
  return Envelope(chat_ ? "chat.completion.chunk" : "text_completion", json::array({std::move(c)}));
}

json OpenAiWriter::UsageChunk(json usage) const {
  json r = Envelope(chat_ ? "chat.completion.chunk" : "text_completion", json::array());
  r["usage"] = std::move(usage);
  return r;
}

json OpenAiWriter::Usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace tlr
