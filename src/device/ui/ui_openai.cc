// The device's routed OpenAI-compatible API (device layer, part of DeviceServer; see device_server.h):
// GET /v1/models, POST /v1/chat/completions and /v1/completions, streamed or not. The request
// bodies are read as `tlr serve` reads them (net/openai_requests.h); generation is routed (SLM
// here, uncertain tokens from the LLM) in the conversation's cached context, so a chat client's
// next turn prefills only its new tokens.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "device/decode/token_json.h"
#include "device/ui/device_server.h"
#include "device/ui/device_server_internal.h"
#include "model/chat_template.h"
#include "net/http_front.h"
#include "net/openai_requests.h"
#include "net/openai_writer.h"
#include "net/server_json.h"

namespace tlr {

using nlohmann::json;
using server::SendError;
using server::SendJson;
using ui::Ms;

namespace {

std::string SseData(const json& j) { return "data: " + DumpJson(j) + "\n\n"; }

// OpenAI's error for a conversation that does not fit the model's context.
void SendContextExceeded(httplib::Response& res, bool chat, int64_t n_ctx, int64_t prompt, int64_t max_tokens) {
  std::string message = "This model's maximum context length is " + std::to_string(n_ctx) + " tokens. However, ";
  if (max_tokens > 0) {
    message += "you requested " + std::to_string(prompt + max_tokens) + " tokens (" + std::to_string(prompt) +
               " in the " + (chat ? "messages" : "prompt") + ", " + std::to_string(max_tokens) +
               " in the completion). Please reduce the length of the " + (chat ? "messages" : "prompt") +
               " or completion.";
  } else {
    message += std::string("your ") + (chat ? "messages" : "prompt") + " resulted in " + std::to_string(prompt) +
               " tokens. Please reduce the length of the " + (chat ? "messages." : "prompt.");
  }
  SendJson(res, 400, {{"error", {{"message", message}, {"type", "invalid_request_error"},
                                 {"param", chat ? "messages" : "prompt"}, {"code", "context_length_exceeded"}}}});
}


}  // namespace

void DeviceServer::RoutesOpenAi() {
  const Model& slm = *models_.slm;
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json routers = json::array();
    for (const UiRouter& r : models_.routers) routers.push_back({{"name", r.name}, {"threshold", r.router->info().threshold}});
    SendJson(res, 200, {{"object", "list"},
                        {"data", json::array({{{"id", opts_.model_name},
                                               {"object", "model"},
                                               {"created", 0},
                                               {"owned_by", "tlr"},
                                               {"max_model_len", models_.n_ctx},
                                               {"tlr", {{"models", models_.describe}, {"routers", routers}}}}})}});
  });

  // The SLM's chat template, parsed once (a file whose template cannot be parsed still serves
  // /v1/completions and answers chat requests with that error).
  auto chat_template = std::make_shared<const Expected<ChatTemplate>>(ChatTemplate::ForModel(slm));
  auto handle = [this, &slm, chat_template](bool chat, const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Content-Type").rfind("application/json", 0) != 0) {
      return SendError(res, 415, "unsupported_media_type", "send the request body as JSON (Content-Type: application/json)");
    }
    auto body = server::ParseBody(req, res);
    if (!body) return;
    if (chat && !chat_template->ok()) return SendError(res, 500, "server_error", chat_template->status().message());
    // The device's sampling settings are the defaults; without a seed in the request (and none
    // pinned by the operator) each request gets its own, as with OpenAI and tlr serve, so a
    // client's "regenerate" above temperature 0 gets another answer.
    SamplerParams defaults = models_.sampling;
    if (models_.seed_per_request) defaults.seed = OpenAiSamplingDefaults().seed;
    auto parsed = ParseOpenAiRequest(*body, chat, slm.tokenizer(), chat_template->ok() ? &**chat_template : nullptr,
                                     defaults);
    if (!parsed.ok()) return SendError(res, 400, "invalid_request_error", parsed.status().message());
    OpenAiRequest& p = *parsed;
    if (p.prompt.empty()) return SendError(res, 400, "invalid_request_error", "the prompt is empty");
    if (p.prompts.size() > 1) {
      return SendError(res, 400, "invalid_request_error",
                       "a batch of prompts: routed generation takes one prompt per request here");
    }
    if (p.logprobs >= 0 || p.prompt_logprobs >= 0) {
      return SendError(res, 400, "invalid_request_error",
                       std::string(p.logprobs >= 0 ? "logprobs" : "prompt_logprobs") +
                           " are not available from routed generation (each token comes from the SLM or the LLM)");
    }
    Request r;
    const json no_routing = json::object();
    const json* routing = &no_routing;
    if (auto it = body->find("routing"); it != body->end() && !it->is_null()) {
      if (!it->is_object()) return SendError(res, 400, "invalid_request_error", "'routing' must be an object");
      routing = &*it;
    }
    if (Status s = ApplyRouting(*routing, /*strict=*/true, &r); !s.ok()) {
      return SendError(res, 400, "invalid_request_error", "routing: " + s.message());
    }
    r.decode.sampling = p.sampling;
    const int64_t n_prompt = static_cast<int64_t>(p.prompt.size());
    const int64_t room = models_.n_ctx - n_prompt - r.decode.route_span - 1;
    if (room < 1 || p.max_tokens > room) {
      return SendContextExceeded(res, chat, models_.n_ctx, n_prompt, std::max(p.max_tokens, 0));
    }
    r.decode.max_tokens = p.max_tokens < 0 ? static_cast<int>(room) : p.max_tokens;
    r.prompt = std::move(p.prompt);

    auto job = std::make_shared<Job>();
    job->api = true;
    {
      std::lock_guard<std::mutex> l(jobs_mu_);
      if (api_jobs_ >= opts_.max_queue) {
        const double wait = std::clamp(std::ceil(std::max(api_seconds_, 0.5) * api_jobs_), 1.0, 600.0);
        res.set_header("Retry-After", std::to_string(static_cast<int>(wait)));
        return SendError(res, 429, "rate_limit_exceeded",
                         "the device is busy: " + std::to_string(api_jobs_) + " requests are waiting or running (tlr ui "
                         "--max-queue); retry after " + std::to_string(static_cast<int>(wait)) + " s");
      }
      ++api_jobs_;
      job->id = next_job_++;
      live_.push_back(job.get());
    }
    const OpenAiWriter out(chat, job->id, opts_.model_name);
    const std::string router_name = models_.routers[r.router].name;
    auto usage = [r, router_name](const DecodeStats& st) {
      json u = OpenAiWriter::Usage(st.prompt_tokens, st.generated);
      u["prompt_tokens_details"] = {{"cached_tokens", st.prompt_reused}};
      // The generation's statistics (DecodeStatsJson, tlr_stats' names) and how it was routed.
      json t = DecodeStatsJson(st);
      t["mode"] = DecodeModeName(r.decode.mode);
      t["router"] = router_name;
      t["threshold"] = r.decode.threshold;
      t["policy"] = RoutePolicyName(r.decode.policy);
      u["tlr"] = std::move(t);
      return u;
    };
    auto finish_reason = [](const DecodeStats& st, const CompletionText& text) {
      return OpenAiWriter::FinishReason(text.stopped() || st.stop == "eos");
    };
    // One generation within this job's turn; `gone` (polled) says the client left. `on_token`
    // hears each token with the text that became ready; `tokens` collects them all.
    auto run = [this, r, job](const std::function<bool()>& gone,
                                                   const std::function<void(const TokenEvent&, const std::string&)>& on_token,
                                                   CompletionText* text) -> Expected<DeviceRunResult> {
      if (!WaitTurn(job.get(), gone)) return Status::Error("the client went away while its request waited");
      const auto t0 = std::chrono::steady_clock::now();
      auto last_check = t0;
      auto result = Generate(r, job.get(), [&](const TokenEvent& ev) {
        const bool go = text->Push(ev.id, ev.end);
        on_token(ev, text->TakeReady(false));
        const auto now = std::chrono::steady_clock::now();
        if (gone && now - last_check > std::chrono::milliseconds(100)) {
          last_check = now;
          if (gone()) job->cancelled = true;
        }
        return go && !job->cancelled.load();
      });
      EndTurn();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> l(jobs_mu_);
      api_seconds_ = api_seconds_ == 0 ? seconds : 0.8 * api_seconds_ + 0.2 * seconds;
      return result;
    };
    auto leave = [this, job] {
      std::lock_guard<std::mutex> l(jobs_mu_);
      --api_jobs_;
      live_.erase(std::find(live_.begin(), live_.end(), job.get()));
    };

    if (!p.stream) {  // generated on this thread; a client that goes away cancels it
      CompletionText text(slm.tokenizer(), p.stop);
      json tokens = json::array();
      auto result = run([] { return HttpFront::CurrentClientGone(); },
                        [&](const TokenEvent& ev, const std::string&) { tokens.push_back(TokenEventJson(ev, false)); }, &text);
      leave();
      if (!result.ok() && HttpFront::CurrentClientGone()) {
        // Not the server's failure: the client closed its connection, or shut its sending side
        // (which reads the same), while the request waited.
        return SendError(res, 503, "client_gone", result.status().message() + " (its connection was closed)");
      }
      if (!result.ok()) return SendError(res, 500, "server_error", result.status().message());
      text.Finish();
      const DecodeStats& st = result->stats;
      json choice = out.Choice(0, text.text(), finish_reason(st, text));
      choice["tlr"] = {{"tokens", tokens}};
      return SendJson(res, 200, out.Response(json::array({choice}), usage(st)));
    }

    // Streamed: generated on a worker thread; httplib's thread sends the chunks (a heartbeat
    // comment each second notices a client that went away, even while the request waits).
    auto chunk = [out](const std::string& delta, const json& tokens, const json& finish) {
      json c = out.Chunk(delta, finish);
      if (!tokens.empty()) c["choices"][0]["tlr"] = {{"tokens", tokens}};
      return c;
    };
    const bool include_usage = p.include_usage;
    StartWorker(job, [=, stop = p.stop, &slm] {
      CompletionText text(slm.tokenizer(), stop);
      json pending = json::array();  // tokens whose text is not out yet
      bool started = false;
      auto result = run({}, [&](const TokenEvent& ev, const std::string& delta) {
        if (chat && !started) job->Push(SseData(out.RoleChunk()));
        started = true;
        pending.push_back(TokenEventJson(ev, false));
        if (delta.empty()) return;
        job->Push(SseData(chunk(delta, pending, nullptr)));
        pending = json::array();
      }, &text);
      if (result.ok()) {
        if (chat && !started) job->Push(SseData(out.RoleChunk()));  // max_tokens 0: no token came
        text.Finish();
        job->Push(SseData(chunk(text.TakeReady(true), pending, finish_reason(result->stats, text))));
        if (include_usage) {
          job->Push(SseData(out.UsageChunk(usage(result->stats))));
        }
      } else {
        job->Push(SseData({{"error", {{"message", result.status().message()}, {"type", "server_error"},
                                      {"param", nullptr}, {"code", "server_error"}}}}));
      }
      job->Push(OpenAiWriter::kDone);
      job->Finish();
      leave();
    });
    SseStream::Serve(req, res, job, /*heartbeat_s=*/1.0);
  };
  http_->Post("/v1/completions", [handle](const httplib::Request& req, httplib::Response& res) { handle(false, req, res); });
  http_->Post("/v1/chat/completions", [handle](const httplib::Request& req, httplib::Response& res) { handle(true, req, res); });
}

}  // namespace tlr
