// LlmServer (system layer): the LLM side over HTTP/1.1 (keep-alive, optional TLS) — the
// native session protocol (docs/protocol.md), an OpenAI-compatible API, /health and /metrics.
// Every handler answers: malformed or oversized requests get a 4xx with a JSON error body
// ({"error": {"code", "message"}}), and nothing a client sends can take the server down.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "system/llm_engine.h"
#include "system/metrics.h"
#include "util/status.h"

namespace httplib {
class Server;
}

namespace tlr {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port (see LlmServer::port)
  std::vector<std::string> api_keys;    // Bearer keys; empty: no auth (loopback only)
  bool insecure = false;                // allow a non-loopback address without a key
  std::string tls_cert, tls_key;        // PEM files; both or neither
  uint64_t max_body_bytes = 4ull << 20;
  int http_threads = 64;                // connections served at once (keep-alive holds one)
  std::string model_name;               // reported by /v1/models (default: the file's name)
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);

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
  // Stops accepting and waits for the serving thread.
  void Stop();

 private:
  void Routes();
  void RoutesOpenAi();

  LlmEngine* engine_;
  Metrics* metrics_;
  ServerOptions opts_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace tlr
