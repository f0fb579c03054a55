// `tlr serve`: the LLM server (apps layer) — sessions with delta sync, continuous batching,
// the native token protocol and an OpenAI-compatible API, /health and /metrics.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "apps/tlr/serve_web.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/thread_pool.h"
#include "server/llm_engine.h"
#include "server/llm_server.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace {

struct ServeOwn {
  std::string max_body = "4M", name, tls_cert, tls_key, web, web_slm, web_router, web_data;
  int http_threads = 64, max_tokens = 256, prompt_cache = 0, max_connections = 1024, backlog = 1024;
  int64_t max_sessions = 1024, batch_tokens = 512, session_quota = 0;
  double ttl = 600, request_timeout = 10, keep_alive = 30, default_timeout = 30, cold_share = 0.5,
         new_conversation_share = 0.1;
  std::vector<std::string> cors_origins;
  bool no_prefix_sharing = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ServeOwn, max_body, name, tls_cert, tls_key, web, web_slm, web_router, web_data,
                                   http_threads, max_tokens, prompt_cache, max_connections, backlog, max_sessions,
                                   batch_tokens, session_quota, ttl, request_timeout, keep_alive, default_timeout,
                                   cold_share, new_conversation_share, cors_origins, no_prefix_sharing)

}  // namespace

