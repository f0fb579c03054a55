// DeviceServer: the page's HTTP routes, the queue of generations and the generation behind them
// (device layer). See device_server.h for the endpoints and the rules; the OpenAI API is in
// ui_openai.cc.
#include "device/ui/device_server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "device/decode/decoder.h"
#include "device/decode/token_json.h"
#include "device/llm/llm_backend.h"
#include "device/session/llm_factory.h"
#include "device/ui/device_server_internal.h"
#include "model/chat_template.h"
#include "model/chat_messages.h"
#include "net/http_front.h"
#include "net/server_json.h"
#include "net/sse_stream.h"
#include "ops/thread_pool.h"

namespace tlr {

using nlohmann::json;
using server::SendError;
using server::SendJson;

namespace {

constexpr size_t kMaxPromptBytes = 64 << 10;
// What the page may load: itself only (no CDN, no fonts, no outside requests of any kind).
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The host name of a Host header ("127.0.0.1:8090" -> "127.0.0.1", "[::1]:8090" -> "::1"); a
// header that is not exactly a name with an optional ":port" comes back whole (and matches no
// loopback name).
std::string HostName(const std::string& header) {
  size_t end = 0;
  std::string name;
  if (!header.empty() && header[0] == '[') {
    end = header.find(']');
    if (end == std::string::npos) return header;
    name = header.substr(1, end - 1);
    ++end;
  } else {
    end = std::min(header.find(':'), header.size());
    name = header.substr(0, end);
  }
  if (end == header.size()) return name;
  const std::string port = header.substr(end + 1);
  const bool digits = header[end] == ':' && !port.empty() && port.size() <= 5 &&
                      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  return digits ? name : header;
}


}  // namespace

using ui::Ms;
using ui::Sse;
using ui::kMaxSpan;

DeviceServer::DeviceServer(DeviceServerModels models, DeviceServerOptions opts) : models_(std::move(models)), opts_(std::move(opts)) {
  if (models_.slm) {
    contexts_ = std::make_unique<DeviceContextPool>(
        models_.prompt_cache, KvCache::BytesPerPosition(models_.slm->config(), models_.slm->kv_type()));
  }
}

DeviceServer::~DeviceServer() { Stop(); }

Status DeviceServer::Start() {
  if (!models_.slm || models_.routers.empty() || !models_.pool || !models_.llm) {
    return Status::Error("the device server needs an SLM, a router and an LLM (in process or behind --server)");
  }
  if (opts_.max_queue < 1) return Status::Error("the request queue must hold at least one request");
  const bool guarded = !opts_.page && !opts_.api_keys.empty();  // nothing open without a key
  if (!IsLoopbackHost(opts_.host) && !opts_.public_bind && !guarded) {
    return Status::Error("refusing to listen on " + opts_.host +
                         " (not loopback): the web page has no login, so anyone who can reach the port could "
                         "run generations on this machine and your LLM server; serve the API alone with API keys "
                         "(headless), or give --public to allow it");
  }
  // Slow or idle clients hold no thread (http_front.h); a generation's stream holds one worker.
  FrontLimits lim;
  lim.max_connections = 256;
  lim.workers = 16;
  lim.max_body_bytes = 1 << 20;
  lim.max_body_flag = "";  // fixed here: tlr ui has no --max-body
  auto front = std::make_unique<HttpFront>(lim);
  front_ = front.get();
  http_ = std::move(front);
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    server::IgnoreRanges(req);
    if (server::RefuseBodyWithoutLength(req, res)) return httplib::Server::HandlerResponse::Handled;
    // DNS-rebinding guard: a page of another site whose name resolves to 127.0.0.1 sends its own
    // host name, not ours.
    if (!opts_.public_bind) {
      const std::string host = HostName(req.get_header_value("Host"));
      if (!host.empty() && !IsLoopbackHost(host) && host != opts_.host) {
        SendError(res, 403, "forbidden_host",
                  "this server answers only to loopback host names, not '" + host + "' (open http://127.0.0.1:" +
                      std::to_string(port_) + "/)");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    const bool api = req.path.rfind("/v1/", 0) == 0;
    if (!opts_.api_keys.empty() && (api || !opts_.page) &&
        BearerKeyIndex(req.get_header_value("Authorization"), opts_.api_keys) < 0) {
      res.set_header("WWW-Authenticate", "Bearer");
      SendError(res, 401, "invalid_api_key", "missing or wrong API key (send 'Authorization: Bearer <key>')");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    server::DescribeHttpError(req, res, "the request body is larger than 1 MiB");
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    SendError(res, 500, "internal", "internal error while handling the request");
  });
  if (opts_.page) Routes();
  RoutesOpenAi();
  return BindAndListen(http_.get(), opts_.host, opts_.port, kDefaultListenBacklog, &port_, &thread_);
}

void DeviceServer::Stop() {
  {
    std::lock_guard<std::mutex> l(jobs_mu_);
    for (Job* job : live_) job->cancelled = true;
  }
  jobs_cv_.notify_all();
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
  if (front_) front_->Close();
  std::unique_lock<std::mutex> l(jobs_mu_);
  jobs_cv_.wait(l, [this] { return workers_ == 0; });
}

bool DeviceServer::WaitTurn(Job* job, const std::function<bool()>& gone) {
  std::unique_lock<std::mutex> l(jobs_mu_);
  queue_.push_back(job);
  for (;;) {
    if (!job->cancelled && gone && gone()) job->cancelled = true;
    if (job->cancelled) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), job));
      jobs_cv_.notify_all();  // the next one may be at the front now
      return false;
    }
    if (!busy_ && queue_.front() == job) {
      queue_.pop_front();
      busy_ = true;
      return true;
    }
    // Woken when a turn ends; the timeout polls `cancelled` and `gone`.
    jobs_cv_.wait_for(l, std::chrono::milliseconds(100));
  }
}

