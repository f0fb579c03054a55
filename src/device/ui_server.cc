// UiServer: the web UI's HTTP routes and the generation thread behind them (device layer). See
// ui_server.h for the endpoints and the rules (one generation at a time, cancellation, guards).
#include "device/ui_server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "device/decoder.h"
#include "device/llm_backend.h"
#include "device/llm_factory.h"
#include "model/chat_template.h"
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
constexpr int kMaxSpan = 16;
// What the page may load: itself only (no CDN, no fonts, no outside requests of any kind).
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string Sse(const char* event, const json& data) {
  return std::string("event: ") + event + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n\n";
}

// httplib matches routes as regular expressions.
std::string RegexEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

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

double Ms(double s) { return s * 1e3; }

}  // namespace

// One generation: its SSE chunks, produced by the worker thread, sent by httplib's thread.
struct UiServer::Job : SseStream {
  std::atomic<bool> superseded{false};  // cancelled by a newer generation
  uint64_t id = 0;
  ~Job() override { StopWorker(); }  // the worker reads superseded
};

// A checked /api/generate request.
struct UiServer::Request {
  std::vector<int32_t> prompt;
  DecodeOptions decode;
  size_t router = 0;  // index into UiModels::routers
};

UiServer::UiServer(UiModels models, UiOptions opts) : models_(std::move(models)), opts_(std::move(opts)) {
  if (models_.slm) {
    contexts_ = std::make_unique<SlmContextPool>(
        models_.prompt_cache, KvCache::BytesPerPosition(models_.slm->config(), models_.slm->kv_type()));
  }
}

UiServer::~UiServer() { Stop(); }

Status UiServer::Start() {
  if (!models_.slm || models_.routers.empty() || !models_.pool || (!models_.llm && !models_.remote)) {
    return Status::Error("the web UI needs an SLM, a router and an LLM (in process or behind --server)");
  }
  if (!IsLoopbackHost(opts_.host) && !opts_.public_bind) {
    return Status::Error("refusing to listen on " + opts_.host +
                         " (not loopback): the web UI has no authentication, so anyone who can reach the "
                         "port could run generations on this machine and your LLM server; give --public to "
                         "allow it");
  }
  // Slow or idle clients hold no thread (http_front.h); a generation's stream holds one worker.
  FrontLimits lim;
  lim.max_connections = 256;
  lim.workers = 16;
  lim.max_body_bytes = 1 << 20;
  auto front = std::make_unique<HttpFront>(lim);
  front_ = front.get();
  http_ = std::move(front);
  // DNS-rebinding guard: a page of another site whose name resolves to 127.0.0.1 sends its own
  // host name, not ours.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (server::RefuseBodyWithoutLength(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (opts_.public_bind) return httplib::Server::HandlerResponse::Unhandled;
    const std::string host = HostName(req.get_header_value("Host"));
    if (host.empty() || IsLoopbackHost(host) || host == opts_.host) return httplib::Server::HandlerResponse::Unhandled;
    SendError(res, 403, "forbidden_host",
              "this server answers only to loopback host names, not '" + host + "' (open http://127.0.0.1:" +
                  std::to_string(port_) + "/)");
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) SendError(res, 404, "not_found", "no endpoint " + req.method + " " + req.path);
    else if (res.status == 413) SendError(res, 413, "body_too_large", "the request body is larger than 1 MiB");
    else SendError(res, res.status, "http_error", "HTTP error " + std::to_string(res.status));
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    SendError(res, 500, "internal", "internal error while handling the request");
  });
  Routes();
  return BindAndListen(http_.get(), opts_.host, opts_.port, kDefaultListenBacklog, &port_, &thread_);
}

void UiServer::Stop() {
  {
    std::lock_guard<std::mutex> l(jobs_mu_);
    if (auto job = current_.lock()) job->cancelled = true;
  }
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
  if (front_) front_->Close();
  std::unique_lock<std::mutex> l(jobs_mu_);
  workers_cv_.wait(l, [this] { return workers_ == 0; });
}

