// The server's OpenAI-compatible endpoints: /v1/models, /v1/completions and
// /v1/chat/completions, with Server-Sent Events streaming (see llm_server.h). The prompt
// cache (LlmEngine::Complete) keeps a device that resends a growing context cheap.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>

#include "model/chat_template.h"
#include "net/http_front.h"
#include "net/openai_requests.h"
#include "net/openai_writer.h"
#include "net/protocol.h"
#include "net/server_json.h"
#include "net/sse_stream.h"
#include "server/llm_server.h"

namespace tlr {

using server::json;
using server::SendError;
using server::SendJson;

namespace {

std::string TokenLabel(const Tokenizer& tok, int32_t id, bool as_id) {
  return as_id ? "token_id:" + std::to_string(id) : tok.Piece(id, true);
}

std::string Sse(const json& j) { return "data: " + DumpJson(j) + "\n\n"; }

// A positive decimal number ("1500", "2.5"), at most `max`; -1 otherwise.
double PositiveNumber(const std::string& v, double max) {
  if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789.") != std::string::npos) return -1;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  return end == v.c_str() + v.size() && x > 0 && x <= max ? x : -1;
}

// What a streamed request's handler waits for before it answers: admission (then the stream
// starts) or an early end (a refusal or error, answered with a status of its own).
struct StreamStart {
  std::mutex mu;
  std::condition_variable cv;
  bool decided = false, admitted = false;
};

}  // namespace

// How long the client waits: X-TLR-Timeout-Ms (an error when malformed: TLR's own clients send
// it), else X-Stainless-Timeout (seconds; OpenAI's client libraries send their timeout in it,
// whole seconds, so "0" for less than one: ignored then, as anything it cannot read), else the
// server's default.
Expected<double> LlmServer::RequestTimeout(const httplib::Request& req, double fallback) {
  if (req.has_header("X-TLR-Timeout-Ms")) {
    const std::string v = req.get_header_value("X-TLR-Timeout-Ms");
    const double ms = PositiveNumber(v, 86400e3);
    if (ms < 0) return Status::Error("header X-TLR-Timeout-Ms must be a positive number of milliseconds (at most a day), not '" + v + "'");
    return ms / 1e3;
  }
  if (req.has_header("X-Stainless-Timeout")) {
    if (const double s = PositiveNumber(req.get_header_value("X-Stainless-Timeout"), 86400); s > 0) return s;
  }
  return fallback;
}

void LlmServer::RoutesOpenAi() {
  const Model& model = engine_->model();
  const Tokenizer& tok = model.tokenizer();
  http_->Get("/v1/models", [this, &model](const httplib::Request&, httplib::Response& res) {
    const auto t0 = std::chrono::steady_clock::now();
    SendJson(res, 200, {{"object", "list"},
                        {"data", json::array({{{"id", opts_.model_name},
                                               {"object", "model"},
                                               {"created", 0},
                                               {"owned_by", "tlr"},
                                               {"max_model_len", engine_->limits().max_context},
                                               {"tlr_vocab_fingerprint", HashHex(model.tokenizer().Fingerprint())}}})}});
    if (metrics_) {
      metrics_->Observe("tlr_http_request_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                        {{"endpoint", "/v1/models"}});
    }
  });

  // The model's chat template, parsed once; a file whose template cannot be parsed serves
  // /v1/completions and answers chat requests with that error.
  const Expected<ChatTemplate> chat_template = ChatTemplate::ForModel(model);
  auto handle = [this, &tok, chat_template](bool chat, const httplib::Request& req, httplib::Response& res) {
    const auto t0 = std::chrono::steady_clock::now();
    auto body = server::ParseBody(req, res);
    if (!body) return;
    if (chat && !chat_template.ok()) return SendError(res, 500, "server_error", chat_template.status().message());
    auto parsed = ParseOpenAiRequest(*body, chat, tok, chat_template.ok() ? &*chat_template : nullptr,
                                     OpenAiSamplingDefaults());
    if (!parsed.ok()) return SendError(res, 400, "invalid_request_error", parsed.status().message());
    OpenAiRequest& p = *parsed;
    if (p.prompt.empty()) return SendError(res, 400, "invalid_request_error", "the prompt is empty");
    if (p.prompt_logprobs >= 0 && p.stream) {
      return SendError(res, 400, "invalid_request_error", "'prompt_logprobs' is not supported with streaming");
    }
    const bool batch = p.prompts.size() > 1;
    if (batch && p.stream) {
      return SendError(res, 400, "invalid_request_error",
                       "a batch of prompts cannot be streamed here: send it with \"stream\": false, or one prompt per request");
    }
    const int limit = engine_->limits().max_tokens_per_call;
    size_t longest = 0;
    for (const auto& one : p.prompts) longest = std::max(longest, one.size());
    const int64_t room = engine_->limits().max_context - static_cast<int64_t>(longest);
    if (p.max_tokens < 0) p.max_tokens = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(limit, room)));
    if (p.max_tokens > limit) {
      return SendError(res, 400, "invalid_request_error", "'max_tokens' is above the server's limit of " + std::to_string(limit));
    }
    if (p.max_tokens > room) {
      return SendError(res, 400, "invalid_request_error",
                       std::string(batch ? "the longest prompt, " : "prompt of ") + std::to_string(longest) +
                           " tokens + max_tokens " + std::to_string(p.max_tokens) + " exceeds the server's context of " +
                           std::to_string(engine_->limits().max_context) + " tokens");
    }
    auto timeout = RequestTimeout(req, opts_.default_timeout_s);
    if (!timeout.ok()) return SendError(res, 400, "invalid_request_error", timeout.status().message());
    CallControl control;
    control.owner = ClientOf(req);  // its prompt caches share prefixes with no other client's
    // Time the request waited for a free worker counts.
    control.timeout_s = std::max(1e-3, *timeout - (front_ ? HttpFront::CurrentRequestAge() : 0.0));
    const OpenAiWriter out(chat, next_id_++, opts_.model_name);
    int64_t n_prompt = 0;
    for (const auto& one : p.prompts) n_prompt += static_cast<int64_t>(one.size());
    auto usage = [n_prompt](int64_t completion) { return OpenAiWriter::Usage(n_prompt, completion); };
    if (p.max_tokens == 0 && p.stream) {  // a stream still, with its finish chunk (and usage when asked)
      std::string events = chat ? Sse(out.RoleChunk()) : std::string();
      events += Sse(out.Chunk("", "length"));
      if (p.include_usage) events += Sse(out.UsageChunk(usage(0)));
      events += OpenAiWriter::kDone;
      res.set_header("Cache-Control", "no-cache");
      res.status = 200;
      res.set_content(events, "text/event-stream");
      return;
    }
    if (p.max_tokens == 0) {
      json choices = json::array();
      for (size_t i = 0; i < p.prompts.size(); ++i) choices.push_back(out.Choice(i, "", "length"));
      return SendJson(res, 200, out.Response(choices, usage(0)));
    }
    // Per token: logprob entries for the response.
    const bool as_ids = p.ids_as_tokens;
    auto token_logprob = [&tok, chat, as_ids](int32_t t, float lp, const std::vector<TopLogprob>& top) {
      json e;
      if (chat) {
        json alts = json::array();
        for (const TopLogprob& a : top) alts.push_back({{"token", TokenLabel(tok, a.id, as_ids)}, {"logprob", a.logprob}});
        e = {{"token", TokenLabel(tok, t, as_ids)}, {"logprob", lp}, {"top_logprobs", alts}};
      } else {
        json alts = json::object();
        for (const TopLogprob& a : top) alts[TokenLabel(tok, a.id, as_ids)] = a.logprob;
        e = {{"token", TokenLabel(tok, t, as_ids)}, {"logprob", lp}, {"top", alts}};
      }
      return e;
    };
    if (!p.stream) {
      // One choice per prompt (a batch runs its prompts one after another; each may reuse the
      // prompt cache), in vLLM's shape: index in order, each with its own prompt_logprobs.
      if (front_) control.client_gone = [] { return HttpFront::CurrentClientGone(); };
      json choices = json::array(), per_choice_tlr = json::array();
      int64_t n_completion = 0, prefilled = 0;
      double queue_s = 0, compute_s = 0;
      for (size_t index = 0; index < p.prompts.size(); ++index) {
        const std::vector<int32_t>& prompt = p.prompts[index];
        CompletionText text(tok, p.stop);
        std::vector<json> lps;
        std::vector<int32_t> ids;
        std::vector<PromptPosition> prompt_scores;
        EngineResult r = engine_->Complete(prompt, p.max_tokens, p.sampling, std::max(0, p.logprobs),
                                           [&](int32_t t, float lp, const std::vector<TopLogprob>& top) {
                                             ids.push_back(t);
                                             if (p.logprobs >= 0) lps.push_back(token_logprob(t, lp, top));
                                             return text.Push(t, tok.IsEndOfGeneration(t));
                                           },
                                           p.prompt_logprobs >= 0 ? &prompt_scores : nullptr, std::max(0, p.prompt_logprobs),
                                           control);
        if (!r.ok()) {
          if (batch) r.message = "prompt " + std::to_string(index) + " of the batch: " + r.message;
          return SendEngineError(res, r, r.code == EngineCode::kBadRequest ? "invalid_request_error" : "");
        }
        text.Finish();
        const std::string finish = r.reply.finish == "length" ? "length" : "stop";
        json logprobs = nullptr;
        if (p.logprobs >= 0) {
          if (chat) {
            json content = json::array();
            for (const json& e : lps) content.push_back(e);
            logprobs = {{"content", content}};
          } else {
            json toks = json::array(), tlp = json::array(), tops = json::array(), offs = json::array();
            size_t off = 0;
            for (size_t i = 0; i < lps.size(); ++i) {
              toks.push_back(lps[i]["token"]);
              tlp.push_back(lps[i]["logprob"]);
              tops.push_back(lps[i]["top"]);
              offs.push_back(off);
              off += tok.Piece(ids[i]).size();
            }
            logprobs = {{"tokens", toks}, {"token_logprobs", tlp}, {"top_logprobs", tops}, {"text_offset", offs}};
          }
        }
        json choice = out.Choice(index, text.text(), finish, logprobs);
        if (p.prompt_logprobs >= 0) {
          // vLLM's shape: per prompt token (null for the first) a dict keyed by token id: the token
          // itself and the top k at its position, each {logprob, rank, decoded_token}.
          json list = json::array({nullptr});
          for (size_t i = 1; i < prompt.size() && i - 1 < prompt_scores.size(); ++i) {
            const PromptPosition& pos = prompt_scores[i - 1];
            json d = json::object();
            for (size_t k = 0; k < pos.top.size(); ++k) {
              d[std::to_string(pos.top[k].id)] = {{"logprob", pos.top[k].logprob}, {"rank", k + 1},
                                                 {"decoded_token", TokenLabel(tok, pos.top[k].id, as_ids)}};
            }
            d[std::to_string(prompt[i])] = {{"logprob", pos.logprob}, {"rank", pos.rank},
                                            {"decoded_token", TokenLabel(tok, prompt[i], as_ids)}};
            list.push_back(std::move(d));
          }
          choice["prompt_logprobs"] = std::move(list);
        }
        if (batch) choice["tlr"] = {{"token_ids", ids}};
        choices.push_back(std::move(choice));
        per_choice_tlr.push_back(ids);
        n_completion += static_cast<int64_t>(ids.size());
        queue_s += r.reply.queue_s;
        compute_s += r.reply.compute_s;
        prefilled += r.reply.prefilled;
      }
      json tlr = {{"queue_ms", queue_s * 1e3}, {"compute_ms", compute_s * 1e3}, {"prefilled", prefilled}};
      if (!batch) tlr["token_ids"] = per_choice_tlr[0];
      json response = out.Response(choices, usage(n_completion));
      response["tlr"] = tlr;
      if (chat && p.prompt_logprobs >= 0) {  // chat: at the top (vLLM's chat shape)
        response["prompt_logprobs"] = response["choices"][0]["prompt_logprobs"];
        response["choices"][0].erase("prompt_logprobs");
      }
      SendJson(res, 200, response);
      if (metrics_) {
        metrics_->Observe("tlr_http_request_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                          {{"endpoint", chat ? "/v1/chat/completions" : "/v1/completions"}});
      }
      return;
    }
    // Streaming: generation on its own thread; httplib's thread sends chunks as they come, once
    // the call is admitted (a refusal or an early error is answered with its own status). The
    // timeout bounds the first token; after it a client that goes away stops the generation.
    auto st = std::make_shared<SseStream>();
    auto start = std::make_shared<StreamStart>();
    auto early = std::make_shared<EngineResult>();
    control.first_token_only = true;
    control.client_gone = [st] { return st->cancelled.load(); };
    control.on_decided = [start](bool admitted) {
      std::lock_guard<std::mutex> l(start->mu);
      start->decided = true;
      start->admitted = admitted;
      start->cv.notify_all();
    };
    {
      std::lock_guard<std::mutex> l(streams_mu_);
      ++live_streams_;
    }
    st->worker = std::thread([this, st, p, out, token_logprob, &tok, usage, chat, t0, control, start, early] {
      struct Ended {  // Stop() waits for this generation, whichever way it ends
        LlmServer* server;
        ~Ended() {
          std::lock_guard<std::mutex> l(server->streams_mu_);
          --server->live_streams_;
          server->streams_cv_.notify_all();
        }
      } ended{this};
      CompletionText text(tok, p.stop);
      if (chat) st->Push(Sse(out.RoleChunk()));
      int64_t n_tokens = 0;
      EngineResult r = engine_->Complete(p.prompt, p.max_tokens, p.sampling, std::max(0, p.logprobs),
                                         [&](int32_t t, float lp, const std::vector<TopLogprob>& top) {
                                           ++n_tokens;
                                           const bool go = text.Push(t, tok.IsEndOfGeneration(t));
                                           std::string delta = text.TakeReady(false);
                                           json lpj = nullptr;
                                           if (p.logprobs >= 0) {
                                             json e = token_logprob(t, lp, top);
                                             lpj = chat ? json{{"content", json::array({e})}}
                                                        : json{{"tokens", {e["token"]}}, {"token_logprobs", {e["logprob"]}}, {"top_logprobs", {e["top"]}}};
                                           }
                                           if (!delta.empty() || !lpj.is_null()) st->Push(Sse(out.Chunk(delta, nullptr, lpj)));
                                           return go && !st->cancelled.load();
                                         },
                                         nullptr, 0, control);
      {
        std::lock_guard<std::mutex> l(start->mu);
        if (!start->decided) {  // ended before admission (a bad request, no room): the handler answers
          *early = r;
          start->decided = true;
          start->cv.notify_all();
          return;
        }
        if (!start->admitted) {
          start->cv.notify_all();
          *early = r;
          return;
        }
      }
      if (r.ok()) {
        text.Finish();
        std::string rest = text.TakeReady(true);
        const std::string finish = r.reply.finish == "length" ? "length" : "stop";
        st->Push(Sse(out.Chunk(rest, finish)));
        // As OpenAI and vLLM: usage only when asked, in a chunk of its own with no choices.
        if (p.include_usage) st->Push(Sse(out.UsageChunk(usage(n_tokens))));
      } else {
        st->Push(Sse({{"error", {{"code", std::string(EngineCodeName(r.code))}, {"message", r.message},
                                  {"type", std::string(EngineCodeName(r.code))}, {"param", nullptr}}}}));
      }
      st->Push(OpenAiWriter::kDone);
      if (metrics_) {
        metrics_->Observe("tlr_http_request_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                          {{"endpoint", chat ? "/v1/chat/completions" : "/v1/completions"}});
      }
      st->Finish();
    });
    {
      std::unique_lock<std::mutex> l(start->mu);
      start->cv.wait(l, [&] { return start->decided; });
      if (!start->admitted) {
        // Refused (or failed before it ran): the worker ends at once; its result is the answer.
        l.unlock();
        st->StopWorker();
        const EngineResult& r = *early;
        if (r.ok()) return SendError(res, 500, "internal", "the request ended before it started");
        return SendEngineError(res, r, r.code == EngineCode::kBadRequest ? "invalid_request_error" : "");
      }
    }
    SseStream::Serve(req, res, st, 1.0);
  };
  http_->Post("/v1/completions", [handle](const httplib::Request& req, httplib::Response& res) { handle(false, req, res); });
  http_->Post("/v1/chat/completions", [handle](const httplib::Request& req, httplib::Response& res) { handle(true, req, res); });
}

}  // namespace tlr
