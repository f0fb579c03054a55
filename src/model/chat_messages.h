// OpenAI chat messages (model layer: what the server's /v1/chat/completions, the device's
// conversations and router training's chat rows all read): the `messages` array of a request or
// a fine-tuning row, and the template variables of `chat_template_kwargs` as vLLM and SGLang
// take them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/chat.h"
#include "model/chat_template.h"
#include "util/status.h"

namespace tlr {

// At most this many messages in one conversation (a request with more is refused).
inline constexpr size_t kMaxChatMessages = 4096;

// A non-empty array of {"role": "system"|"developer"|"user"|"assistant", "content": string,
// array of {"type": "text", "text": ...} parts, or null}; "developer" is read as "system".
// Errors name what was wrong ("message 3: unknown role 'robot' ...").
Expected<std::vector<ChatMessage>> ParseChatMessages(const nlohmann::json& messages);

// `chat_template_kwargs` of a request body (absent: nothing set); only enable_thinking is
// supported.
Status ParseChatTemplateKwargs(const nlohmann::json& body, ChatTemplateOptions* opts);

}  // namespace tlr
