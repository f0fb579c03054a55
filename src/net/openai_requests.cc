// OpenAI completion requests and their text (see openai_requests.h).
#include "net/openai_requests.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "model/chat_messages.h"
#include "net/server_json.h"
#include "util/json_fields.h"

namespace tlr {

using nlohmann::json;

namespace {

// Fields that would change the answer's meaning if they were ignored: their no-op values are
// taken (clients such as LangChain send frequency_penalty 0 and logit_bias {} always), anything
// else is refused naming the field, as llama.cpp's server does for what it does not implement.
Status RefuseUnsupported(const json& j, bool chat) {
  auto given = [&](const char* k) -> const json* {
    auto it = j.find(k);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  for (const char* k : {"presence_penalty", "frequency_penalty"}) {
    if (const json* v = given(k); v && !(v->is_number() && v->get<double>() == 0)) {
      return Status::Error(std::string("'") + k + "' is not supported (0 only; 'repetition_penalty' is)");
    }
  }
  if (const json* v = given("logit_bias"); v && !(v->is_object() && v->empty())) {
    return Status::Error("'logit_bias' is not supported ({} only)");
  }
  if (const json* v = given("response_format");
      v && !(v->is_object() && v->value("type", json()) == "text" && v->size() == 1)) {
    return Status::Error("'response_format' is not supported: the answer is plain text ({\"type\": \"text\"} only)");
  }
  for (const char* k : {"tools", "functions"}) {
    if (const json* v = given(k); v && !(v->is_array() && v->empty())) {
      return Status::Error(std::string("'") + k + "' is not supported: this server does not call tools");
    }
  }
  for (const char* k : {"tool_choice", "function_call"}) {
    if (const json* v = given(k); v && !(v->is_string() && (*v == "none" || *v == "auto"))) {
      return Status::Error(std::string("'") + k + "' is not supported: this server does not call tools");
    }
  }
  if (!chat) {
    if (const json* v = given("suffix"); v && !(v->is_string() && v->get<std::string>().empty())) {
      return Status::Error("'suffix' is not supported");
    }
    if (const json* v = given("best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1)) {
      return Status::Error("only best_of = 1 is supported");
    }
  }
  return Status::Ok();
}

Status ParseCommon(const json& j, bool chat, const SamplerParams& defaults, OpenAiRequest* p) {
  p->chat = chat;
  TLR_RETURN_IF_ERROR(RefuseUnsupported(j, chat));
  p->sampling = defaults;
  int64_t max_tokens = chat ? -1 : 16, n = 1;
  bool echo = false;
  JsonFields f(j);
  f.Int("max_tokens", 0, 1 << 30, &max_tokens);
  if (chat) f.Int("max_completion_tokens", 0, 1 << 30, &max_tokens);
  TLR_RETURN_IF_ERROR(f.status());
  f.Int("n", 1, 1, &n);
  if (!f.ok()) return Status::Error("only n = 1 is supported");
  TLR_RETURN_IF_ERROR(server::GetSampling(j, &p->sampling));
  std::string model;  // one model is served whatever the name (as llama.cpp's server); a name is a string
  f.Bool("stream", &p->stream).Bool("return_tokens_as_token_ids", &p->ids_as_tokens).Bool("echo", &echo);
  f.String("model", &model);
  TLR_RETURN_IF_ERROR(f.status());
  if (echo) return Status::Error("'echo' is not supported");
  p->max_tokens = static_cast<int>(max_tokens);
  const json* stream_options = nullptr;
  f.Object("stream_options", &stream_options);
  TLR_RETURN_IF_ERROR(f.status());
  if (stream_options) {
    if (!p->stream) return Status::Error("'stream_options' needs \"stream\": true");
    JsonFields so(*stream_options);
    so.Bool("include_usage", &p->include_usage);
    TLR_RETURN_IF_ERROR(so.status().WithPrefix("stream_options"));
  }
  auto stop = j.find("stop");
  if (stop != j.end() && !stop->is_null()) {
    const Status bad = Status::Error("'stop' must be a string or an array of up to 4 strings");
    if (stop->is_string()) {
      p->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4) {
      for (const json& s : *stop) {
        if (!s.is_string()) return bad;
        p->stop.push_back(s.get<std::string>());
      }
    } else {
      return bad;
    }
    for (const std::string& s : p->stop) {
      if (s.empty()) return Status::Error("'stop' strings must not be empty");
    }
  }
  if (auto pl = j.find("prompt_logprobs"); pl != j.end() && !pl->is_null()) {
    int64_t k = -1;
    f.Int("prompt_logprobs", 0, 20, &k);
    TLR_RETURN_IF_ERROR(f.status());
    p->prompt_logprobs = static_cast<int>(k);
  }
  if (chat) {
    bool lp = false;
    int64_t top = 0;
    f.Bool("logprobs", &lp).Int("top_logprobs", 0, 20, &top);
    TLR_RETURN_IF_ERROR(f.status());
    if (top > 0 && !lp) return Status::Error("'top_logprobs' needs \"logprobs\": true");
    p->logprobs = lp ? static_cast<int>(top) : -1;
  } else {
    int64_t lp = -1;
    f.Int("logprobs", 0, 20, &lp);
    p->logprobs = static_cast<int>(lp);
  }
  return f.status();
}

// One prompt: a string (encoded with BOS) or token ids.
Status ParseOnePrompt(const json& v, const std::string& what, const Tokenizer& tok, std::vector<int32_t>* out) {
  if (v.is_string()) {
    *out = tok.Encode(v.get<std::string>(), true, false);
    return Status::Ok();
  }
  if (v.is_array()) return ReadTokenIds(v, what, tok.n_vocab(), out);
  return Status::Error(what + " must be a string or an array of token ids");
}

Status ParsePrompt(const json& j, const Tokenizer& tok, OpenAiRequest* p) {
  auto it = j.find("prompt");
  if (it == j.end()) return Status::Error("'prompt' is required");
  const json& v = *it;
  // A list of prompts (strings or token-id lists): one choice each, as OpenAI's API and vLLM.
  if (v.is_array() && !v.empty() && (v[0].is_string() || v[0].is_array())) {
    if (v.size() > kMaxPromptBatch) {
      return Status::Error("'prompt' holds " + std::to_string(v.size()) + " prompts; at most " +
                           std::to_string(kMaxPromptBatch) + " in one request");
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string what = v.size() == 1 ? "'prompt'" : "'prompt'[" + std::to_string(i) + "]";
      if (!v[i].is_string() && !v[i].is_array()) {
        return Status::Error(what + " must be a string or an array of token ids (every element of a batch alike)");
      }
      std::vector<int32_t> ids;
      TLR_RETURN_IF_ERROR(ParseOnePrompt(v[i], what, tok, &ids));
      if (ids.empty() && v.size() > 1) return Status::Error(what + " is empty");
      p->prompts.push_back(std::move(ids));
    }
    p->prompt = p->prompts[0];
    return Status::Ok();
  }
  if (!v.is_string() && !v.is_array()) {
    return Status::Error("'prompt' must be a string, an array of token ids, or an array of either");
  }
  TLR_RETURN_IF_ERROR(ParseOnePrompt(v, "'prompt'", tok, &p->prompt));
  p->prompts = {p->prompt};
  return Status::Ok();
}

Status ParseMessages(const json& j, const Tokenizer& tok, const ChatTemplate& chat_template, OpenAiRequest* p) {
  auto it = j.find("messages");
  if (it == j.end()) return Status::Error("'messages' must be a non-empty array");
  TLR_ASSIGN_OR_RETURN(const std::vector<ChatMessage> msgs, ParseChatMessages(*it));
  ChatTemplateOptions opts;
  TLR_RETURN_IF_ERROR(ParseChatTemplateKwargs(j, &opts));
  TLR_ASSIGN_OR_RETURN(const std::string text, chat_template.Apply(msgs, opts));
  p->prompt = tok.Encode(text, false, true);
  p->prompts = {p->prompt};
  return Status::Ok();
}

}  // namespace

SamplerParams OpenAiSamplingDefaults() {
  SamplerParams s;
  s.temperature = 1.0f;
  s.top_k = 0;
  s.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return s;
}

Expected<OpenAiRequest> ParseOpenAiRequest(const json& body, bool chat, const Tokenizer& tok,
                                           const ChatTemplate* chat_template, const SamplerParams& defaults) {
  OpenAiRequest p;
  TLR_RETURN_IF_ERROR(ParseCommon(body, chat, defaults, &p));
  if (chat && !chat_template) return Status::Error("internal error: no chat template");
  TLR_RETURN_IF_ERROR(chat ? ParseMessages(body, tok, *chat_template, &p) : ParsePrompt(body, tok, &p));
  return p;
}

CompletionText::CompletionText(const Tokenizer& tok, std::vector<std::string> stop) : dec_(tok), stop_(std::move(stop)) {
  for (const std::string& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

bool CompletionText::Push(int32_t id, bool end) {
  if (end) {
    text_ += dec_.Flush();
    return true;
  }
  const size_t before = text_.size();
  text_ += dec_.Push(id);
  for (const std::string& s : stop_) {
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) {
      text_.resize(at);
      stopped_ = true;
      return false;
    }
  }
  return true;
}

void CompletionText::Finish() {
  if (!stopped_) text_ += dec_.Flush();
}

std::string CompletionText::TakeReady(bool final) {
  size_t ready = text_.size();
  if (!final && max_stop_ > 1) {
    ready = ready > max_stop_ - 1 ? ready - (max_stop_ - 1) : 0;
    // Whole characters only: a piece ending inside one would reach the client as U+FFFD.
    while (ready > sent_ && (static_cast<unsigned char>(text_[ready]) & 0xC0) == 0x80) --ready;
  }
  if (ready <= sent_) return "";
  std::string out = text_.substr(sent_, ready - sent_);
  sent_ = ready;
  return out;
}

}  // namespace tlr
