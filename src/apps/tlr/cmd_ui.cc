// `tlr ui`: a web page for interactive token routing (apps layer) — loads the SLM, the routers
// and the LLM (in process or behind --server), then serves the embedded single-page app and its
// API (device_server.h) on loopback until SIGINT/SIGTERM.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "apps/tlr/ui_assets.h"
#include "device/ui/device_server.h"
#include "model/model.h"
#include "net/http_front.h"
#include "ops/thread_pool.h"
#include "routing/qa.h"
#include "routing/router.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace {

std::string FileName(const std::string& path) { return std::filesystem::path(path).filename().string(); }

}  // namespace

namespace {

struct UiOwn {
  std::string results, model_name = "tlr";
  int examples = 5, kv_slots = 4, max_queue = 8;
  bool no_page = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(UiOwn, results, model_name, examples, kv_slots, max_queue, no_page)

}  // namespace

Command AddUiCommand(CLI::App& root) {
  auto [app, o, p] = NewCommand<UiOwn>(
      &root, "ui", "Web page for interactive token routing: watch the LLM's tokens appear in red");
  p->port = 8090;
  Example(app->add_option("--examples", o->examples, "How many example questions")->capture_default_str()
              ->check(CLI::Range(0, 100)),
          "2");
  Example(app->add_option("--results", o->results,
                          "results.json of `tlr eval --out DIR`: the page charts accuracy vs threshold from it"),
          "r.json");
  Example(app->add_flag("--no-page", o->no_page,
                        "Headless: serve only the OpenAI-compatible API (/v1/...), no web page and no /api/*"),
          "");
  Example(app->add_option("--max-queue", o->max_queue,
                          "OpenAI requests waiting or running at once; past it 429 with Retry-After")
              ->capture_default_str()->check(CLI::Range(1, 15)),
          "3");
  Example(app->add_option("--model-name", o->model_name, "The model id /v1/models lists")->capture_default_str(), "m");
  Example(app->add_option("--kv-slots", o->kv_slots,
                          "SLM contexts kept between requests (a conversation's next turn prefills only its new "
                          "tokens; several conversations at once each keep theirs); 0: none")
              ->capture_default_str()->check(CLI::Range(0, 1024)),
          "2");
  AddOptions(app, kCmdUi, p.get());
  app->footer(
      "Open the printed URL in a browser. The page is embedded in this binary and loads nothing\n"
      "from the network. LLM tokens are red, FALLBACK tokens (LLM unavailable) yellow; hover a\n"
      "token for its source and confidence.\n"
      "Apps and chat front ends use the routed OpenAI-compatible API at http://HOST:PORT/v1 (chat\n"
      "and completions, streamed or not; per request \"routing\": {\"mode\", \"threshold\", \"span\"}).\n"
      "Generations run one at a time in arrival order; a conversation's next turn prefills only its\n"
      "new tokens (--kv-slots conversations are kept).\n"
      "Endpoints: GET /, /api/info, /api/results, /v1/models; POST /api/generate (Server-Sent Events),\n"
      "/api/stop, /v1/chat/completions, /v1/completions\n"
      "Examples:\n"
      "  tlr ui                                             # bundled demo pair, http://127.0.0.1:8090/\n"
      "  tlr ui --results docs/results/results.json --sim-rtt 170\n"
      "  tlr ui --slm s.gguf --router r.gguf --server http://gpu-box:8080 --server-key \"$KEY\" --port 0\n"
      "  tlr ui --no-page --port 8080 --accept-key \"$APP_KEY\" --server http://gpu-box:8080");
  return MakeCommand(app, p, o, [o = o, p = p, app = app](const std::string& cmd) -> int {
            const bool guarded = o->no_page && !p->accept_keys.empty();
            if (!IsLoopbackHost(p->host) && !p->public_bind && !guarded) {
              return ReportError(cmd, "refusing to listen on " + p->host +
                                          " (not loopback): the page has no login, so anyone who reaches it could "
                                          "run generations here and use your LLM server; serve the API alone with "
                                          "--no-page --accept-key KEY, or give --public to allow it");
            }
            if (o->no_page) {
              for (const char* f : {"--results", "--examples", "--data"}) {
                const CLI::Option* given = app->get_option_no_throw(f);
                if (given && given->count() > 0) {
                  return ReportError(cmd, std::string(f) + " does nothing with --no-page (it is for the page)");
                }
              }
            }
            const bool remote = p->remote();
            const bool default_data = p->data == DemoFile("test.jsonl");
            nlohmann::json results;
            if (!o->results.empty()) {
              auto text = ReadFileToString(o->results);
              if (!text.ok()) return ReportError(cmd, "--results: " + text.status().message());
              results = nlohmann::json::parse(*text, nullptr, false);
              if (results.is_discarded() || !results.is_object() || !results.contains("rows") || !results["rows"].is_array()) {
                return ReportError(cmd, "--results: " + o->results + " is not a results.json of `tlr eval --out` "
                                                                     "(a JSON object with \"rows\")");
              }
            }
            std::vector<UiExample> examples;
            if (o->examples == 0 && !default_data) {
              return ReportError(cmd, "--data does nothing with --examples 0 (the page offers no example questions)");
            }
            if (o->examples > 0) {
              std::error_code ec;
              if (!default_data || std::filesystem::exists(p->data, ec)) {
                auto rows = LoadQaJsonl(p->data);
                if (!rows.ok()) return ReportError(cmd, "--data: " + rows.status().message());
                for (const QaRow& row : *rows) {
                  if (static_cast<int>(examples.size()) >= o->examples) break;
                  std::string answer;
                  for (size_t k = 0; k < row.labels.size(); ++k) {
                    if (row.labels[k] == row.answer_key) answer = row.labels[k] + ". " + row.texts[k];
                  }
                  examples.push_back({row.question, QaPrompt(row), answer});
                }
              }
            }

            auto pair = LoadPair(*p, PairNeeds{});
            if (!pair.ok()) return ReportError(cmd, pair.status().message());
            LlmTarget& llm = pair->llm;
            // The given router first (the page's default), then every built-in kind.
            std::vector<std::unique_ptr<Router>> routers;
            routers.push_back(std::move(pair->router));
            // --threshold: the given router's threshold on the page and for requests that name none.
            if (p->threshold >= 0) routers[0]->mutable_info().threshold = p->threshold;
            DeviceServerModels models;
            const bool learned = RouterIsLearned(routers[0]->kind());
            models.routers.push_back({std::string(RouterKindName(routers[0]->kind())),
                                      std::string(RouterKindName(routers[0]->kind())) +
                                          (learned ? " (" + FileName(p->router) + ")" : std::string(" (built-in)")),
                                      routers[0].get()});
            for (RouterKind k : {RouterKind::kMaxProb, RouterKind::kEntropy, RouterKind::kRandom}) {
              if (k == routers[0]->kind()) continue;
              auto r = Router::Builtin(k, p->decode.sampling.seed);
              if (!r.ok()) return ReportError(cmd, r.status().message());
              routers.push_back(std::make_unique<Router>(std::move(r).value()));
              models.routers.push_back({std::string(RouterKindName(k)), std::string(RouterKindName(k)) + " (built-in)",
                                        routers.back().get()});
            }

            ThreadPool pool(p->threads);
            std::string server_name;
            if (remote) {  // checks the server once (each conversation then opens its own session)
              auto r = MakeLlmStack(*pair, p->ctx, pair->slm->tokenizer());
              if (!r.ok()) return ReportError(cmd, r.status().message());
              server_name = (*r)->remote()->name();
              models.warning = (*r)->warning();
              // Checked at start; a conversation that begins while it is down later gets FALLBACK tokens.
              llm.config.remote.require_reachable = false;
            }
            models.pipeline = p->decode.pipeline;
            models.sim_slm_s = p->decode.sim_slm_s;
            models.policy = p->decode.policy;
            models.price_ratio = p->decode.price_ratio;
            models.cost_budget = p->decode.cost_budget;
            models.slm = pair->slm.get();
            models.llm = &llm;
            models.pool = &pool;
            models.sampling = p->decode.sampling;
            models.seed_per_request = app->get_option("--seed")->count() == 0;
            models.n_ctx = p->ctx;
            models.prompt_cache.max_slots = o->kv_slots;
            models.prompt_cache.n_ctx = p->ctx;
            models.prompt_cache.budget_bytes = p->kv_budget_bytes;
            models.describe = {
                {"slm", {{"name", FileName(p->slm)}, {"architecture", pair->slm->config().arch_name}}},
                {"llm", remote ? nlohmann::json{{"name", server_name}, {"where", "server"}, {"url", p->server.url},
                                                {"sim_rtt_ms", p->server.sim_rtt_ms}}
                               : nlohmann::json{{"name", FileName(p->llm)}, {"where", "in-process"},
                                                {"architecture", llm.model->config().arch_name},
                                                {"sim_rtt_ms", p->server.sim_rtt_ms}}}};
            DeviceServerOptions uo;
            uo.host = p->host;
            uo.port = p->port;
            uo.public_bind = p->public_bind;
            uo.default_max_tokens = static_cast<int>(std::min<int64_t>(p->decode.max_tokens, p->ctx));
            uo.examples = std::move(examples);
            uo.results = std::move(results);
            uo.assets = UiAssets();
            uo.page = !o->no_page;
            uo.api_keys = p->accept_keys;
            uo.max_queue = o->max_queue;
            uo.model_name = o->model_name;
            DeviceServer ui(std::move(models), std::move(uo));
            TLR_CLI_CHECK(cmd, ui.Start());
            InstallStopSignals();
            std::printf("tlr ui: SLM %s, LLM %s, router %s\n", FileName(p->slm).c_str(),
                        remote ? p->server.url.c_str() : FileName(p->llm).c_str(), std::string(RouterKindName(routers[0]->kind())).c_str());
            const bool v6 = p->host.find(':') != std::string::npos;
            std::printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", p->host.c_str(), v6 ? "]" : "", ui.port());
            std::printf("OpenAI-compatible API at http://%s%s%s:%d/v1 (model \"%s\")\n", v6 ? "[" : "", p->host.c_str(),
                        v6 ? "]" : "", ui.port(), o->model_name.c_str());
            return ServeUntilStopSignal(cmd, [&] { ui.Stop(); });
          });
}

}  // namespace tlr::cli
