// Router training's LLM behind a server (see remote_label_llm.h).
#include "device/labels/remote_label_llm.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "device/remote/remote_replies.h"
#include "net/protocol.h"
#include "util/json_fields.h"

namespace tlr {

using nlohmann::json;

namespace {

constexpr size_t kScoreSequencesPerRequest = 16;  // tlr serve takes up to 64
constexpr size_t kScoreTokensPerRequest = 4096;
constexpr int kRefusalRetries = 8;  // refusals with a Retry-After waited out per request

}  // namespace

RemoteLabelLlm::RemoteLabelLlm(const RemoteOptions& opts, const Tokenizer& vocab)
    : opts_(opts), vocab_(vocab), http_(opts.http) {}

Expected<std::unique_ptr<RemoteLabelLlm>> RemoteLabelLlm::Connect(const RemoteOptions& opts, const Tokenizer& vocab) {
  TLR_RETURN_IF_ERROR(HttpTransport::Validate(opts.http));
  std::unique_ptr<RemoteLabelLlm> r(new RemoteLabelLlm(opts, vocab));
  const bool native = opts.protocol == RemoteProtocol::kTlr;
  const std::string path = native ? "/tlr/v1/info" : "/v1/models";
  HttpResult h = r->http_.Request("GET", path, "");
  if (!h.sent) {
    return Status::Error("cannot reach the LLM server at " + opts.http.url + " (" + h.error + ")" +
                         (h.tls_failure ? ": the certificate is not trusted; give its CA with --ca-file" : ""));
  }
  if (h.status == 401 || h.status == 403) {
    return Status::Error("the server at " + opts.http.url + " refused the API key (" + remote::ErrorMessage(h.body) + ")");
  }
  if (h.status != 200) {
    return Status::Error("the server at " + opts.http.url + " answered " + std::to_string(h.status) + " to " + path +
                         (native ? " (is it `tlr serve`? for other engines use --backend openai)" : " (is it OpenAI-compatible?)"));
  }
  std::string fp;
  if (native) {
    auto info = remote::ParseInfoReply(h.body);
    if (!info.ok()) return info.status();
    fp = info->vocab_fingerprint;
    // Optional facts (a reply without them is still tlr serve's): the context limit and the
    // model's fingerprint.
    auto j = ParseJson(h.body);
    if (j.ok() && j->is_object()) {
      auto lim = j->find("limits");
      if (lim != j->end() && lim->is_object() && lim->contains("max_context") && (*lim)["max_context"].is_number_integer()) {
        r->max_context_ = std::max<int64_t>(0, (*lim)["max_context"].get<int64_t>());
      }
      auto fpj = j->find("fingerprint");
      auto namej = j->find("name");
      if (fpj != j->end() && fpj->is_string() && !fpj->get<std::string>().empty()) {
        r->model_id_ = "fingerprint " + fpj->get<std::string>();
      } else {
        r->model_id_ = "tlr serve model " + (namej != j->end() && namej->is_string() ? namej->get<std::string>() : "?");
      }
    }
  } else {
    auto models = remote::ParseModelsReply(h.body, opts.model);
    if (!models.ok()) return models.status();
    fp = models->vocab_fingerprint;
    if (r->opts_.model.empty()) r->opts_.model = models->model;
    r->model_id_ = "served model " + r->opts_.model;
  }
  if (!fp.empty() && fp != HashHex(vocab.Fingerprint())) {
    return Status::Error("the server's LLM uses a different vocabulary (fingerprint " + fp + ", expected " +
                         HashHex(vocab.Fingerprint()) + "): give the LLM's tokenizer (--llm-tokenizer FILE, or server "
                         "for tlr serve) to label through a vocabulary bridge");
  }
  return r;
}

std::string RemoteLabelLlm::name() const {
  return std::string(RemoteProtocolName(opts_.protocol)) + " server " + opts_.http.url +
         (opts_.model.empty() ? "" : " (" + opts_.model + ")");
}

Expected<std::string> RemoteLabelLlm::Post(const std::string& path, const std::string& body) {
  HttpResult h = http_.PostWithRetries(path, body);
  // A server that says when to come back (429, 503 with Retry-After: busy, its KV budget full
  // with other clients' work) is waited out a few times: one refusal must not end a labelling
  // run of hours.
  for (int waited = 0; waited < kRefusalRetries && h.sent && (h.status == 429 || h.status == 503) && h.retry_after_s >= 0;
       ++waited) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(h.retry_after_s, 0.05, 30.0)));
    h = http_.PostWithRetries(path, body);
  }
  if (!h.sent) {
    return Status::Error("the LLM server at " + opts_.http.url + " did not answer " + path + " (" + h.error +
                         (h.timed_out ? "; raise --llm-timeout for long sequences" : "") + ")");
  }
  if (h.status != 200) {
    return Status::Error("the LLM server at " + opts_.http.url + " answered " + std::to_string(h.status) + " to " + path +
                         ": " + remote::ErrorMessage(h.body));
  }
  return std::move(h.body);
}