Command AddServeCommand(CLI::App& root) {
  auto [app, o, p] = NewCommand<ServeOwn>(
      &root, "serve", "Serve an LLM to devices: token protocol with sessions, OpenAI-compatible API");
  p->kv_budget = "4G";
  Example(app->add_option("--max-sessions", o->max_sessions, "Open sessions at most")->default_val(1024)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20)), "5");
  Example(app->add_option("--session-ttl", o->ttl, "Seconds an idle session lives")->default_val(600)
      ->check(CLI::Range(1.0, 1e7)), "9");
  Example(app->add_option("--max-tokens", o->max_tokens, "Tokens one call may generate at most")->default_val(256)
      ->check(CLI::Range(1, 1 << 16)), "7");
  Example(app->add_option("--max-body", o->max_body, "Largest request body (e.g. 4M)")->default_val("4M"), "1M");
  Example(app->add_option("--batch-tokens", o->batch_tokens, "Tokens per batched forward pass")->default_val(512)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16)), "64");
  Example(app->add_option("--default-timeout", o->default_timeout,
                  "Seconds a call may take when it does not say (native: timeout_ms; OpenAI: the X-TLR-Timeout-Ms "
                  "or X-Stainless-Timeout header); a call that cannot be answered within its time is refused at once "
                  "(429 overloaded, with Retry-After)")
      ->default_val(30)->check(CLI::Range(0.01, 86400.0)), "5");
  Example(app->add_option("--cold-share", o->cold_share,
                  "Behind a queue, a new or resynced conversation's prefill is admitted only when it can be answered "
                  "within this share of its time; the rest is kept for the routed tokens of conversations in progress "
                  "(behind a short queue it may use all of it)")
      ->default_val(0.5)->check(CLI::Range(0.01, 1.0)), "0.3");
  Example(app->add_option("--new-conversation-share", o->new_conversation_share,
                  "While the server is busy without a gap and refusing calls, new or resynced conversations (calls "
                  "feeding more than 32 tokens, more than their session holds) get at most this share of its token "
                  "rate; 1: no bound, 0: none until the refusals stop")
      ->default_val(0.1)->check(CLI::Range(0.0, 1.0)), "0.2");
  Example(app->add_option("--prompt-cache", o->prompt_cache,
                  "Most KV caches the OpenAI endpoints keep for reuse by prefix (one per client resending a growing "
                  "context); 0: as many as --kv-budget holds (least recently used evicted first)")
      ->default_val(0)->check(CLI::Range(0, 1 << 20)), "3");
  Example(app->add_flag("--no-prefix-sharing", o->no_prefix_sharing,
                "A new conversation never starts from a copy of another's KV: by default one whose first tokens "
                "another idle session or prompt cache of the same client (API key, else address) holds (a system "
                "prompt its devices all send) copies that prefix instead of prefilling it"),
          "");
  Example(app->add_option("--http-threads", o->http_threads,
                  "Requests handled at once (idle and slow connections hold none; with TLS, connections)")
      ->default_val(64)->check(CLI::Range(4, 4096)), "8");
  Example(app->add_option("--max-connections", o->max_connections,
                  "Open connections at most; past it a new one gets 503 too_many_connections")
      ->default_val(1024)->check(CLI::Range(1, 1 << 20)), "9");
  Example(app->add_option("--request-timeout", o->request_timeout,
                  "Seconds a request's header and body may take to arrive (408 past it)")
      ->default_val(10)->check(CLI::Range(0.1, 3600.0)), "3");
  Example(app->add_option("--keep-alive-timeout", o->keep_alive, "Seconds an idle keep-alive connection stays open")
      ->default_val(30)->check(CLI::Range(0.1, 3600.0)), "3");
  Example(app->add_option("--listen-backlog", o->backlog, "Connections the kernel queues before they are accepted "
                                                 "(capped by net.core.somaxconn)")
      ->default_val(1024)->check(CLI::Range(1, 1 << 20)), "9");
  Example(app->add_option("--session-quota", o->session_quota,
                  "Open sessions one client may hold: per API key, or per client address without keys "
                  "(429 session_quota past it; 0: a quarter of --max-sessions)")
      ->default_val(0)->check(CLI::Range(int64_t{0}, int64_t{1} << 20)), "3");
  Example(app->add_option("--cors-origin", o->cors_origins,
                  "Let web pages of this origin call the server from a browser, e.g. https://app.example "
                  "(repeat for several; * for any); none by default"), "https://a.example");
  Example(app->add_option("--web", o->web,
                  "Serve the web UI with the SLM in the visitor's browser tab: DIR is the browser build (`make wasm`: "
                  "build-wasm/web); open the printed URL, the tab routes its doubted tokens here")
      ->check(CLI::ExistingDirectory), "@demo");
  Example(app->add_option("--web-slm", o->web_slm, "With --web: the SLM the tab runs (default: the bundled demo SLM)")
      ->check(CLI::ExistingFile), "@demo/slm.gguf");
  Example(app->add_option("--web-router", o->web_router,
                  "With --web: its router, a GGUF or a built-in kind (default: the bundled demo router)"), "maxprob");
  Example(app->add_option("--web-data", o->web_data,
                  "With --web: question set (JSONL) whose first questions the page offers as examples "
                  "(default: the bundled test split with the demo SLM, none otherwise)")
      ->check(CLI::ExistingFile), "@demo/test.jsonl");
  Example(app->add_option("--tls-cert", o->tls_cert, "TLS certificate (PEM); serve HTTPS")->check(CLI::ExistingFile), "@demo/README.md");
  Example(app->add_option("--tls-key", o->tls_key, "TLS private key (PEM)")->check(CLI::ExistingFile), "@demo/README.md");
  Example(app->add_option("--name", o->name, "Model name reported by /v1/models (default: the file name)"), "x");
  app->footer(
      "Endpoints: POST /tlr/v1/sessions, POST /tlr/v1/next, DELETE /tlr/v1/sessions/ID, GET /tlr/v1/info\n"
      "           POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics\n"
      "Protocol: docs/protocol.md. Prints 'listening on URL' once ready; stops on SIGINT/SIGTERM.\n"
      "Examples:\n"
      "  tlr serve                                          # bundled demo LLM on 127.0.0.1:8080\n"
      "  tlr serve -m qwen2.5-7b-q4_0.gguf --host 0.0.0.0 --accept-key \"$KEY\" --tls-cert c.pem --tls-key k.pem\n"
      "  tlr serve --web build-wasm/web                     # + the web UI, the SLM in the visitor's tab (make wasm)");
  AddOptions(app, kCmdServe, p.get());
  return MakeCommand(app, p, o, [o = o, p = p](const std::string& cmd) -> int {
            ServerOptions so;
            so.host = p->host;
            so.port = p->port;
            so.api_keys = p->accept_keys;
            so.public_bind = p->public_bind;
            // An origin is scheme://host[:port], as browsers send it: a trailing slash (pasted from the
            // address bar) is dropped; a path could never match and is an error.
            for (std::string& origin : o->cors_origins) {
              if (origin == "*") continue;
              if (origin.size() > 1 && origin.back() == '/') origin.pop_back();
              const size_t scheme = origin.find("://");
              if ((origin.rfind("http://", 0) != 0 && origin.rfind("https://", 0) != 0) ||
                  origin.find('/', scheme + 3) != std::string::npos || origin.size() == scheme + 3) {
                return ReportError(cmd, "--cors-origin '" + origin + "' is not an origin: give scheme://host[:port] "
                                        "as browsers send it (e.g. https://app.example), or * for any");
              }
            }
            so.cors_origins = o->cors_origins;
            so.tls_cert = o->tls_cert;
            so.tls_key = o->tls_key;
            so.http_threads = o->http_threads;
            so.max_connections = o->max_connections;
            so.request_timeout_s = o->request_timeout;
            so.idle_timeout_s = o->keep_alive;
            so.listen_backlog = o->backlog;
            so.session_quota = o->session_quota;
            so.default_timeout_s = o->default_timeout;
            if (!ParseBytes(o->max_body, &so.max_body_bytes)) return ReportError(cmd, "--max-body: not a size: '" + o->max_body + "' (e.g. 4M)");
            EngineLimits lim;
            lim.kv_budget_bytes = p->kv_budget_bytes;
            lim.max_context = p->ctx;
            lim.max_sessions = o->max_sessions;
            lim.session_ttl_s = o->ttl;
            lim.max_tokens_per_call = o->max_tokens;
            lim.max_batch_tokens = o->batch_tokens;
            lim.prompt_cache_slots = o->prompt_cache;
            lim.share_prefixes = !o->no_prefix_sharing;
            lim.cold_share = o->cold_share;
            lim.new_share = o->new_conversation_share;
            auto model = Model::Load(p->model, ModelOptions(p->kv_type));
            if (!model.ok()) return ReportError(cmd, model.status().message());
            so.model_name = o->name.empty() ? std::filesystem::path(p->model).stem().string() : o->name;
            {
              // A budget that holds no real conversation would answer every call 503.
              const uint64_t per_token = KvCache::BytesPerPosition((*model)->config(), (*model)->kv_type());
              const int64_t least = std::min<int64_t>(p->ctx, 256);
              if (lim.kv_budget_bytes < per_token * static_cast<uint64_t>(least)) {
                return ReportError(cmd, "--kv-budget " + p->kv_budget + " holds fewer than " + std::to_string(least) +
                                            " tokens of this model's KV cache (" + std::to_string(per_token) +
                                            " bytes each): give at least " +
                                            std::to_string((per_token * static_cast<uint64_t>(least) >> 20) + 1) + "M");
              }
            }
            if (o->web.empty() && (!o->web_slm.empty() || !o->web_router.empty() || !o->web_data.empty())) {
              return ReportError(cmd, "--web-slm, --web-router and --web-data go with --web DIR (the browser build)");
            }
            if (!o->web.empty()) {
              ServeWebArgs web;
              web.dir = o->web;
              const bool demo = o->web_slm.empty();
              web.slm = demo ? DemoFile("slm.gguf") : o->web_slm;
              web.router = o->web_router.empty() ? (demo ? DemoFile("router.gguf") : "maxprob") : o->web_router;
              web.data = !o->web_data.empty() ? o->web_data : demo ? DemoFile("test.jsonl") : "";
              web.llm_name = so.model_name;
              web.max_context = lim.max_context;
              web.needs_key = !so.api_keys.empty();
              auto files = WebUiFiles(web);
              if (!files.ok()) return ReportError(cmd, files.status().message());
              so.web_files = std::move(*files);
            }
            ThreadPool pool(p->threads);
            Metrics metrics;
            LlmEngine engine(**model, &pool, lim, &metrics);
            LlmServer server(&engine, &metrics, so);
            TLR_CLI_CHECK(cmd, server.Start());
            InstallStopSignals();
            std::printf("tlr serve: %s (%s, %lld-token sessions, KV budget %llu MiB, %d threads)\n", so.model_name.c_str(),
                        (*model)->config().arch_name.c_str(), static_cast<long long>(lim.max_context),
                        static_cast<unsigned long long>(lim.kv_budget_bytes >> 20), p->threads);
            // An IPv6 address goes in brackets in a URL (http://[::1]:8080).
            const std::string url_host = so.host.find(':') != std::string::npos ? "[" + so.host + "]" : so.host;
            std::printf("listening on %s://%s:%d\n", server.tls() ? "https" : "http", url_host.c_str(), server.port());
            if (!o->web.empty()) {
              std::printf("web UI with the SLM in the browser tab: %s://%s:%d/\n", server.tls() ? "https" : "http",
                          url_host.c_str(), server.port());
            }
            return ServeUntilStopSignal(cmd, [&] { server.Stop(); });
          });
}

}  // namespace tlr::cli
