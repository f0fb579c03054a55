// Chat prompts exactly as the model was trained (model layer): renders the model's own
// tokenizer.chat_template (GGUF metadata; a tokenizer_config.json beside a tokenizer.json when
// a file is made from one) with the Jinja interpreter of jinja/template.h, the way Hugging
// Face's apply_chat_template does. Files without a template fall back to the built-in formats
// of chat.h. A template the interpreter cannot render exactly is an error naming what it
// lacks, never a silently different prompt.
//
// Thread-safety: a ChatTemplate is immutable after construction; Apply may run concurrently.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "model/chat.h"
#include "model/jinja/template.h"
#include "util/status.h"

namespace tlr {

class Model;

struct ChatTemplateOptions {
  // End with the assistant header so the model writes the reply.
  bool add_generation_prompt = true;
  // Passed to the template as enable_thinking (Qwen3); unset: not passed (the template's default).
  std::optional<bool> enable_thinking;
  // The clock of strftime_now() (Llama 3.1 dates its system header); unset: local time now.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  // A Jinja chat template and the special-token texts it may print (unset: undefined in the
  // template, as when tokenizer_config.json has none).
  static Expected<ChatTemplate> FromJinja(const std::string& source, std::optional<std::string> bos_token,
                                          std::optional<std::string> eos_token);
  static ChatTemplate Builtin(ChatFormat format);
  // The model's tokenizer.chat_template, else the built-in format of its architecture.
  static Expected<ChatTemplate> ForModel(const Model& model);

  // The prompt text, special tokens written out (tokenize it with parse_special and without
  // adding BOS: the template writes BOS itself where the model expects one).
  Expected<std::string> Apply(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& opts = {}) const;
  // "the file's chat template" or "built-in chatml" / "built-in llama3" (for --verbose).
  std::string Describe() const;

 private:
  std::optional<jinja::Template> jinja_;
  ChatFormat builtin_ = ChatFormat::kChatMl;
  std::optional<std::string> bos_, eos_;
};

// ChatTemplate::ForModel(model) then Apply: what the front ends call to build a chat prompt.
Expected<std::string> ApplyChatTemplate(const Model& model, const std::vector<ChatMessage>& messages,
                                        const ChatTemplateOptions& opts = {});

// The "chat_template" of the tokenizer_config.json beside a Hugging Face tokenizer.json (the
// "default" one when it lists several); "" when there is no such file or key.
Expected<std::string> ChatTemplateBesideTokenizerJson(const std::string& tokenizer_json_path);

}  // namespace tlr
