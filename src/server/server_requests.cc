// Request parsing of the server's endpoints (see server_requests.h).
#include "server/server_requests.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "net/chat_messages.h"
#include "net/protocol.h"
#include "net/server_json.h"
#include "util/json_fields.h"

namespace tlr::server {

using nlohmann::json;

Expected<NextRequest> ParseNextRequest(const json& j, const EngineLimits& limits, int64_t n_vocab) {
  NextRequest nr;
  std::string hash;
  int64_t base = 0, n = 1, top = 0, timeout_ms = 0, lookahead = 0;
  const json* sampling = nullptr;
  JsonFields f(j);
  f.String("session", &nr.session).String("request_id", &nr.request_id).String("prefix_hash", &hash);
  f.Int("base", 0, int64_t{1} << 40, &base).Int("n", 1, limits.max_tokens_per_call, &n);
  f.Int("top_logprobs", 0, 20, &top).Int("lookahead", 0, limits.max_tokens_per_call, &lookahead);
  f.Int("timeout_ms", 0, 3600000, &timeout_ms);
  TLR_RETURN_IF_ERROR(f.status());
  if (nr.session.empty()) return Status::Error("'session' is required");
  if (nr.request_id.size() > 128) return Status::Error("'request_id' is longer than 128 characters");
  if (hash.empty() && base == 0) hash = HashHex(TokenPrefixHash({}));  // nothing to compare
  if (hash.empty()) return Status::Error("'prefix_hash' is required when base > 0");
  if (!ParseHashHex(hash, &nr.prefix_hash)) return Status::Error("'prefix_hash' must be 16 hex digits");
  if (!f.Has("append")) return Status::Error("'append' (token ids) is required");
  f.TokenIds("append", n_vocab, &nr.append).Object("sampling", &sampling);
  TLR_RETURN_IF_ERROR(f.status());
  if (sampling) TLR_RETURN_IF_ERROR(GetSampling(*sampling, &nr.sampling).WithPrefix("sampling"));
  nr.base = base;
  nr.n = static_cast<int>(n);
  nr.lookahead = static_cast<int>(lookahead);
  nr.top_logprobs = static_cast<int>(top);
  nr.timeout_s = static_cast<double>(timeout_ms) / 1e3;
  return nr;
}

namespace {

Status ParseCommon(const json& j, bool chat, CompletionParams* p) {
  p->chat = chat;
  p->sampling.temperature = 1.0f;  // OpenAI's defaults
  p->sampling.top_k = 0;
  p->sampling.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  int64_t max_tokens = chat ? -1 : 16, n = 1;
  bool echo = false;
  JsonFields f(j);
  f.Int("max_tokens", 0, 1 << 30, &max_tokens);
  if (chat) f.Int("max_completion_tokens", 0, 1 << 30, &max_tokens);
  TLR_RETURN_IF_ERROR(f.status());
  f.Int("n", 1, 1, &n);
  if (!f.ok()) return Status::Error("only n = 1 is supported");
  TLR_RETURN_IF_ERROR(GetSampling(j, &p->sampling));
  f.Bool("stream", &p->stream).Bool("return_tokens_as_token_ids", &p->ids_as_tokens).Bool("echo", &echo);
  TLR_RETURN_IF_ERROR(f.status());
  if (echo) return Status::Error("'echo' is not supported");
  p->max_tokens = static_cast<int>(max_tokens);
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
  if (chat) {
    bool lp = false;
    int64_t top = 0;
    f.Bool("logprobs", &lp).Int("top_logprobs", 0, 20, &top);
    p->logprobs = lp ? static_cast<int>(top) : -1;
  } else {
    int64_t lp = -1;
    f.Int("logprobs", 0, 20, &lp);
    p->logprobs = static_cast<int>(lp);
  }
  return f.status();
}

Status ParsePrompt(const json& j, const Tokenizer& tok, CompletionParams* p) {
  auto it = j.find("prompt");
  if (it == j.end()) return Status::Error("'prompt' is required");
  const json* v = &*it;
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) v = &(*v)[0];
  if (v->is_string()) {
    p->prompt = tok.Encode(v->get<std::string>(), true, false);
    return Status::Ok();
  }
  if (v->is_array()) return ReadTokenIds(*v, "'prompt'", tok.n_vocab(), &p->prompt);
  return Status::Error("'prompt' must be a string, an array of token ids, or a one-element array of either");
}

Status ParseMessages(const json& j, const Tokenizer& tok, const ChatTemplate& chat_template, CompletionParams* p) {
  auto it = j.find("messages");
  if (it == j.end()) return Status::Error("'messages' must be a non-empty array");
  TLR_ASSIGN_OR_RETURN(const std::vector<ChatMessage> msgs, ParseChatMessages(*it));
  ChatTemplateOptions opts;
  TLR_RETURN_IF_ERROR(ParseChatTemplateKwargs(j, &opts));
  TLR_ASSIGN_OR_RETURN(const std::string text, chat_template.Apply(msgs, opts));
  p->prompt = tok.Encode(text, false, true);
  return Status::Ok();
}

}  // namespace

Expected<CompletionParams> ParseCompletionRequest(const json& body, bool chat, const Tokenizer& tok,
                                                  const ChatTemplate* chat_template) {
  CompletionParams p;
  TLR_RETURN_IF_ERROR(ParseCommon(body, chat, &p));
  if (chat && !chat_template) return Status::Error("internal error: no chat template");
  TLR_RETURN_IF_ERROR(chat ? ParseMessages(body, tok, *chat_template, &p) : ParsePrompt(body, tok, &p));
  return p;
}

}  // namespace tlr::server