void DeviceServer::EndTurn() {
  {
    std::lock_guard<std::mutex> l(jobs_mu_);
    busy_ = false;
  }
  jobs_cv_.notify_all();
}

void DeviceServer::StartWorker(const std::shared_ptr<Job>& job, std::function<void()> body) {
  {
    std::lock_guard<std::mutex> l(jobs_mu_);
    ++workers_;
  }
  job->worker = std::thread([this, body = std::move(body)] {
    body();
    std::lock_guard<std::mutex> l(jobs_mu_);
    --workers_;
    jobs_cv_.notify_all();
  });
}

Status DeviceServer::ApplyRouting(const json& j, bool strict, Request* r) const {
  std::string mode = "joint", router = models_.routers[0].name;
  bool pipeline = models_.pipeline.enabled;
  int64_t span = 1;
  double threshold = -1, price_ratio = models_.price_ratio, cost_budget = models_.cost_budget;
  std::string policy(RoutePolicyName(models_.policy));
  JsonFields f(j);
  f.String("mode", &mode).String("router", &router).Bool("pipeline", &pipeline).Int("span", 1, kMaxSpan, &span);
  f.Number("threshold", 0, 1, &threshold).String("policy", &policy).Number("price_ratio", 0, 1000, &price_ratio);
  f.Number("cost_budget", 0, 1e12, &cost_budget);
  TLR_RETURN_IF_ERROR(f.status());
  if (strict) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      static const char* const kKnown[] = {"mode", "router", "threshold", "span", "pipeline", "policy", "price_ratio",
                                           "cost_budget"};
      if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return it.key() == k; }) == std::end(kKnown)) {
        return Status::Error("'" + it.key() + "' is not a routing field (mode, router, threshold, span, pipeline, "
                             "policy, price_ratio, cost_budget)");
      }
    }
  }
  auto m = ParseDecodeMode(mode);
  if (!m.ok()) return m.status();
  if (strict && *m != DecodeMode::kJoint) {  // as the command line: a knob that would do nothing is refused
    for (const char* k : {"threshold", "span", "policy", "price_ratio", "cost_budget"}) {
      if (auto it = j.find(k); it != j.end() && !it->is_null()) {
        return Status::Error("'" + std::string(k) + "' does nothing with mode " + mode + " (nothing is routed)");
      }
    }
  }
  auto pol = ParseRoutePolicy(policy);
  if (!pol.ok()) return pol.status();
  r->router = models_.routers.size();
  std::string names;
  for (size_t i = 0; i < models_.routers.size(); ++i) {
    if (models_.routers[i].name == router) r->router = i;
    names += (i ? ", " : "") + models_.routers[i].name;
  }
  if (r->router == models_.routers.size()) return Status::Error("unknown router '" + router + "' (" + names + ")");
  DecodeOptions& d = r->decode;
  d.mode = *m;
  d.threshold = threshold >= 0 ? static_cast<float>(threshold) : models_.routers[r->router].router->info().threshold;
  d.route_span = static_cast<int>(span);
  d.policy = *pol;
  d.price_ratio = price_ratio;
  d.cost_budget = cost_budget;
  d.sampling = models_.sampling;
  d.pipeline = models_.pipeline;
  d.pipeline.enabled = pipeline;
  d.sim_slm_s = models_.sim_slm_s;
  return Status::Ok();
}

