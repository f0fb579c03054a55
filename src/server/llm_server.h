// LlmServer (server layer): the LLM side over HTTP/1.1 (keep-alive, optional TLS) — the
// native session protocol (docs/protocol.md), an OpenAI-compatible API, /health and /metrics.
// Every handler answers: malformed or oversized requests get a 4xx with a JSON error body
// ({"error": {"code", "message"}}), and nothing a client sends can take the server down.
// Over plain HTTP, connections are held by HttpFront (http_front.h): idle or slow clients hold
// no thread, and connections, request times, headers and bodies are bounded. With TLS, httplib's
// own model serves (one thread per connection, up to http_threads; timeouts bounded).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/metrics.h"
#include "server/llm_engine.h"
#include "server/web_files.h"
#include "util/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace tlr {

class HttpFront;
class SessionQuota;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port (see LlmServer::port)
  std::vector<std::string> api_keys;    // Bearer keys; empty: no auth (loopback only)
  bool public_bind = false;             // allow a non-loopback address without a key (--public)
  std::string tls_cert, tls_key;        // PEM files; both or neither
  uint64_t max_body_bytes = 4ull << 20; // Content-Length or chunked (413 past it)
  int http_threads = 64;                // requests handled at once (an idle connection holds none)
  int max_connections = 1024;           // open connections; the next gets 503
  double request_timeout_s = 10;        // a request's header and body must arrive within this (408)
  double idle_timeout_s = 30;           // an idle keep-alive connection is closed after this
  int listen_backlog = 1024;            // connects queued by the kernel before accept
  int64_t session_quota = 0;            // open sessions per API key (per client address without
                                        // keys), 429 past it; 0: a quarter of max_sessions
  std::string model_name;               // reported by /v1/models (default: the file's name)
  // The deadline of a call that gives none (native: timeout_ms; OpenAI: the X-TLR-Timeout-Ms or
  // X-Stainless-Timeout header): admission refuses what cannot be answered within it.
  double default_timeout_s = 30;
  // Pages of these origins ("https://app.example", or "*" for any) may call the server from a
  // browser (CORS: preflights answered, Access-Control-Allow-Origin on replies). None by default:
  // a browser then refuses every cross-origin call. API keys apply as to any client.
  std::vector<std::string> cors_origins;
  // Files served to browsers (`tlr serve --web`: the web UI with the SLM in the visitor's tab;
  // web_files.h). GET without a key; each reply makes the page cross-origin isolated.
  std::vector<WebFile> web_files;
};

// An engine's error as an HTTP reply (429 and 503 with Retry-After); `code` overrides the error
// code (the OpenAI endpoints name a bad request their way).
void SendEngineError(httplib::Response& res, const EngineResult& r, const std::string& code = {});

class LlmServer {
 public:
  LlmServer(LlmEngine* engine, Metrics* metrics, ServerOptions opts);
  ~LlmServer();
  LlmServer(const LlmServer&) = delete;
  LlmServer& operator=(const LlmServer&) = delete;

  // Checks the options, binds and starts serving on a background thread.
  Status Start();
  // The bound port (after Start).
  int port() const { return port_; }
  bool tls() const { return !opts_.tls_cert.empty(); }
  // Stops accepting, closes the connections and waits for the serving thread and for the
  // generations of streamed replies (which may outlive their connection by a token).
  void Stop();

 private:
  void Routes();
  void RoutesOpenAi();
  // Who a request is from: its API key ("API key #2") when the server has keys, else its address.
  std::string ClientOf(const httplib::Request& req) const;
  // Whom a native session must belong to for this request to use or delete it: its API key when
  // the server has keys; "" (any) without keys, where a session's id is all a device shows (its
  // address changes as it roams between networks).
  std::string SessionOwnerOf(const httplib::Request& req) const;
  // How long the client waits: X-TLR-Timeout-Ms, else X-Stainless-Timeout, else `fallback`.
  static Expected<double> RequestTimeout(const httplib::Request& req, double fallback);

  LlmEngine* engine_;
  Metrics* metrics_;
  ServerOptions opts_;
  std::unique_ptr<httplib::Server> http_;
  HttpFront* front_ = nullptr;  // http_, over plain HTTP
  std::unique_ptr<SessionQuota> quota_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<uint64_t> next_id_{1};
  std::once_flag vocabulary_once_;
  std::string vocabulary_gguf_;  // GET /tlr/v1/vocabulary
  // Streamed OpenAI replies whose generation thread has not ended: it uses this server (engine,
  // metrics) and may still run when the connection it answered is gone.
  std::mutex streams_mu_;
  std::condition_variable streams_cv_;
  int live_streams_ = 0;
};

}  // namespace tlr
