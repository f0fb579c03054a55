// The OpenAI-compatible remote backend: /v1/completions with token-id prompts (see remote_llm.h).
#include <nlohmann/json.hpp>

#include "system/protocol.h"
#include "system/remote_protocols.h"

namespace tlr {

using nlohmann::json;

OpenAiLlm::OpenAiLlm(const RemoteOptions& opts, const Tokenizer& vocab) : RemoteLlm(opts, vocab) {}

OpenAiLlm::~OpenAiLlm() { StopWorkers(); }

Status OpenAiLlm::CheckServer(bool* reachable) {
  std::string body;
  TLR_RETURN_IF_ERROR(GetForCheck("/v1/models", "is it OpenAI-compatible?", reachable, &body));
  if (!*reachable) return Status::Ok();
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("the server's answer is not JSON");
  const json data = j.value("data", json::array());
  if (!data.is_array() || data.empty() || !data[0].is_object()) return Status::Error("the server lists no models");
  if (opts_.model.empty()) opts_.model = data[0].value("id", "");
  std::string fp;
  for (const json& m : data) {
    if (m.is_object() && m.value("id", "") == opts_.model) fp = m.value("tlr_vocab_fingerprint", "");
  }
  if (fp.empty()) {
    warning_ = "the server does not report its vocabulary; make sure its model uses the SLM's tokenizer";
  } else if (fp != HashHex(vocab_.Fingerprint())) {
    return Status::Error("the server's LLM uses a different vocabulary (fingerprint " + fp + ", the SLM's is " +
                         HashHex(vocab_.Fingerprint()) + "): token routing needs one tokenizer");
  }
  return Status::Ok();
}

Expected<LlmReply> OpenAiLlm::Execute(const LlmRequest& req, LlmCall& call, bool* outage) {
  const SamplerParams& sampling = req.sampling;
  const int want = req.n + req.lookahead;
  json body = {{"model", opts_.model},
               {"prompt", req.context},
               {"max_tokens", want},
               {"temperature", sampling.temperature},
               {"top_p", sampling.top_p},
               {"seed", sampling.seed & 0x7fffffffffffffffull},
               {"logprobs", 1},
               {"return_tokens_as_token_ids", true}};
  if (sampling.temperature > 0 && sampling.top_k > 0) body["top_k"] = sampling.top_k;
  CountStat(&RemoteStats::tokens_sent, static_cast<int64_t>(req.context.size()));
  HttpResult h = http_.PostWithRetries("/v1/completions", body.dump(), &call);
  if (h.cancelled) return Status::Error("the call was cancelled");
  if (!h.sent) {
    *outage = true;
    return Status::Error("LLM server unreachable: " + h.error);
  }
  if (h.status != 200) {
    *outage = h.status >= 500;
    return Status::Error("LLM server error " + std::to_string(h.status) + ": " + ErrorMessage(h.body));
  }
  json j = json::parse(h.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
    return Status::Error("the LLM server's completion reply is malformed");
  }
  const json& choice = j["choices"][0];
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  auto valid = [&](int64_t id) { return id >= 0 && id < vocab_.n_vocab(); };
  // 1. tlr serve's token ids; 2. vLLM's "token_id:N" strings; 3. the text, tokenized.
  if (j.contains("tlr") && j["tlr"].is_object() && j["tlr"].contains("token_ids") && j["tlr"]["token_ids"].is_array()) {
    for (const json& t : j["tlr"]["token_ids"]) {
      if (!t.is_number_integer() || !valid(t.get<int64_t>())) return Status::Error("the LLM server returned a token outside the vocabulary");
      tokens.push_back(t.get<int32_t>());
    }
  } else if (choice.contains("logprobs") && choice["logprobs"].is_object() && choice["logprobs"].contains("tokens") &&
             choice["logprobs"]["tokens"].is_array()) {
    for (const json& t : choice["logprobs"]["tokens"]) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s.rfind("token_id:", 0) != 0) {
        tokens.clear();
        break;
      }
      const int64_t id = std::strtoll(s.c_str() + 9, nullptr, 10);
      if (!valid(id)) return Status::Error("the LLM server returned a token outside the vocabulary");
      tokens.push_back(static_cast<int32_t>(id));
    }
  }
  if (tokens.empty()) {
    const std::string text = choice.value("text", "");
    if (text.empty()) {
      // An empty completion: the engine stopped at its end-of-generation token.
      tokens.push_back(vocab_.eos());
    } else {
      tokens = vocab_.Encode(text);
      if (static_cast<int>(tokens.size()) > want) tokens.resize(static_cast<size_t>(want));
    }
  }
  if (choice.contains("logprobs") && choice["logprobs"].is_object() && choice["logprobs"].contains("token_logprobs") &&
      choice["logprobs"]["token_logprobs"].is_array()) {
    for (const json& l : choice["logprobs"]["token_logprobs"]) logprobs.push_back(l.is_number() ? l.get<float>() : 0.0f);
  }
  // Our server reports the end token in token_ids; engines that stop silently ("stop" with
  // fewer tokens than asked) ended at theirs.
  if (static_cast<int>(tokens.size()) < want && choice.value("finish_reason", "") == "stop" &&
      !vocab_.IsEndOfGeneration(tokens.back())) {
    tokens.push_back(vocab_.eos());
  }
  // The first n are the call's answer; the rest is the LLM's continuation (lookahead).
  LlmReply reply;
  reply.ingested = static_cast<int64_t>(req.context.size());
  const size_t n = std::min(tokens.size(), static_cast<size_t>(req.n));
  reply.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n));
  reply.lookahead.assign(tokens.begin() + static_cast<std::ptrdiff_t>(n), tokens.end());
  logprobs.resize(std::min(logprobs.size(), n));
  reply.logprobs = std::move(logprobs);
  return reply;
}

}  // namespace tlr