Expected<DeviceRunResult> DeviceServer::Generate(const Request& r, Job* job,
                                             const std::function<bool(const TokenEvent&)>& on_token,
                                             const std::function<void(const ProvisionalEvent&)>& on_provisional) {
  DecodeOptions d = r.decode;
  d.cancel = &job->cancelled;
  d.on_provisional = on_provisional;
  const UiRouter& router = models_.routers[r.router];
  Router* use_router = d.mode == DecodeMode::kLargeOnly ? nullptr : router.router;
  // The conversation's context (its SLM cache and its LLM backend) from the prompt cache.
  std::unique_ptr<DeviceContext> context = contexts_->Take(r.prompt);
  auto result = RunDeviceGeneration(*models_.slm, use_router, d.mode == DecodeMode::kSmallOnly ? nullptr : models_.llm,
                                    models_.pool, r.prompt, d, on_token, {}, nullptr, context.get());
  contexts_->Give(std::move(context));
  return result;
}

void DeviceServer::Routes() {
  for (const UiAsset& a : opts_.assets) {
    http_->Get(server::ExactRoutePattern(a.path), [a](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy", kContentSecurityPolicy);
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(a.data.data(), a.data.size(), a.content_type);
    });
  }

  http_->Get("/api/info", [this](const httplib::Request&, httplib::Response& res) {
    json routers = json::array();
    for (const UiRouter& r : models_.routers) {
      routers.push_back({{"name", r.name},
                         {"label", r.label},
                         {"threshold", r.router->info().threshold},
                         {"learned", RouterIsLearned(r.router->kind())}});
    }
    json examples = json::array();
    for (const UiExample& e : opts_.examples) {
      examples.push_back({{"label", e.label}, {"prompt", e.prompt}, {"answer", e.answer}});
    }
    SendJson(res, 200,
             {{"models", models_.describe},
              {"routers", routers},
              {"router", models_.routers[0].name},
              {"threshold", models_.routers[0].router->info().threshold},
              {"modes", {"joint", "small_only", "large_only"}},
              {"max_tokens", {{"default", opts_.default_max_tokens}, {"max", models_.n_ctx}}},
              {"temperature", models_.sampling.temperature},
              {"pipeline", {{"enabled", models_.pipeline.enabled},
                            {"depth", models_.pipeline.depth},
                            {"branches", models_.pipeline.branches},
                            {"lookahead", models_.pipeline.lookahead},
                            {"sim_slm_ms", Ms(models_.sim_slm_s)}}},
              {"prompt_cache", {{"slots", contexts_->slots()},
                                {"max_slots", models_.prompt_cache.max_slots},
                                {"bytes", contexts_->bytes()},
                                {"budget_bytes", models_.prompt_cache.budget_bytes}}},
              {"examples", examples},
              {"results", !opts_.results.is_null()},
              {"warning", models_.warning}});
  });

  http_->Get("/api/results", [this](const httplib::Request&, httplib::Response& res) {
    if (opts_.results.is_null()) return SendError(res, 404, "no_results", "no eval results were given (tlr ui --results results.json)");
    SendJson(res, 200, opts_.results);
  });

  // Refuses anything but JSON bodies: a cross-site form or no-cors fetch cannot send
  // application/json, and a CORS preflight for it is never answered.
  auto json_body = [](const httplib::Request& req, httplib::Response& res) -> std::optional<json> {
    if (req.get_header_value("Content-Type").rfind("application/json", 0) != 0) {
      SendError(res, 415, "unsupported_media_type", "send the request body as JSON (Content-Type: application/json)");
      return std::nullopt;
    }
    return server::ParseBody(req, res);
  };

  http_->Post("/api/stop", [this, json_body](const httplib::Request& req, httplib::Response& res) {
    if (!json_body(req, res)) return;
    bool stopped = false;
    {
      std::lock_guard<std::mutex> l(jobs_mu_);
      if (auto job = page_job_.lock(); job && !job->cancelled) {
        job->cancelled = true;
        stopped = true;
      }
    }
    SendJson(res, 200, {{"stopped", stopped}});
  });

  http_->Post("/api/generate", [this, json_body](const httplib::Request& req, httplib::Response& res) {
    auto body = json_body(req, res);
    if (!body) return;
    const json& j = *body;
    std::string prompt;
    bool chat = false;
    int64_t max_tokens = opts_.default_max_tokens, seed = static_cast<int64_t>(models_.sampling.seed & ((1ull << 53) - 1));
    double temperature = models_.sampling.temperature, top_p = models_.sampling.top_p;
    const json* messages = nullptr;
    JsonFields f(j);
    f.String("prompt", &prompt).Bool("chat", &chat).Array("messages", &messages);
    f.Int("max_tokens", 1, models_.n_ctx, &max_tokens).Int("seed", 0, int64_t{1} << 53, &seed);
    f.Number("temperature", 0, 2, &temperature).Number("top_p", 0, 1, &top_p);
    std::optional<bool> think;
    if (j.contains("think")) {
      bool t = false;
      f.Bool("think", &t);
      think = t;
    }
    if (!f.ok()) return SendError(res, 400, "invalid_request", f.status().message());
    Request r;
    if (Status s = ApplyRouting(j, /*strict=*/false, &r); !s.ok()) return SendError(res, 400, "invalid_request", s.message());
    r.decode.max_tokens = static_cast<int>(max_tokens);
    r.decode.sampling.temperature = static_cast<float>(temperature);
    r.decode.sampling.top_p = static_cast<float>(top_p);
    r.decode.sampling.seed = static_cast<uint64_t>(seed);
    if (Status s = r.decode.sampling.Validate(); !s.ok()) return SendError(res, 400, "invalid_request", s.message());
    if (messages) {  // a conversation: the chat template over every message
      if (!prompt.empty()) return SendError(res, 400, "invalid_request", "give either 'prompt' or 'messages', not both");
      auto msgs = ParseChatMessages(*messages);
      if (!msgs.ok()) return SendError(res, 400, "invalid_request", msgs.status().message());
      auto ids = EncodeMessages(*models_.slm, *msgs, think);
      if (!ids.ok()) return SendError(res, 400, "invalid_request", ids.status().message());
      r.prompt = std::move(ids).value();
    } else {
      if (prompt.empty()) return SendError(res, 400, "invalid_request", "the prompt is empty");
      if (prompt.size() > kMaxPromptBytes) {
        return SendError(res, 400, "invalid_request", "the prompt is longer than " + std::to_string(kMaxPromptBytes) + " bytes");
      }
      auto ids = EncodePrompt(*models_.slm, prompt, chat, think);
      if (!ids.ok()) return SendError(res, 400, "invalid_request", ids.status().message());
      r.prompt = std::move(ids).value();
    }
    const int64_t need = static_cast<int64_t>(r.prompt.size()) + max_tokens + r.decode.route_span + 1;
    if (need > models_.n_ctx) {
      return SendError(res, 400, "context_length_exceeded",
                       "the prompt (" + std::to_string(r.prompt.size()) + " tokens) and max_tokens " +
                           std::to_string(max_tokens) + " do not fit the context of " + std::to_string(models_.n_ctx) +
                           " tokens (tlr ui --ctx)");
    }

    auto job = std::make_shared<Job>();
    {
      std::lock_guard<std::mutex> l(jobs_mu_);
      if (auto old = page_job_.lock()) {  // the page runs one generation: the newest
        old->superseded = true;
        old->cancelled = true;
      }
      page_job_ = job;
      job->id = next_job_++;
      live_.push_back(job.get());
    }
    jobs_cv_.notify_all();
    StartWorker(job, [this, job, r = std::move(r)] {
      RunPageJob(job, r);
      std::lock_guard<std::mutex> l(jobs_mu_);
      live_.erase(std::find(live_.begin(), live_.end(), job.get()));
    });
    SseStream::Serve(req, res, job, /*heartbeat_s=*/1.0);
  });
}