Status RemoteLabelLlm::ForEach(size_t n, const std::function<Status(size_t)>& f) {
  std::mutex mu;
  size_t next = 0;
  Status first = Status::Ok();
  auto worker = [&] {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> l(mu);
        if (next >= n || !first.ok()) return;
        i = next++;
      }
      Status s = f(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(mu);
        if (first.ok()) first = s;
      }
    }
  };
  const size_t threads = std::min<size_t>(n, static_cast<size_t>(std::max(1, opts_.max_in_flight)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return first;
}

Expected<std::vector<std::vector<int32_t>>> RemoteLabelLlm::Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                                    const AnswerFn& on_answer) {
  std::vector<std::vector<int32_t>> out(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].empty()) return Status::Error("an empty sequence cannot be scored");
    if (max_context_ > 0 && static_cast<int64_t>(seqs[i].size()) > max_context_) {
      return Status::Error("a sequence of " + std::to_string(seqs[i].size()) + " tokens is longer than the server's context (" +
                           std::to_string(max_context_) + "; tlr serve --ctx)");
    }
  }
  if (opts_.protocol == RemoteProtocol::kTlr) {
    // Requests of several sequences each (the server batches them in its passes).
    std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) of seqs
    for (size_t b = 0; b < seqs.size();) {
      size_t e = b, tokens = 0;
      while (e < seqs.size() && e - b < kScoreSequencesPerRequest && (e == b || tokens + seqs[e].size() <= kScoreTokensPerRequest)) {
        tokens += seqs[e].size();
        ++e;
      }
      groups.emplace_back(b, e);
      b = e;
    }
    TLR_RETURN_IF_ERROR(ForEach(groups.size(), [&](size_t g) -> Status {
      const auto [b, e] = groups[g];
      json body = {{"sequences", json::array()}};
      std::vector<size_t> lengths;
      for (size_t i = b; i < e; ++i) {
        body["sequences"].push_back(seqs[i]);
        lengths.push_back(seqs[i].size());
      }
      TLR_ASSIGN_OR_RETURN(std::string reply, Post("/tlr/v1/score", body.dump()));
      auto parsed = remote::ParseScoreReply(reply, lengths, vocab_.n_vocab());
      if (!parsed.ok()) return parsed.status().WithPrefix("the LLM server at " + opts_.http.url);
      for (size_t i = b; i < e; ++i) {
        out[i] = std::move((*parsed)[i - b]);
        if (on_answer) on_answer(i, out[i]);
      }
      return Status::Ok();
    }));
    return out;
  }
  TLR_RETURN_IF_ERROR(ForEach(seqs.size(), [&](size_t i) -> Status {
    json body = {{"prompt", seqs[i]}, {"max_tokens", 1}, {"temperature", 0}, {"prompt_logprobs", 1},
                 {"logprobs", 0}, {"return_tokens_as_token_ids", true}};
    if (!opts_.model.empty()) body["model"] = opts_.model;
    TLR_ASSIGN_OR_RETURN(std::string reply, Post("/v1/completions", body.dump()));
    auto parsed = remote::ParsePromptLogprobsReply(reply, seqs[i].size(), vocab_);
    if (!parsed.ok()) return parsed.status().WithPrefix("the LLM server at " + opts_.http.url);
    out[i] = std::move(parsed).value();
    if (on_answer) on_answer(i, out[i]);
    return Status::Ok();
  }));
  return out;
}

Expected<std::vector<std::vector<int32_t>>> RemoteLabelLlm::Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                                   int max_tokens, const AnswerFn& on_answer) {
  std::vector<std::vector<int32_t>> out(prompts.size());
  TLR_RETURN_IF_ERROR(ForEach(prompts.size(), [&](size_t i) -> Status {
    if (prompts[i].empty()) return Status::Error("an empty prompt cannot be continued");
    json body = {{"prompt", prompts[i]}, {"max_tokens", max_tokens}, {"temperature", 0}, {"logprobs", 0},
                 {"return_tokens_as_token_ids", true}};
    if (!opts_.model.empty()) body["model"] = opts_.model;
    TLR_ASSIGN_OR_RETURN(std::string reply, Post("/v1/completions", body.dump()));
    auto parsed = remote::ParseCompletionReply(reply, vocab_, max_tokens);
    if (!parsed.ok()) return parsed.status().WithPrefix("the LLM server at " + opts_.http.url);
    out[i] = std::move(parsed->tokens);
    if (on_answer) on_answer(i, out[i]);
    return Status::Ok();
  }));
  return out;
}

}  // namespace tlr
