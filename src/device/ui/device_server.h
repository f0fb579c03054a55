// DeviceServer (device layer): the device-side HTTP service of `tlr ui`, the page and its API and
// the routed OpenAI API (alone when headless). It runs the SLM and the router here and talks to the
// LLM (in process or behind --server), and serves
//
// * the single-page app (its files given as DeviceServerOptions::assets; the tlr binary embeds them,
//   src/apps/tlr/ui_assets.h) and its small JSON/SSE API, unless headless (DeviceServerOptions::page):
//   GET  /, /index.html, /app.js, /style.css   the page (embedded; it loads nothing else)
//   GET  /api/info      models, routers (with their recommended thresholds), modes, limits,
//                       example prompts, whether eval results are loaded, the prompt cache
//   GET  /api/results   the --results file (results.json of `tlr eval --out`); 404 without one
//   POST /api/generate  {prompt | messages, mode, router, threshold, max_tokens, temperature, top_p,
//                       seed, chat, think, span, pipeline} -> text/event-stream: `start`, one
//                       `token` per confirmed token, `provisional` whenever the speculative tail
//                       (tokens the SLM decoded while routed tokens are on the network) changes,
//                       then `stats` (or `error`). Bad input: 400 {"error": {code, message}}.
//   POST /api/stop      cancels the page's running generation
//   A new /api/generate cancels the page's previous one (which ends with stop "stopped"), and so
//   does the client closing the stream.
//
// * a routed OpenAI-compatible API (ui_openai.cc) for apps and chat front ends:
//   GET  /v1/models, POST /v1/chat/completions and /v1/completions, streamed (SSE, with
//   stream_options.include_usage) or not. Per request, "routing": {"mode", "threshold", "span",
//   "router"} chooses the routing; each streamed chunk's choice carries "tlr": {"tokens": [{id,
//   text, source, confidence}]}, and usage adds prompt_tokens_details.cached_tokens (prompt
//   tokens reused from the prompt cache) and "tlr" (routed tokens, LLM calls and work,
//   fallbacks, stall). Requests wait in a bounded queue (past DeviceServerOptions::max_queue: 429 with
//   Retry-After); a client that goes away leaves it. With DeviceServerOptions::api_keys they need
//   "Authorization: Bearer KEY".
//
// Generations run one at a time, in the order they arrived (the page's and the API's alike), in
// conversation contexts kept between requests (the prompt cache, context_pool.h): a
// conversation's next turn prefills only its new tokens, on the device and on the LLM's side.
// POSTs must be JSON (so a foreign web page cannot start one without a CORS preflight, which this
// server never grants); unless the server is public, requests must name a loopback host exactly
// (DNS-rebinding guard: 127.0.0.0/8, ::1, localhost or the --host given; not
// "127.attacker.example"). Slow or idle clients hold no thread (http_front.h: 256 connections,
// 16 requests at once, 10 s to send a request, 1 MiB bodies, chunked included).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "device/session/context_pool.h"
#include "device/decode/decoder.h"
#include "device/session/device_session.h"
#include "model/model.h"
#include "model/sampler.h"
#include "routing/router.h"
#include "util/status.h"

namespace httplib {
class Server;
}