void UiServer::Routes() {
  for (const UiAsset& a : opts_.assets) {
    http_->Get(RegexEscape(a.path), [a](const httplib::Request&, httplib::Response& res) {
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
      if (auto job = current_.lock(); job && !job->cancelled) {
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
    std::string prompt, mode = "joint", router = models_.routers[0].name;
    bool chat = false, pipeline = models_.pipeline.enabled;
    int64_t max_tokens = opts_.default_max_tokens, span = 1, seed = static_cast<int64_t>(models_.sampling.seed & ((1ull << 53) - 1));
    double temperature = models_.sampling.temperature, top_p = models_.sampling.top_p, threshold = -1;
    JsonFields f(j);
    f.String("prompt", &prompt).String("mode", &mode).String("router", &router).Bool("chat", &chat);
    f.Bool("pipeline", &pipeline).Int("max_tokens", 1, models_.n_ctx, &max_tokens).Int("span", 1, kMaxSpan, &span);
    f.Int("seed", 0, int64_t{1} << 53, &seed).Number("threshold", 0, 1, &threshold);
    f.Number("temperature", 0, 2, &temperature).Number("top_p", 0, 1, &top_p);
    ChatTemplateOptions chat_opts;
    if (j.contains("think")) {
      bool think = false;
      f.Bool("think", &think);
      chat_opts.enable_thinking = think;
    }
    if (!f.ok()) return SendError(res, 400, "invalid_request", f.status().message());
    if (prompt.empty()) return SendError(res, 400, "invalid_request", "the prompt is empty");
    if (prompt.size() > kMaxPromptBytes) {
      return SendError(res, 400, "invalid_request", "the prompt is longer than " + std::to_string(kMaxPromptBytes) + " bytes");
    }
    Request r;
    auto m = ParseDecodeMode(mode);
    if (!m.ok()) return SendError(res, 400, "invalid_request", m.status().message());
    r.router = models_.routers.size();
    std::string names;
    for (size_t i = 0; i < models_.routers.size(); ++i) {
      if (models_.routers[i].name == router) r.router = i;
      names += (i ? ", " : "") + models_.routers[i].name;
    }
    if (r.router == models_.routers.size()) {
      return SendError(res, 400, "invalid_request", "unknown router '" + router + "' (" + names + ")");
    }
    r.decode.mode = *m;
    r.decode.threshold = threshold >= 0 ? static_cast<float>(threshold) : models_.routers[r.router].router->info().threshold;
    r.decode.max_tokens = static_cast<int>(max_tokens);
    r.decode.route_span = static_cast<int>(span);
    r.decode.sampling = models_.sampling;
    r.decode.sampling.temperature = static_cast<float>(temperature);
    r.decode.sampling.top_p = static_cast<float>(top_p);
    r.decode.sampling.seed = static_cast<uint64_t>(seed);
    r.decode.pipeline = models_.pipeline;
    r.decode.pipeline.enabled = pipeline;
    r.decode.sim_slm_s = models_.sim_slm_s;
    if (Status s = r.decode.sampling.Validate(); !s.ok()) return SendError(res, 400, "invalid_request", s.message());
    const Model& slm = *models_.slm;
    const auto chat_text = chat ? ApplyChatTemplate(slm, {{"user", prompt}}, chat_opts) : Expected<std::string>(prompt);
    if (!chat_text.ok()) return SendError(res, 400, "invalid_request", chat_text.status().message());
    r.prompt = slm.tokenizer().Encode(*chat_text, !chat, chat);
    if (r.prompt.empty()) return SendError(res, 400, "invalid_request", "the prompt has no tokens");
    const int64_t need = static_cast<int64_t>(r.prompt.size()) + max_tokens + span + 1;
    if (need > models_.n_ctx) {
      return SendError(res, 400, "invalid_request",
                       "the prompt (" + std::to_string(r.prompt.size()) + " tokens) and max_tokens " +
                           std::to_string(max_tokens) + " do not fit the context of " + std::to_string(models_.n_ctx) +
                           " tokens (tlr ui --ctx)");
    }

    auto job = std::make_shared<Job>();
    {
      std::lock_guard<std::mutex> l(jobs_mu_);
      if (auto old = current_.lock()) {
        old->superseded = true;
        old->cancelled = true;
      }
      current_ = job;
      job->id = next_job_++;
      ++workers_;
    }
    job->worker = std::thread([this, job, r = std::move(r)] {
      RunJob(job, r);
      std::lock_guard<std::mutex> l(jobs_mu_);
      --workers_;
      workers_cv_.notify_all();
    });
    SseStream::Serve(res, job, /*heartbeat_s=*/1.0);
  });
}

void UiServer::RunJob(const std::shared_ptr<Job>& job, const Request& r) {
  std::lock_guard<std::mutex> gen(gen_mu_);  // one generation at a time
  const DecodeOptions& d = r.decode;
  auto stats_json = [&](const DecodeStats& st, double network_s) {
    json j = {{"stop", st.stop},
              {"superseded", job->superseded.load()},
              {"tokens", st.generated},
              {"routed", st.routed},
              {"routed_pct", st.routed_pct()},
              {"llm_prefilled", st.llm_work.prefilled},
              {"llm_generated", st.llm_work.generated},
              {"llm_generated_per_routed", st.llm_generated_per_routed()},
              {"fallbacks", st.fallbacks},
              {"llm_calls", st.llm_calls},
              {"prompt_tokens", st.prompt_tokens},
              {"prompt_reused", st.prompt_reused},
              {"ttft_ms", Ms(st.ttft_s)},
              {"tbt_ms", Ms(st.tbt_s)},
              {"slm_ms", Ms(st.slm_prefill_s + st.slm_decode_s)},
              {"slm_prefill_ms", Ms(st.slm_prefill_s)},
              {"router_ms", Ms(st.router_s)},
              {"llm_ms", Ms(st.llm_s)},
              {"network_ms", Ms(network_s)},
              {"total_ms", Ms(st.total_s)},
              {"pipeline", d.pipeline.enabled && d.mode == DecodeMode::kJoint},
              {"stall_ms", Ms(st.stall_s)},
              {"spec_resolved", st.spec_resolved},
              {"spec_hit_pct", st.spec_hit_pct()},
              {"lookahead_used", st.lookahead_used},
              {"wasted_slm_steps", st.wasted_slm_steps},
              {"cancelled_calls", st.cancelled_calls},
              {"sim_slm_ms", Ms(d.sim_slm_s)}};
    return j;
  };
  if (job->cancelled) {  // superseded or stopped while it waited for the one before it
    DecodeStats none;
    none.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    none.stop = "stopped";
    job->Push(Sse("stats", stats_json(none, 0)));
    job->Finish();
    return;
  }
  // The LLM: this request's own in-process backend (a KV cache sized for it), or the server's.
  std::unique_ptr<LlmStack> local;
  LlmBackend* backend = nullptr;
  RemoteStats before;
  if (models_.remote) {
    backend = models_.remote;
    before = models_.remote->stats();
  } else {
    LlmSpec spec;
    spec.model = models_.llm;
    spec.threads = models_.llm_threads;
    spec.n_ctx = static_cast<int64_t>(r.prompt.size()) + d.max_tokens + d.route_span + 1;
    spec.sim_rtt_s = models_.sim_rtt_s;
    spec.sim_jitter_s = models_.sim_jitter_s;
    spec.seed = d.sampling.seed + job->id;
    auto s = LlmStack::Create(spec, models_.slm->tokenizer());
    if (!s.ok()) {
      job->Push(Sse("error", {{"message", s.status().message()}}));
      job->Finish();
      return;
    }
    local = std::move(s).value();
    backend = local->backend();
  }
  const UiRouter& router = models_.routers[r.router];
  Router* use_router = d.mode == DecodeMode::kLargeOnly ? nullptr : router.router;
  job->Push(Sse("start", {{"prompt_tokens", r.prompt.size()},
                          {"mode", DecodeModeName(d.mode)},
                          {"router", router.name},
                          {"threshold", d.threshold},
                          {"max_tokens", d.max_tokens},
                          {"llm", backend->name()}}));
  CollabDecoder dec(*models_.slm, use_router, d.mode == DecodeMode::kSmallOnly ? nullptr : backend, models_.pool);
  int64_t i = 0;
  DecodeOptions dopt = d;
  dopt.cancel = &job->cancelled;
  dopt.on_provisional = [&](const ProvisionalEvent& p) {
    job->Push(Sse("provisional", {{"from", i}, {"ids", p.ids}, {"pending", p.pending}, {"text", p.text}}));
  };
  std::string first_llm_error;  // why the first FALLBACK token's call failed
  std::unique_ptr<DeviceContext> context = contexts_->Take(r.prompt);  // its SLM cache (the LLM is the request's)
  auto st = dec.Generate(r.prompt, dopt, [&](const TokenEvent& ev) {
    if (first_llm_error.empty()) first_llm_error = ev.llm_error;
    json token = {{"i", i++},
                            {"id", ev.id},
                            {"text", ev.text},
                            {"source", TokenSourceName(ev.source)},
                            {"confidence", ev.confidence},
                            {"end", ev.end},
                            {"spec", SpecOutcomeName(ev.spec)},
                            {"stall_ms", Ms(ev.stall_s)},
                            {"slm_ms", Ms(ev.slm_s)},
                            {"router_ms", Ms(ev.router_s)},
                            {"llm_ms", Ms(ev.llm_s)},
                            {"at_ms", Ms(ev.at_s)}};
    if (!ev.llm_error.empty()) token["llm_error"] = ev.llm_error;
    job->Push(Sse("token", token));
    return !job->cancelled.load();
  }, d.mode == DecodeMode::kLargeOnly ? nullptr : &context->slm);
  contexts_->Give(std::move(context));
  if (!st.ok()) {
    job->Push(Sse("error", {{"message", st.status().message()}}));
  } else {
    // Network: for a remote LLM the whole call as the device sees it (round trips, the
    // server's queue and compute, --sim-rtt); in process, only the simulated round trips.
    const double network_s = models_.remote ? st->llm_s : local->sim_delay_s();
    json j = stats_json(*st, network_s);
    if (models_.remote) {
      const RemoteStats now = models_.remote->stats();
      j["remote"] = {{"http_requests", now.http_requests - before.http_requests},
                     {"retries", now.retries - before.retries},
                     {"resyncs", now.resyncs - before.resyncs},
                     {"failed_calls", now.failed_calls - before.failed_calls},
                     {"sim_delay_ms", Ms(now.sim_delay_s - before.sim_delay_s)}};
    }
    // Why calls failed: by kind for a server ("2 timeouts, 1 malformed reply: <message>").
    if (st->fallbacks > 0) {
      std::string reason = first_llm_error;
      if (models_.remote) {
        RemoteStats diff = models_.remote->stats();
        for (int k = 0; k < kCallFailureKinds; ++k) diff.failures[k] -= before.failures[k];
        diff.first_failure = first_llm_error;
        if (std::string by_kind = diff.FailureSummary(); !by_kind.empty()) reason = by_kind;
      }
      j["fallback_reason"] = reason;
    }
    job->Push(Sse("stats", j));
  }
  job->Finish();
}

}  // namespace tlr
