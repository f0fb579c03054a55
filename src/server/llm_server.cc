// LlmServer: HTTP plumbing, auth, the native session protocol, /health and /metrics
// (the OpenAI endpoints are in openai_api.cc). See llm_server.h and docs/protocol.md.
#include "server/llm_server.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/vocab.h"
#include "net/http_front.h"
#include "net/protocol.h"
#include "net/server_json.h"
#include "server/server_requests.h"
#include "server/session_quota.h"

namespace tlr {

using server::json;
using server::SendError;
using server::SendJson;

namespace {

using Clock = std::chrono::steady_clock;

// Route label for metrics (ids out of paths, unknown paths in one bucket).
std::string EndpointLabel(const std::string& path) {
  static const char* kKnown[] = {"/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions",
                                 "/tlr/v1/info", "/tlr/v1/sessions", "/tlr/v1/next", "/tlr/v1/score",
                                 "/tlr/v1/vocabulary"};
  for (const char* k : kKnown) {
    if (path == k) return k;
  }
  if (path.rfind("/tlr/v1/sessions/", 0) == 0) return "/tlr/v1/sessions/{id}";
  return "other";
}

}  // namespace

void SendEngineError(httplib::Response& res, const EngineResult& r, const std::string& code) {
  const int status = HttpStatusOf(r.code);
  const std::string c = !code.empty() ? code : !r.error_code.empty() ? r.error_code : std::string(EngineCodeName(r.code));
  if (status == 429 || status == 503) return server::SendRetryLater(res, status, c, r.message, r.retry_after_s);
  SendError(res, status, c, r.message);
}

LlmServer::LlmServer(LlmEngine* engine, Metrics* metrics, ServerOptions opts)
    : engine_(engine), metrics_(metrics), opts_(std::move(opts)) {
  if (opts_.model_name.empty()) opts_.model_name = "tlr-llm";
}

LlmServer::~LlmServer() { Stop(); }

Status LlmServer::Start() {
  if (opts_.tls_cert.empty() != opts_.tls_key.empty()) {
    return Status::Error("TLS needs both --tls-cert and --tls-key");
  }
  if (!IsLoopbackHost(opts_.host) && opts_.api_keys.empty() && !opts_.public_bind) {
    return Status::Error("refusing to listen on " + opts_.host +
                         " (not loopback) without an API key: give --accept-key, or --public to allow anyone");
  }
  for (const std::string& k : opts_.api_keys) {
    if (k.empty()) return Status::Error("an API key must not be empty");
  }
  if (!opts_.tls_cert.empty()) {
    for (const std::string& f : {opts_.tls_cert, opts_.tls_key}) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(f, ec)) return Status::Error("TLS file " + f + " does not exist");
    }
    auto ssl = std::make_unique<httplib::SSLServer>(opts_.tls_cert.c_str(), opts_.tls_key.c_str());
    if (!ssl->is_valid()) {
      return Status::Error("cannot use the TLS certificate/key (" + opts_.tls_cert + ", " + opts_.tls_key +
                           "): not PEM, or the key does not match the certificate");
    }
    http_ = std::move(ssl);
    const int threads = std::max(4, opts_.http_threads);
    http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http_->set_keep_alive_max_count(100000);
    http_->set_keep_alive_timeout(static_cast<time_t>(std::clamp(opts_.idle_timeout_s, 1.0, 5.0)));
    http_->set_read_timeout(static_cast<time_t>(std::max(1.0, opts_.request_timeout_s)), 0);
    http_->set_write_timeout(30, 0);
    http_->set_payload_max_length(opts_.max_body_bytes);
  } else {
    FrontLimits lim;
    lim.max_connections = opts_.max_connections;
    lim.workers = std::max(4, opts_.http_threads);
    lim.request_timeout_s = opts_.request_timeout_s;
    lim.idle_timeout_s = opts_.idle_timeout_s;
    lim.max_body_bytes = opts_.max_body_bytes;
    auto front = std::make_unique<HttpFront>(lim, metrics_);
    front_ = front.get();
    http_ = std::move(front);
  }
  http_->set_tcp_nodelay(true);
  const int64_t quota = opts_.session_quota > 0 ? opts_.session_quota
                                                : std::max<int64_t>(1, engine_->limits().max_sessions / 4);
  quota_ = std::make_unique<SessionQuota>(quota);
  if (metrics_) {
    metrics_->DeclareCounter("tlr_http_requests_total", "HTTP requests by endpoint and status");
    metrics_->DeclareHistogram("tlr_http_request_seconds", "HTTP request latency by endpoint",
                               {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  }
  // Auth first (everything but /health needs a key when keys are set).
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // A browser page of an allowed origin: its preflight is answered here (before the key
    // check: browsers send no credentials with it), its calls carry the CORS headers.
    if (req.has_header("Origin") && !opts_.cors_origins.empty()) {
      const std::string origin = req.get_header_value("Origin");
      const bool allowed = std::find(opts_.cors_origins.begin(), opts_.cors_origins.end(), origin) != opts_.cors_origins.end() ||
                           std::find(opts_.cors_origins.begin(), opts_.cors_origins.end(), "*") != opts_.cors_origins.end();
      const bool preflight = req.method == "OPTIONS" && req.has_header("Access-Control-Request-Method");
      res.set_header("Vary", "Origin");  // the reply depends on it (for caches in between)
      if (allowed) {
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Access-Control-Expose-Headers", "Retry-After");
      }
      if (preflight) {
        if (!allowed) {
          SendError(res, 403, "origin_not_allowed", "pages of " + origin + " may not call this server (tlr serve --cors-origin)");
          return httplib::Server::HandlerResponse::Handled;
        }
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        res.set_header("Access-Control-Max-Age", "600");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    server::IgnoreRanges(req);
    if (server::RefuseBodyWithoutLength(req, res)) return httplib::Server::HandlerResponse::Handled;
    // httplib's own model (TLS) would read a chunked body whatever its size; HttpFront bounds it.
    if (!front_ && req.has_header("Transfer-Encoding")) {
      SendError(res, 411, "length_required", "with TLS, send the request body with a Content-Length, not chunked");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (opts_.api_keys.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if ((req.method == "GET" || req.method == "HEAD") && IsWebFile(opts_.web_files, req.path)) {
      return httplib::Server::HandlerResponse::Unhandled;  // the page loads before anyone types a key
    }
    if (BearerKeyIndex(req.get_header_value("Authorization"), opts_.api_keys) >= 0) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    SendError(res, 401, "unauthorized", "missing or wrong API key (send 'Authorization: Bearer <key>')");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib produces itself (unknown path, body too large, bad request line) get a
  // JSON body too.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    server::DescribeHttpError(req, res, "the request body exceeds the server's limit (--max-body)");
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    SendError(res, 500, "internal", "internal error while handling the request");
  });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (metrics_) {
      metrics_->Add("tlr_http_requests_total", 1,
                    {{"endpoint", EndpointLabel(req.path)}, {"status", std::to_string(res.status)}});
    }
  });
  Routes();
  RoutesOpenAi();
  ServeWebFiles(http_.get(), opts_.web_files);
  return BindAndListen(http_.get(), opts_.host, opts_.port, opts_.listen_backlog, &port_, &thread_);
}

void LlmServer::Stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
  if (front_) front_->Close();
  // Their connections are closed: each generation sees its client gone at its next token.
  std::unique_lock<std::mutex> l(streams_mu_);
  streams_cv_.wait(l, [this] { return live_streams_ == 0; });
}

