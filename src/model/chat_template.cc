// Chat templates rendered like Hugging Face's apply_chat_template (model layer). See
// chat_template.h.
#include "model/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/gguf/gguf_keys.h"
#include "model/model.h"

namespace tlr {

Expected<ChatTemplate> ChatTemplate::FromJinja(const std::string& source, std::optional<std::string> bos_token,
                                               std::optional<std::string> eos_token) {
  auto t = jinja::Template::Parse(source);
  if (!t.ok()) return t.status().WithPrefix("chat template");
  ChatTemplate c;
  c.jinja_ = std::move(t).value();
  c.bos_ = std::move(bos_token);
  c.eos_ = std::move(eos_token);
  return c;
}

ChatTemplate ChatTemplate::Builtin(ChatFormat format) {
  ChatTemplate c;
  c.builtin_ = format;
  return c;
}

Expected<ChatTemplate> ChatTemplate::ForModel(const Model& model) {
  auto src = model.file().GetString(gguf_keys::kTokChatTemplate);
  if (!src.ok() || src->empty()) return Builtin(DetectChatFormat("", model.config().arch_name));
  const Tokenizer& tok = model.tokenizer();
  auto special = [&tok](int32_t id) -> std::optional<std::string> {
    if (!tok.IsValidId(id)) return std::nullopt;
    return tok.Piece(id, /*render_special=*/true);
  };
  return FromJinja(*src, special(tok.bos()), special(tok.vocab().eos_id));
}

Expected<std::string> ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                          const ChatTemplateOptions& opts) const {
  if (!jinja_) return FormatChat(builtin_, messages, opts.add_generation_prompt);
  using jinja::Value;
  std::vector<Value> msgs;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.Set("role", Value(m.role));
    d.Set("content", Value(m.content));
    msgs.push_back(Value::MakeDict(std::move(d)));
  }
  jinja::Dict vars;
  vars.Set("messages", Value::List(std::move(msgs)));
  vars.Set("tools", Value::None());  // as apply_chat_template passes them without tools
  vars.Set("documents", Value::None());
  vars.Set("add_generation_prompt", Value(opts.add_generation_prompt));
  if (opts.enable_thinking) vars.Set("enable_thinking", Value(*opts.enable_thinking));
  if (bos_) vars.Set("bos_token", Value(*bos_));
  if (eos_) vars.Set("eos_token", Value(*eos_));
  std::tm now{};
  if (opts.now) {
    now = *opts.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  vars.Set("strftime_now", Value::Func("strftime_now", [now](const jinja::CallArgs& a, int line) {
             if (a.pos.size() != 1 || !a.pos[0].IsString()) throw jinja::Error{"strftime_now() needs one format string", line};
             char buf[256];
             const size_t n = std::strftime(buf, sizeof(buf), a.pos[0].AsString().c_str(), &now);
             return Value(std::string(buf, n));
           }));
  auto out = jinja_->Render(vars);
  if (!out.ok()) return out.status().WithPrefix("chat template");
  return out;
}

std::string ChatTemplate::Describe() const {
  return jinja_ ? "the file's chat template" : std::string("built-in ") + ChatFormatName(builtin_);
}

Expected<std::string> ApplyChatTemplate(const Model& model, const std::vector<ChatMessage>& messages,
                                        const ChatTemplateOptions& opts) {
  TLR_ASSIGN_OR_RETURN(const ChatTemplate t, ChatTemplate::ForModel(model));
  return t.Apply(messages, opts);
}

Expected<std::string> ChatTemplateBesideTokenizerJson(const std::string& tokenizer_json_path) {
  const auto path = std::filesystem::path(tokenizer_json_path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::string();
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return Status::Error("cannot read '" + path.string() + "'");
  const nlohmann::json cfg = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded() || !cfg.is_object()) return Status::Error("'" + path.string() + "' is not a JSON object");
  const auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const auto& t : *it) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string()) {
        return t["template"].get<std::string>();
      }
    }
  }
  return Status::Error("'" + path.string() + "': chat_template is neither a string nor a list with a \"default\" entry");
}

}  // namespace tlr
