// Chat prompt formats (model layer). See chat.h.
#include "model/chat.h"

#include "model/model.h"

namespace tlr {

ChatFormat DetectChatFormat(const std::string& tmpl, const std::string& arch) {
  if (tmpl.find("<|start_header_id|>") != std::string::npos) return ChatFormat::kLlama3;
  if (tmpl.find("<|im_start|>") != std::string::npos) return ChatFormat::kChatMl;
  if (tmpl.find("<start_of_turn>") != std::string::npos || arch == "gemma3") return ChatFormat::kGemma;
  return arch == "llama" ? ChatFormat::kLlama3 : ChatFormat::kChatMl;
}

const char* ChatFormatName(ChatFormat f) {
  return f == ChatFormat::kLlama3 ? "llama3" : f == ChatFormat::kGemma ? "gemma" : "chatml";
}

namespace {
std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}
}  // namespace

std::string FormatChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt) {
  std::string out;
  if (format == ChatFormat::kLlama3) {
    out = "<|begin_of_text|>";
    for (const auto& m : messages) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + Trim(m.content) + "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  } else if (format == ChatFormat::kGemma) {
    // Gemma has no system turn: its text opens the first user turn (as Gemma 3's template).
    out = "<bos>";
    std::string prefix;
    for (const auto& m : messages) {
      if (m.role == "system") {
        prefix += Trim(m.content) + "\n\n";
        continue;
      }
      out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : m.role) + "\n" + prefix +
             Trim(m.content) + "<end_of_turn>\n";
      prefix.clear();
    }
    if (add_generation_prompt) out += "<start_of_turn>model\n";
  } else {
    for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
  }
  return out;
}

ChatFormat ModelChatFormat(const Model& model) {
  std::string tmpl;
  if (auto t = model.file().GetString("tokenizer.chat_template"); t.ok()) tmpl = *t;
  return DetectChatFormat(tmpl, model.config().arch_name);
}

}  // namespace tlr