void LlmServer::Routes() {
  const Model& model = engine_->model();
  auto timed = [this](const char* endpoint, auto fn) {
    return [this, endpoint, fn](const httplib::Request& req, httplib::Response& res) {
      const auto t0 = Clock::now();
      fn(req, res);
      if (metrics_) {
        metrics_->Observe("tlr_http_request_seconds",
                          std::chrono::duration<double>(Clock::now() - t0).count(), {{"endpoint", endpoint}});
      }
    };
  };
  auto model_json = [this, &model] {
    return json{{"name", opts_.model_name},
                {"architecture", model.config().arch_name},
                {"fingerprint", model.fingerprint_hex()},
                {"vocab_fingerprint", HashHex(model.tokenizer().Fingerprint())},
                {"n_vocab", model.config().n_vocab},
                // prefix_bytes: /tlr/v1/next spells held-back bytes first (token healing);
                // vocabulary: GET /tlr/v1/vocabulary serves the tokenizer (a GGUF)
                {"features", {"prefix_bytes", "vocabulary"}},
                {"limits",
                 {{"max_context", engine_->limits().max_context},
                  {"max_tokens_per_call", engine_->limits().max_tokens_per_call},
                  {"session_ttl_s", engine_->limits().session_ttl_s},
                  {"max_body_bytes", opts_.max_body_bytes}}}};
  };

  http_->Get("/health", timed("/health", [this](const httplib::Request&, httplib::Response& res) {
               SendJson(res, 200, {{"status", "ok"}, {"model", opts_.model_name}, {"sessions", engine_->session_count()}});
             }));
  http_->Get("/metrics", timed("/metrics", [this](const httplib::Request&, httplib::Response& res) {
               res.set_content(metrics_ ? metrics_->RenderPrometheus() : "", "text/plain; version=0.0.4");
             }));
  http_->Get("/tlr/v1/info", timed("/tlr/v1/info", [model_json](const httplib::Request&, httplib::Response& res) {
               SendJson(res, 200, model_json());
             }));
  // The LLM's tokenizer as a vocabulary-only GGUF, for devices whose SLM has another
  // vocabulary (docs/protocol.md): made once.
  http_->Get("/tlr/v1/vocabulary", timed("/tlr/v1/vocabulary", [this, &model](const httplib::Request&, httplib::Response& res) {
               std::call_once(vocabulary_once_, [&] {
                 GgufWriter w;
                 w.Set("general.architecture", GgufValue::Str(model.config().arch_name));
                 VocabToGguf(model.tokenizer().vocab(), &w);
                 if (auto b = w.ToBytes(); b.ok()) vocabulary_gguf_.assign(b->begin(), b->end());
               });
               if (vocabulary_gguf_.empty()) {
                 SendError(res, 500, "internal", "the vocabulary could not be written");
                 return;
               }
               res.set_content(vocabulary_gguf_, "application/octet-stream");
             }));
  http_->Post("/tlr/v1/sessions", timed("/tlr/v1/sessions", [this, model_json](const httplib::Request& req, httplib::Response& res) {
                // The body is {} (or empty); anything else that is not a JSON object is refused as
                // on every other endpoint.
                if (!req.body.empty() && !server::ParseBody(req, res)) return;
                // Who the session counts against (and shares prefixes with): its API key, else
                // the client's address.
                const std::string client = ClientOf(req);
                if (!quota_->Reserve(client, [this](const std::string& id) { return engine_->HasSession(id); })) {
                  res.set_header("Retry-After", "10");
                  return SendError(res, 429, "session_quota",
                                   "this client (" + client + ") already holds " + std::to_string(quota_->per_client()) +
                                       " open sessions, its quota (--session-quota); delete sessions it no longer "
                                       "uses (DELETE /tlr/v1/sessions/ID) or wait for them to expire");
                }
                SessionInfo info;
                EngineResult r = engine_->CreateSession(&info, client);
                if (!r.ok()) {
                  quota_->Cancel(client);
                  return SendEngineError(res, r);
                }
                quota_->Commit(client, info.id);
                json j = model_json();
                j["session"] = info.id;
                // Also in a header: a load balancer can learn the session's replica from it
                // without reading the body (tools/deploy/haproxy.cfg).
                res.set_header("Location", "/tlr/v1/sessions/" + info.id);
                SendJson(res, 201, j);
              }));
  http_->Delete(R"(/tlr/v1/sessions/([A-Za-z0-9-]{1,64}))",
                timed("/tlr/v1/sessions/{id}", [this](const httplib::Request& req, httplib::Response& res) {
                  if (!engine_->DeleteSession(req.matches[1], SessionOwnerOf(req))) {
                    return SendError(res, 404, "unknown_session", "unknown session '" + std::string(req.matches[1]) + "'");
                  }
                  quota_->Remove(req.matches[1]);
                  res.status = 204;
                }));
  http_->Post("/tlr/v1/next", timed("/tlr/v1/next", [this, &model](const httplib::Request& req, httplib::Response& res) {
                auto body = server::ParseBody(req, res);
                if (!body) return;
                auto parsed = server::ParseNextRequest(*body, engine_->limits(), model.config().n_vocab);
                if (!parsed.ok()) return SendError(res, 400, "invalid_request", parsed.status().message());
                NextRequest& nr = *parsed;
                if (nr.timeout_s <= 0) nr.timeout_s = opts_.default_timeout_s;
                nr.owner = SessionOwnerOf(req);
                if (front_) {
                  // Time it waited for a free worker counts.
                  nr.timeout_s = std::max(1e-3, nr.timeout_s - HttpFront::CurrentRequestAge());
                  nr.client_gone = [] { return HttpFront::CurrentClientGone(); };
                }
                const int top = nr.top_logprobs, lookahead = nr.lookahead;
                EngineResult r = engine_->Next(nr);
                if (r.code == EngineCode::kConflict) {
                  json e = {{"error", {{"code", "resync"}, {"message", r.message}, {"type", "resync"}, {"param", nullptr}}},
                            {"held", r.held},
                            {"held_hash", HashHex(r.held_hash)},
                            {"version", r.version}};
                  return SendJson(res, 409, e);
                }
                if (!r.ok()) return SendEngineError(res, r);
                json out = {{"tokens", r.reply.tokens},
                            {"logprobs", r.reply.logprobs},
                            {"position", r.reply.position},
                            {"version", r.reply.version},
                            {"finish_reason", r.reply.finish},
                            {"replayed", r.reply.replayed},
                            {"timing",
                             {{"queue_ms", r.reply.queue_s * 1e3},
                              {"compute_ms", r.reply.compute_s * 1e3},
                              {"prefilled", r.reply.prefilled}}},
                            {"session_work",
                             {{"prefilled", r.reply.session_work.prefilled},
                              {"generated", r.reply.session_work.generated},
                              {"forward_ms", r.reply.session_work.forward_s * 1e3}}}};
                if (top > 0) {
                  json tl = json::array();
                  for (const auto& per : r.reply.top) {
                    json a = json::array();
                    for (const TopLogprob& t : per) a.push_back({{"id", t.id}, {"logprob", t.logprob}});
                    tl.push_back(a);
                  }
                  out["top_logprobs"] = tl;
                }
                if (lookahead > 0) out["lookahead"] = r.reply.lookahead;
                if (!nr.heal.empty()) out["spelled"] = r.reply.spelled;
                SendJson(res, 200, out);
              }));
  // Teacher-forced scoring (router labels): per sequence, the model's argmax after every prefix,
  // the logprob of each next token of the sequence and, when asked, the top k.
  http_->Post("/tlr/v1/score", timed("/tlr/v1/score", [this, &model](const httplib::Request& req, httplib::Response& res) {
                auto body = server::ParseBody(req, res);
                if (!body) return;
                auto parsed = server::ParseScoreRequest(*body, engine_->limits(), model.config().n_vocab);
                if (!parsed.ok()) return SendError(res, 400, "invalid_request", parsed.status().message());
                // Dropped when the client leaves or the time it said it waits has passed (router
                // train's X-TLR-Timeout-Ms, from --llm-timeout): it could hold 64 x --ctx tokens of
                // work the server would do for nobody. Without such a header, no deadline.
                auto timeout = RequestTimeout(req, 0);
                if (!timeout.ok()) return SendError(res, 400, "invalid_request", timeout.status().message());
                CallControl control;
                if (*timeout > 0) control.timeout_s = std::max(1e-3, *timeout - (front_ ? HttpFront::CurrentRequestAge() : 0.0));
                if (front_) control.client_gone = [] { return HttpFront::CurrentClientGone(); };
                std::vector<std::vector<PromptPosition>> scores;
                EngineResult r = engine_->Score(parsed->sequences, parsed->top_logprobs, &scores, control);
                if (!r.ok()) return SendEngineError(res, r);
                json results = json::array();
                for (const auto& seq : scores) {
                  json argmax = json::array(), lps = json::array(), tops = json::array();
                  for (const PromptPosition& p : seq) {
                    argmax.push_back(p.argmax);
                    lps.push_back(p.logprob);
                    if (parsed->top_logprobs > 0) {
                      json a = json::array();
                      for (const TopLogprob& t : p.top) a.push_back({{"id", t.id}, {"logprob", t.logprob}});
                      tops.push_back(a);
                    }
                  }
                  json one = {{"argmax", argmax}, {"logprobs", lps}};
                  if (parsed->top_logprobs > 0) one["top_logprobs"] = tops;
                  results.push_back(one);
                }
                SendJson(res, 200, {{"results", results},
                                    {"timing", {{"queue_ms", r.reply.queue_s * 1e3},
                                                {"compute_ms", r.reply.compute_s * 1e3},
                                                {"prefilled", r.reply.prefilled}}}});
              }));
}

std::string LlmServer::SessionOwnerOf(const httplib::Request& req) const {
  return opts_.api_keys.empty() ? std::string() : ClientOf(req);
}

std::string LlmServer::ClientOf(const httplib::Request& req) const {
  return opts_.api_keys.empty()
             ? "address " + req.remote_addr
             : "API key #" + std::to_string(BearerKeyIndex(req.get_header_value("Authorization"), opts_.api_keys) + 1);
}

}  // namespace tlr
