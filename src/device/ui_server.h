// UiServer (device layer): the HTTP side of `tlr ui` — serves the single-page app (its files
// given as UiOptions::assets; the tlr binary embeds them, src/apps/tlr/ui_assets.h) and a small
// JSON/SSE API that runs the collaborative decoder for it.
//
//   GET  /, /index.html, /app.js, /style.css   the page (embedded; it loads nothing else)
//   GET  /api/info      models, routers (with their recommended thresholds), modes, limits,
//                       example prompts, whether eval results are loaded
//   GET  /api/results   the --results file (results.json of `tlr eval --out`); 404 without one
//   POST /api/generate  {prompt, mode, router, threshold, max_tokens, temperature, top_p, seed,
//                       chat, think, span, pipeline} -> text/event-stream: `start`, one `token` per
//                       confirmed token, `provisional` whenever the speculative tail (tokens the
//                       SLM decoded while routed tokens are on the network) changes, then
//                       `stats` (or `error`). Bad input: 400 {"error": {code, message}}.
//   POST /api/stop      cancels the running generation (the decoder stops at its next token)
//
// One generation runs at a time: a new /api/generate cancels the one before it (which ends with
// stop "stopped"), and so does the client closing the stream (a heartbeat comment each second
// notices a closed connection while the decoder waits for the LLM). POSTs must be JSON (so a
// foreign web page cannot start one without a CORS preflight, which this server never grants);
// unless the server is public, requests must name a loopback host exactly (DNS-rebinding guard:
// 127.0.0.0/8, ::1, localhost or the --host given; not "127.attacker.example"). Slow or idle
// clients hold no thread (http_front.h: 256 connections, 16 requests at once, 10 s to send a
// request, 1 MiB bodies, chunked included).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "device/context_pool.h"
#include "device/decoder.h"
#include "device/remote_llm.h"
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
struct UiModels {
  const Model* slm = nullptr;       // required (the router reads it; prompts use its tokenizer)
  const Model* llm = nullptr;       // an in-process LLM, or
  RemoteLlm* remote = nullptr;      // the LLM behind --server (exactly one of the two)
  double sim_rtt_s = 0, sim_jitter_s = 0;  // in-process LLM only (RemoteLlm adds its own)
  int llm_threads = 1;              // the in-process LLM's own thread pool
  PipelineOptions pipeline;         // defaults; the page may turn the pipeline off
  double sim_slm_s = 0;             // simulated SLM pace (DecodeOptions::sim_slm_s)
  std::vector<UiRouter> routers;    // the first is the default
  ThreadPool* pool = nullptr;       // used by one generation at a time
  SamplerParams sampling;           // defaults; the page sets temperature, top_p and seed
  int64_t n_ctx = 4096;             // prompt + max_tokens must fit
  ContextPoolOptions prompt_cache;  // the SLM contexts kept between requests (a conversation's
                                    // next turn prefills only what is new)
  nlohmann::json describe;          // {"slm": ..., "llm": ...} for /api/info
  std::string warning;              // shown in the page (e.g. the LLM server is down)
};

struct UiOptions {
  std::string host = "127.0.0.1";
  int port = 8090;                  // 0: any free port
  bool public_bind = false;         // allow a non-loopback host; lifts the Host check
  int default_max_tokens = 128;
  std::vector<UiExample> examples;
  nlohmann::json results;           // null: none
  std::span<const UiAsset> assets;  // the page's files (not owned; must outlive the server)
};

class UiServer {
 public:
  UiServer(UiModels models, UiOptions opts);
  ~UiServer();
  UiServer(const UiServer&) = delete;
  UiServer& operator=(const UiServer&) = delete;

  // Checks the options, binds and serves on a background thread.
  Status Start();
  int port() const { return port_; }
  // Cancels a running generation, stops serving and waits for every thread.
  void Stop();

 private:
  struct Job;      // one generation: its thread and its queue of SSE chunks (ui_server.cc)
  struct Request;  // a checked /api/generate request
  void Routes();
  void RunJob(const std::shared_ptr<Job>& job, const Request& req);

  UiModels models_;
  UiOptions opts_;
  std::unique_ptr<SlmContextPool> contexts_;  // the prompt cache
  std::unique_ptr<httplib::Server> http_;
  HttpFront* front_ = nullptr;  // http_
  std::thread thread_;
  int port_ = 0;
  std::mutex gen_mu_;      // held while a generation runs (models, router, pool, backend)
  std::mutex jobs_mu_;     // guards current_ and workers_
  std::condition_variable workers_cv_;
  std::weak_ptr<Job> current_;
  int workers_ = 0;        // generation threads not yet finished
  uint64_t next_job_ = 1;
};

}  // namespace tlr