std::string DeviceServer::LlmName() const {
  const json& d = models_.describe;
  if (!d.is_object() || !d.contains("llm") || !d["llm"].is_object()) return "";
  auto it = d["llm"].find("name");
  return it != d["llm"].end() && it->is_string() ? it->get<std::string>() : "";
}

void DeviceServer::RunPageJob(const std::shared_ptr<Job>& job, const Request& r) {
  const DecodeOptions& d = r.decode;
  // The generation's statistics (DecodeStatsJson) and what the page shows beside them.
  auto stats_json = [&](const DecodeStats& st, double network_s) {
    json j = DecodeStatsJson(st);
    j["superseded"] = job->superseded.load();
    j["network_ms"] = Ms(network_s);
    j["pipeline"] = d.pipeline.enabled && d.mode == DecodeMode::kJoint;
    j["sim_slm_ms"] = Ms(d.sim_slm_s);
    return j;
  };
  if (!WaitTurn(job.get())) {  // superseded or stopped while it waited
    DecodeStats none;
    none.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    none.stop = "stopped";
    job->Push(Sse("stats", stats_json(none, 0)));
    job->Finish();
    return;
  }
  const UiRouter& router = models_.routers[r.router];
  job->Push(Sse("start", {{"prompt_tokens", r.prompt.size()},
                          {"mode", DecodeModeName(d.mode)},
                          {"router", router.name},
                          {"threshold", d.threshold},
                          {"max_tokens", d.max_tokens},
                          {"llm", LlmName()}}));
  int64_t i = 0;
  std::string first_llm_error;  // why the first FALLBACK token's call failed
  auto result = Generate(
      r, job.get(),
      [&](const TokenEvent& ev) {
        if (first_llm_error.empty()) first_llm_error = ev.llm_error;
        json token = TokenEventJson(ev, /*timing=*/true);
        token["i"] = i++;
        job->Push(Sse("token", token));
        return !job->cancelled.load();
      },
      [&](const ProvisionalEvent& p) {
        job->Push(Sse("provisional", {{"from", i}, {"ids", p.ids}, {"pending", p.pending}, {"text", p.text}}));
      });
  EndTurn();
  if (!result.ok()) {
    job->Push(Sse("error", {{"message", result.status().message()}}));
  } else {
    const DecodeStats& st = result->stats;
    // Network: for a remote LLM the whole call as the device sees it (round trips, the
    // server's queue and compute, --sim-rtt); in process, only the simulated round trips.
    json j = stats_json(st, result->remote ? st.llm_s : result->sim_delay_s);
    if (result->remote) {
      const RemoteStats& rs = result->remote_stats;
      j["http_requests"] = rs.http_requests;
      j["retries"] = rs.retries;
      j["resyncs"] = rs.resyncs;
      j["failed_calls"] = rs.failed_calls;
      j["sim_delay_ms"] = Ms(rs.sim_delay_s);
    }
    // Why calls failed: by kind for a server ("2 timeouts, 1 malformed reply: <message>").
    if (st.fallbacks > 0) {
      std::string reason = first_llm_error;
      if (result->remote) {
        RemoteStats diff = result->remote_stats;
        diff.first_failure = first_llm_error;
        if (std::string by_kind = diff.FailureSummary(); !by_kind.empty()) reason = by_kind;
      }
      j["llm_failure"] = reason;
    }
    job->Push(Sse("stats", j));
  }
  job->Finish();
}

}  // namespace tlr