namespace tlr {

class HttpFront;
class ThreadPool;

// One static file of the page.
struct UiAsset {
  const char* path;          // URL path: "/", "/index.html", "/app.js", ...
  const char* content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view data;     // the file's bytes (must outlive the server)
};

struct UiRouter {
  std::string name;   // what /api/generate takes: "citer", "maxprob", ...
  std::string label;  // shown in the page
  Router* router;     // not owned
};

struct UiExample {
  std::string label;   // the question
  std::string prompt;  // QaPrompt of it
  std::string answer;  // "A. building" (empty when the set has no answers)
};

// What the UI generates with. Nothing is owned; everything must outlive the server.
struct DeviceServerModels {
  const Model* slm = nullptr;       // required (the router reads it; prompts use its tokenizer)
  const LlmTarget* llm = nullptr;   // required: where the LLM runs (in process or a server);
                                    // each conversation context keeps its own backend of it
  PipelineOptions pipeline;         // defaults; the page may turn the pipeline off
  double sim_slm_s = 0;             // simulated SLM pace (DecodeOptions::sim_slm_s)
  // Defaults of requests that do not name them (DecodeOptions).
  RoutePolicy policy = RoutePolicy::kThreshold;
  double price_ratio = 4, cost_budget = 0;
  std::vector<UiRouter> routers;    // the first is the default
  ThreadPool* pool = nullptr;       // used by one generation at a time
  SamplerParams sampling;           // defaults; the page sets temperature, top_p and seed
  // The OpenAI endpoint: a request without a seed draws its own (OpenAI's and llama.cpp's way:
  // "regenerate" gets another answer), unless the operator pinned one (`tlr ui --seed`).
  bool seed_per_request = true;
  int64_t n_ctx = 4096;             // prompt + max_tokens must fit
  ContextPoolOptions prompt_cache;  // the SLM contexts kept between requests (a conversation's
                                    // next turn prefills only what is new)
  nlohmann::json describe;          // {"slm": ..., "llm": ...} for /api/info
  std::string warning;              // shown in the page (e.g. the LLM server is down)
};

struct DeviceServerOptions {
  std::string host = "127.0.0.1";
  int port = 8090;                  // 0: any free port
  bool public_bind = false;         // allow a non-loopback host; lifts the Host check
  int default_max_tokens = 128;
  std::vector<UiExample> examples;
  nlohmann::json results;           // null: none
  std::span<const UiAsset> assets;  // the page's files (not owned; must outlive the server)
  bool page = true;                 // false: headless, the OpenAI API only (no page, no /api/*)
  std::vector<std::string> api_keys;  // the OpenAI API wants one as "Authorization: Bearer KEY"
  int max_queue = 8;                // OpenAI requests waiting or running; past it 429
  std::string model_name = "tlr";   // the model id /v1/models lists (requests may name any)
};

class DeviceServer {
 public:
  DeviceServer(DeviceServerModels models, DeviceServerOptions opts);
  ~DeviceServer();
  DeviceServer(const DeviceServer&) = delete;
  DeviceServer& operator=(const DeviceServer&) = delete;

  // Checks the options, binds and serves on a background thread.
  Status Start();
  int port() const { return port_; }
  // OpenAI requests waiting or running now (what --max-queue bounds).
  int api_requests() const {
    std::lock_guard<std::mutex> l(jobs_mu_);
    return api_jobs_;
  }
  // Cancels a running generation, stops serving and waits for every thread.
  void Stop();

 private:
  struct Job;      // one generation: its place in the queue and its SSE chunks (device_server.cc)
  struct Request;  // a checked generation request
  void Routes();
  void RoutesOpenAi();  // ui_openai.cc
  // r->decode from the command line's defaults, then the routing fields of `j` ("mode",
  // "router", "threshold", "span", "pipeline"); `strict`: any other field is an error (the
  // OpenAI request's "routing" object).
  Status ApplyRouting(const nlohmann::json& j, bool strict, Request* r) const;
  // Queues `job` and waits for its turn: true when it may run (call EndTurn after), false when it
  // was cancelled while it waited (it has left the queue). `gone` (may be empty) is polled while
  // waiting: true cancels the job (its client went away).
  bool WaitTurn(Job* job, const std::function<bool()>& gone = {});
  void EndTurn();
  // Runs one generation in the conversation context that shares the longest prefix with the
  // prompt (from the prompt cache; given back after). Call within a turn.
  Expected<DeviceRunResult> Generate(const Request& r, Job* job, const std::function<bool(const TokenEvent&)>& on_token,
                                     const std::function<void(const ProvisionalEvent&)>& on_provisional = {});
  std::string LlmName() const;  // from DeviceServerModels::describe ("" when it does not say)
  void RunPageJob(const std::shared_ptr<Job>& job, const Request& req);
  // A worker thread for `job` (counted so that Stop waits for it).
  void StartWorker(const std::shared_ptr<Job>& job, std::function<void()> body);

  DeviceServerModels models_;
  DeviceServerOptions opts_;
  std::unique_ptr<DeviceContextPool> contexts_;  // the prompt cache
  std::unique_ptr<httplib::Server> http_;
  HttpFront* front_ = nullptr;  // http_
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex jobs_mu_;  // guards everything below
  std::condition_variable jobs_cv_;
  std::weak_ptr<Job> page_job_;      // the page's latest generation
  std::vector<Job*> live_;           // every job queued or running (Stop cancels them)
  std::deque<Job*> queue_;           // waiting for their turn, oldest first
  bool busy_ = false;                // a generation is running
  int api_jobs_ = 0;                 // OpenAI requests queued or running (max_queue)
  double api_seconds_ = 0;           // average OpenAI generation time (Retry-After)
  int workers_ = 0;                  // worker threads not yet finished
  uint64_t next_job_ = 1;
};

}  // namespace tlr
