// OpenAI chat messages (see chat_messages.h).
#include "model/chat_messages.h"

#include "util/json_fields.h"

namespace tlr {

using nlohmann::json;

Expected<std::vector<ChatMessage>> ParseChatMessages(const json& messages) {
  if (!messages.is_array() || messages.empty()) return Status::Error("'messages' must be a non-empty array");
  if (messages.size() > kMaxChatMessages) {
    return Status::Error("'messages' has " + std::to_string(messages.size()) + " messages; at most " +
                         std::to_string(kMaxChatMessages) + " are taken");
  }
  std::vector<ChatMessage> msgs;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "message " + std::to_string(i);
    if (!m.is_object()) return Status::Error(where + " is not an object");
    ChatMessage cm;
    JsonFields f(m, "each message");
    f.String("role", &cm.role, kRequired);
    if (!f.ok()) return Status::Error(where + " needs a string 'role'");
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "developer") {
      return Status::Error(where + ": unknown message role '" + cm.role + "' (system, developer, user, assistant)");
    }
    if (cm.role == "developer") cm.role = "system";
    auto c = m.find("content");
    if (c != m.end() && c->is_string()) {
      cm.content = c->get<std::string>();
    } else if (c != m.end() && c->is_array()) {
      for (const json& part : *c) {
        std::string type, text;
        JsonFields pf(part);
        pf.String("type", &type, kRequired).String("text", &text, kRequired);
        if (!pf.ok() || type != "text") {
          return Status::Error(where + ": content parts must be {\"type\": \"text\", \"text\": ...}");
        }
        cm.content += text;
      }
    } else if (c != m.end() && !c->is_null()) {
      return Status::Error(where + ": 'content' must be a string or an array of text parts");
    }
    msgs.push_back(std::move(cm));
  }
  return msgs;
}

Status ParseChatTemplateKwargs(const json& body, ChatTemplateOptions* opts) {
  const json* kwargs = nullptr;
  JsonFields top(body);
  top.Object("chat_template_kwargs", &kwargs);
  if (!top.ok()) return top.status();
  if (!kwargs) return Status::Ok();
  for (const auto& [key, value] : kwargs->items()) {
    if (key != "enable_thinking") {
      return Status::Error("chat_template_kwargs: '" + key + "' is not supported (enable_thinking is)");
    }
    if (!value.is_boolean()) return Status::Error("chat_template_kwargs: 'enable_thinking' must be a boolean");
    opts->enable_thinking = value.get<bool>();
  }
  return Status::Ok();
}

}  // namespace tlr
