// The OpenAI-compatible remote backend: /v1/completions with token-id prompts, or text prompts
// (RemoteOptions::text_prompt) (see remote_llm.h).
#include <nlohmann/json.hpp>

#include "device/remote/remote_protocols.h"
#include "device/remote/remote_replies.h"
#include "net/protocol.h"
#include "util/utf8.h"

namespace tlr {

using nlohmann::json;

OpenAiLlm::OpenAiLlm(const RemoteOptions& opts, const Tokenizer& vocab) : RemoteLlm(opts, vocab) {}

OpenAiLlm::~OpenAiLlm() { StopWorkers(); }

Status OpenAiLlm::CheckServer(bool* reachable) {
  std::string body;
  TLR_RETURN_IF_ERROR(GetForCheck("/v1/models", "is it OpenAI-compatible?", reachable, &body));
  if (!*reachable) return Status::Ok();
  auto models = remote::ParseModelsReply(body, opts_.model);
  if (!models.ok()) return NotTheServer(models.status(), reachable);
  opts_.model = models->model;
  const std::string& fp = models->vocab_fingerprint;
  if (fp.empty()) {
    warning_ = "the server does not report its vocabulary; make sure its model uses the SLM's tokenizer";
  } else if (fp != HashHex(vocab_.Fingerprint())) {
    return VocabularyMismatch(fp);
  }
  return Status::Ok();
}

Expected<LlmReply> OpenAiLlm::Execute(const LlmRequest& req, LlmCall& call, CallError* err) {
  const SamplerParams& sampling = req.sampling;
  const int want = req.n + req.lookahead;
  json body = {{"model", opts_.model},
               {"max_tokens", want},
               {"temperature", sampling.temperature},
               {"top_p", sampling.top_p},
               {"seed", sampling.seed & 0x7fffffffffffffffull},
               {"logprobs", 1}};
  if (opts_.text_prompt) {
    // The engine adds its own BOS; control tokens go as their text (engines parse them back).
    std::span<const int32_t> ids(req.context);
    if (!ids.empty() && ids[0] == vocab_.bos() && vocab_.bos() >= 0) ids = ids.subspan(1);
    std::string text = vocab_.Decode(ids, /*render_special=*/true);
    if (!IsValidUtf8(text)) {
      err->kind = CallFailure::kUnsendable;
      return Status::Error("the context is not whole UTF-8 characters (it ends inside one, or holds bytes that are not "
                           "UTF-8): a text prompt cannot carry it");
    }
    body["prompt"] = std::move(text);
  } else {
    body["prompt"] = req.context;
    body["return_tokens_as_token_ids"] = true;  // vLLM's extension: the reply's tokens as ids
  }
  if (sampling.temperature > 0 && sampling.top_k > 0) body["top_k"] = sampling.top_k;
  CountStat(&RemoteStats::tokens_sent, static_cast<int64_t>(req.context.size()));
  HttpResult h = http_.PostWithRetries("/v1/completions", body.dump(), &call);
  if (h.cancelled) return Status::Error("the call was cancelled");
  if (!h.sent) return NoReply(h, err);
  if (h.status != 200) return ErrorStatus(h, "LLM server error", err);
  auto parsed = remote::ParseCompletionReply(h.body, vocab_, want);
  if (!parsed.ok()) return parsed.status();
  // The engine's own count where it reports one; else what was sent and received.
  LlmWork w;
  w.prefilled = parsed->prefilled >= 0 ? parsed->prefilled : static_cast<int64_t>(req.context.size());
  w.generated = parsed->generated >= 0 ? parsed->generated : static_cast<int64_t>(parsed->tokens.size());
  w.forward_s = -1;
  AddCallWork(w);
  std::vector<int32_t>& tokens = parsed->tokens;
  std::vector<float>& logprobs = parsed->logprobs;
  // The first n are the call's answer; the rest is the LLM's continuation (lookahead).
  LlmReply reply;
  reply.ingested = static_cast<int64_t>(req.context.size());
  reply.hit_limit = parsed->hit_length;
  const size_t n = std::min(tokens.size(), static_cast<size_t>(req.n));
  reply.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n));
  reply.lookahead.assign(tokens.begin() + static_cast<std::ptrdiff_t>(n), tokens.end());
  logprobs.resize(std::min(logprobs.size(), n));
  reply.logprobs = std::move(logprobs);
  return reply;
}

}  // namespace tlr
