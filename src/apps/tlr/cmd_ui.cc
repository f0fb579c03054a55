// `tlr ui`: a web page for interactive token routing (apps layer) — loads the SLM, the routers
// and the LLM (in process or behind --server), then serves the embedded single-page app and its
// API (ui_server.h) on loopback until SIGINT/SIGTERM.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/tlr/commands.h"
#include "apps/tlr/model_args.h"
#include "apps/tlr/ui_assets.h"
#include "device/ui/ui_server.h"
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

Command AddUiCommand(CLI::App& root) {
  struct Opts {
    std::string slm, llm, router, data, results, host = "127.0.0.1", model_name = "tlr";
    int port = 8090, examples = 5, max_tokens = 128, kv_slots = 4, max_queue = 8;
    std::string kv_budget = "1G";
    AcceptKeyArgs keys;
    bool public_bind = false, no_page = false;
    RunArgs run;
    LlmArgs net;
    PipelineArgs pipe;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* app = root.add_subcommand("ui", "Web page for interactive token routing: watch the LLM's tokens appear in red");
  app->add_option("--slm", o->slm, "Small model GGUF (default: the bundled demo SLM)");
  app->add_option("--llm", o->llm, "Large model GGUF, run in this process (default: the bundled demo LLM)");
  app->add_option("--router", o->router,
                  "Router GGUF from `tlr router train`, or a built-in kind: maxprob, entropy, random "
                  "(default: the bundled demo router); the built-in kinds are always offered too");
  app->add_option("--data", o->data, "Question set (JSONL) whose first questions the page offers as examples "
                                     "(default: the bundled test split)");
  app->add_option("--examples", o->examples, "How many example questions")->default_val(5)->check(CLI::Range(0, 100));
  app->add_option("--results", o->results,
                  "results.json of `tlr eval --out DIR`: the page charts accuracy vs threshold from it");
  app->add_option("--host", o->host, "Address to listen on (loopback only, unless --public)")->default_val("127.0.0.1");
  app->add_option("--port", o->port, "Port (0: any free port; the URL is printed)")->default_val(8090)
      ->check(CLI::Range(0, 65535));
  app->add_flag("--public", o->public_bind,
                "Allow a non-loopback --host. The page has no login: whoever reaches the port can run "
                "generations on this machine and use your LLM server (and its --server-key)");
  app->add_flag("--no-page", o->no_page,
                "Headless: serve only the OpenAI-compatible API (/v1/...), no web page and no /api/*");
  AddAcceptKeyArgs(app, &o->keys,
                   "the OpenAI API (with --no-page it guards everything, and a non-loopback --host is allowed "
                   "without --public; --server-key is the key this device sends to the LLM server)");
  AddDeprecatedOption(app, "--client-key", &o->keys.keys, "--accept-key");
  AddDeprecatedOption(app, "--client-key-file", &o->keys.file, "--accept-key-file");
  app->add_option("--max-queue", o->max_queue,
                  "OpenAI requests waiting or running at once; past it 429 with Retry-After")
      ->default_val(8)->check(CLI::Range(1, 15));
  app->add_option("--model-name", o->model_name, "The model id /v1/models lists")->default_val("tlr");
  app->add_option("-n,--max-tokens", o->max_tokens, "The page's initial max tokens")->default_val(128)
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--kv-slots", o->kv_slots,
                  "SLM contexts kept between requests (a conversation's next turn prefills only its new "
                  "tokens; several conversations at once each keep theirs); 0: none")
      ->default_val(4)->check(CLI::Range(0, 1024));
  app->add_option("--kv-budget", o->kv_budget, "KV memory the kept SLM contexts may hold (sizes: K, M, G)")
      ->default_val("1G");
  AddThreadArgs(app, &o->run);
  AddSamplingArgs(app, &o->run);
  AddLlmServerArgs(app, &o->net);
  AddPipelineArgs(app, &o->pipe);
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
  return {app, [o]() -> int {
            const char* cmd = "ui";
            TLR_CLI_CHECK(cmd, o->run.sampling.Validate());
            auto accepted = ResolveAcceptKeys(o->keys, "TLR_CLIENT_KEY");
            if (!accepted.ok()) return ReportError(cmd, accepted.status().message());
            std::vector<std::string> keys = std::move(accepted).value();
            const bool guarded = o->no_page && !keys.empty();
            if (!IsLoopbackHost(o->host) && !o->public_bind && !guarded) {
              return ReportError(cmd, "refusing to listen on " + o->host +
                                          " (not loopback): the page has no login, so anyone who reaches it could "
                                          "run generations here and use your LLM server; serve the API alone with "
                                          "--no-page --accept-key KEY, or give --public to allow it");
            }
            const bool remote = !o->net.server.empty();
            if (remote && !o->llm.empty()) return ReportError(cmd, "give either --llm or --server, not both");
            if (o->slm.empty()) o->slm = DemoFile("slm.gguf");
            if (o->llm.empty() && !remote) o->llm = DemoFile("llm.gguf");
            if (o->router.empty()) o->router = DemoFile("router.gguf");
            const bool default_data = o->data.empty();
            if (default_data) o->data = DemoFile("test.jsonl");

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
            if (o->examples > 0) {
              std::error_code ec;
              if (!default_data || std::filesystem::exists(o->data, ec)) {
                auto rows = LoadQaJsonl(o->data);
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

            auto slm = Model::Load(o->slm, ModelOptions(o->run.kv_type));
            if (!slm.ok()) return ReportError(cmd, "SLM: " + slm.status().message());
            LlmTarget llm;
            if (!remote) {
              auto m = Model::Load(o->llm, ModelOptions(o->run.kv_type));
              if (!m.ok()) return ReportError(cmd, "LLM: " + m.status().message());
              llm.model = std::move(m).value();
            }
            auto spec = MakeLlmSpec(o->net, nullptr, o->run.threads, 0, o->run.sampling.seed);
            TLR_CLI_CHECK(cmd, spec.status());
            llm.spec = *spec;
            // The given router first (the page's default), then every built-in kind.
            std::vector<std::unique_ptr<Router>> routers;
            auto primary = Router::LoadOrBuiltin(o->router, o->run.sampling.seed);
            if (!primary.ok()) return ReportError(cmd, primary.status().message());
            routers.push_back(std::make_unique<Router>(std::move(primary).value()));
            TLR_CLI_CHECK(cmd, routers[0]->CheckCompatible(**slm));
            UiModels models;
            const bool learned = RouterIsLearned(routers[0]->kind());
            models.routers.push_back({std::string(RouterKindName(routers[0]->kind())),
                                      std::string(RouterKindName(routers[0]->kind())) +
                                          (learned ? " (" + FileName(o->router) + ")" : std::string(" (built-in)")),
                                      routers[0].get()});
            for (RouterKind k : {RouterKind::kMaxProb, RouterKind::kEntropy, RouterKind::kRandom}) {
              if (k == routers[0]->kind()) continue;
              auto r = Router::Builtin(k, o->run.sampling.seed);
              if (!r.ok()) return ReportError(cmd, r.status().message());
              routers.push_back(std::make_unique<Router>(std::move(r).value()));
              models.routers.push_back({std::string(RouterKindName(k)), std::string(RouterKindName(k)) + " (built-in)",
                                        routers.back().get()});
            }

            ThreadPool pool(o->run.threads);
            std::string server_name;
            if (remote) {  // checks the server once (each conversation then opens its own session)
              auto r = MakeLlm(o->net, nullptr, o->run.threads, o->run.ctx, (*slm)->tokenizer(), o->run.sampling.seed);
              if (!r.ok()) return ReportError(cmd, r.status().message());
              server_name = (*r)->remote()->name();
              models.warning = (*r)->warning();
              // Checked at start; a conversation that begins while it is down later gets FALLBACK tokens.
              llm.spec.remote.require_reachable = false;
            }
            DecodeOptions pipe_opts;
            TLR_CLI_CHECK(cmd, o->pipe.Apply(&pipe_opts));
            models.pipeline = pipe_opts.pipeline;
            models.sim_slm_s = pipe_opts.sim_slm_s;
            models.slm = slm->get();
            models.llm = &llm;
            models.pool = &pool;
            models.sampling = o->run.sampling;
            models.n_ctx = o->run.ctx;
            models.prompt_cache.max_slots = o->kv_slots;
            models.prompt_cache.n_ctx = o->run.ctx;
            if (!ParseBytes(o->kv_budget, &models.prompt_cache.budget_bytes)) {
              return ReportError(cmd, "--kv-budget: not a size: '" + o->kv_budget + "' (e.g. 1G)");
            }
            models.describe = {
                {"slm", {{"name", FileName(o->slm)}, {"architecture", (*slm)->config().arch_name}}},
                {"llm", remote ? nlohmann::json{{"name", server_name}, {"where", "server"}, {"url", o->net.server},
                                                {"sim_rtt_ms", o->net.sim_rtt_ms}}
                               : nlohmann::json{{"name", FileName(o->llm)}, {"where", "in-process"},
                                                {"architecture", llm.model->config().arch_name},
                                                {"sim_rtt_ms", o->net.sim_rtt_ms}}}};
            UiOptions uo;
            uo.host = o->host;
            uo.port = o->port;
            uo.public_bind = o->public_bind;
            uo.default_max_tokens = static_cast<int>(std::min<int64_t>(o->max_tokens, o->run.ctx));
            uo.examples = std::move(examples);
            uo.results = std::move(results);
            uo.assets = UiAssets();
            uo.page = !o->no_page;
            uo.api_keys = std::move(keys);
            uo.max_queue = o->max_queue;
            uo.model_name = o->model_name;
            UiServer ui(std::move(models), std::move(uo));
            TLR_CLI_CHECK(cmd, ui.Start());
            InstallStopSignals();
            std::printf("tlr ui: SLM %s, LLM %s, router %s\n", FileName(o->slm).c_str(),
                        remote ? o->net.server.c_str() : FileName(o->llm).c_str(), std::string(RouterKindName(routers[0]->kind())).c_str());
            const bool v6 = o->host.find(':') != std::string::npos;
            std::printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", o->host.c_str(), v6 ? "]" : "", ui.port());
            std::printf("OpenAI-compatible API at http://%s%s%s:%d/v1 (model \"%s\")\n", v6 ? "[" : "", o->host.c_str(),
                        v6 ? "]" : "", ui.port(), o->model_name.c_str());
            std::fflush(stdout);
            WaitForStopSignal();
            std::fprintf(stderr, "tlr ui: stopping\n");
            ui.Stop();
            return 0;
          }};
}

}  // namespace tlr::cli
