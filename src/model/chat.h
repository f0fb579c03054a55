// Chat prompts (model layer): formats a conversation the way the model was trained, from the
// GGUF's tokenizer.chat_template when it is one of the formats TLR knows (ChatML as in
// Qwen2.5-Instruct and Qwen3, Llama 3, Gemma's <start_of_turn>), else the architecture's
// built-in format.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace tlr {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

enum class ChatFormat { kChatMl, kLlama3, kGemma };

// Picks the format from a chat template (may be empty) and the architecture name.
ChatFormat DetectChatFormat(const std::string& chat_template, const std::string& arch);
const char* ChatFormatName(ChatFormat f);
// The format for a loaded model (its tokenizer.chat_template, else its architecture).
class Model;
ChatFormat ModelChatFormat(const Model& model);

// The prompt text (special tokens written out; tokenize it with parse_special), ending with
// the assistant header when add_generation_prompt. The Llama 3 form starts with BOS text.
std::string FormatChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt);

}  // namespace tlr
