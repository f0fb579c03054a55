// `tlr eval`: accuracy, routed share and latency of the collaborative decoder on a
// multiple-choice set, for the baselines and a list of thresholds (apps layer).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/tlr/commands.h"
#include "apps/tlr/model_args.h"
#include "apps/tlr/progress.h"
#include "device/remote/remote_llm.h"
#include "model/model.h"
#include "ops/thread_pool.h"
#include "tools/eval.h"
#include "tools/plots.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace {

Expected<std::vector<float>> ParseThresholds(const std::string& s) {
  std::vector<float> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    const float v = std::strtof(item.c_str(), &end);
    if (!end || *end != 0 || !(v >= 0.0f && v <= 1.0f)) {
      return Status::Error("--thresholds: '" + item + "' is not a number in [0, 1]");
    }
    out.push_back(v);
  }
  return out;
}

Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace

Command AddEvalCommand(CLI::App& root) {
  struct Opts {
    std::string slm, llm, router, data, out, answers, thresholds = "0.4,0.5,0.6,0.7,0.72,0.76,0.8,0.9";
    int limit = 100, max_tokens = 100, span = 1;
    double price_ratio = 4;
    bool no_baselines = false, chat = false, full_table = false;
    std::optional<bool> think;
    RunArgs run;
    LlmArgs net;
    PipelineArgs pipe;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* app = root.add_subcommand(
      "eval", "Accuracy, routed share and latency per threshold on a multiple-choice set (Table 1)");
  app->add_option("--slm", o->slm, "Small model GGUF (default: the bundled demo SLM)");
  app->add_option("--llm", o->llm, "Large model GGUF (default: the bundled demo LLM)");
  app->add_option("--router", o->router, "Router GGUF or maxprob/entropy/random (default: the demo router)");
  app->add_option("--data", o->data,
                  "CommonsenseQA JSONL, flattened or nested schema (default: the demo test split)");
  app->add_option("--thresholds", o->thresholds, "Comma-separated thresholds for joint rows")
      ->default_val(o->thresholds);
  app->add_option("--limit", o->limit, "Questions to use (0 = all)")->default_val(100)
      ->check(CLI::Range(0, 1 << 30));
  app->add_option("--max-tokens", o->max_tokens, "Tokens per answer at most")->default_val(100)
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--span", o->span, "Tokens per LLM call")->default_val(1)->check(CLI::Range(1, 64));
  app->add_flag("--no-baselines", o->no_baselines, "Skip the small_only and large_only rows");
  app->add_flag("--full-table", o->full_table, "Print every column (22, as Markdown) instead of the terminal's nine");
  app->add_option("--price-ratio", o->price_ratio,
                  "Price model of the LLM cost columns: an output token costs this many input tokens "
                  "(API price lists: 3-5)")
      ->default_val(4)->check(CLI::Range(0.0, 1000.0));
  auto* chat = app->add_flag("--chat", o->chat,
                "Instruct models: ask in the SLM's chat template (question, choices, \"Answer with the "
                "letter of the correct choice, then explain briefly.\"); default: the plain "
                "\"Question: ...\\nA. ...\" prompt the demo pair was trained on");
  AddThinkArgs(app, chat, &o->think);
  app->add_option("--out", o->out,
                  "Directory for results.json, results.csv and SVG plots (accuracy and routed share vs "
                  "threshold, stacked latency, accuracy vs routed share)");
  app->add_option("--answers", o->answers,
                  "Write every answer as JSONL: row (mode, threshold), question id, token ids and their sources "
                  "(to compare runs token for token)");
  AddThreadArgs(app, &o->run);
  AddSamplingArgs(app, &o->run);
  AddLlmServerArgs(app, &o->net);
  AddPipelineArgs(app, &o->pipe);
  app->footer("Examples:\n"
              "  tlr eval --limit 200 --out results/   # bundled demo pair, test split\n"
              "  tlr eval --server http://127.0.0.1:8080 --sim-rtt 170 --out results/   # LLM behind `tlr serve`\n"
              "  tlr eval --sim-rtt 170 --sim-slm-ms 20 --pipeline off --thresholds 0.8   # the blocking loop");
  return {app, [o]() -> int {
            const char* cmd = "eval";
            TLR_CLI_CHECK(cmd, o->run.sampling.Validate());
            auto thresholds = ParseThresholds(o->thresholds);
            TLR_CLI_CHECK(cmd, thresholds.status());
            if (o->slm.empty()) o->slm = DemoFile("slm.gguf");
            if (o->llm.empty()) o->llm = DemoFile("llm.gguf");
            if (o->router.empty()) o->router = DemoFile("router.gguf");
            if (o->data.empty()) o->data = DemoFile("test.jsonl");
            auto rows = LoadQaJsonl(o->data);
            if (!rows.ok()) return ReportError(cmd, rows.status().message());
            if (o->limit > 0 && static_cast<size_t>(o->limit) < rows->size()) rows->resize(o->limit);
            auto slm = Model::Load(o->slm, ModelOptions(o->run.kv_type));
            if (!slm.ok()) return ReportError(cmd, "SLM: " + slm.status().message());
            const bool remote = !o->net.server.empty();
            std::unique_ptr<Model> llm;
            if (!remote) {
              auto m = Model::Load(o->llm, ModelOptions(o->run.kv_type));
              if (!m.ok()) return ReportError(cmd, "LLM: " + m.status().message());
              llm = std::move(m).value();
            }
            auto router = Router::LoadOrBuiltin(o->router, o->run.sampling.seed);
            if (!router.ok()) return ReportError(cmd, router.status().message());
            TLR_CLI_CHECK(cmd, router->CheckCompatible(**slm));
            if (!o->out.empty()) {
              std::error_code ec;
              std::filesystem::create_directories(o->out, ec);
              if (ec) return ReportError(cmd, "cannot create '" + o->out + "': " + ec.message());
            }
            ThreadPool pool(o->run.threads);
            auto stack = MakeLlm(o->net, llm.get(), o->run.threads, o->run.ctx, (*slm)->tokenizer(), o->run.sampling.seed);
            if (!stack.ok()) return ReportError(cmd, stack.status().message());
            LlmBackend* backend = (*stack)->backend();
            EvalOptions e;
            e.thresholds = *thresholds;
            e.small_only = e.large_only = !o->no_baselines;
            e.max_tokens = o->max_tokens;
            e.n_ctx = o->run.ctx;
            e.route_span = o->span;
            e.sampling = o->run.sampling;
            e.chat = o->chat;
            e.enable_thinking = o->think;
            e.price_ratio = o->price_ratio;
            DecodeOptions pipe_opts;
            TLR_CLI_CHECK(cmd, o->pipe.Apply(&pipe_opts));
            e.pipeline = pipe_opts.pipeline;
            e.sim_slm_s = pipe_opts.sim_slm_s;
            std::vector<std::vector<EvalAnswer>> answers;
            Progress progress;
            e.on_progress = [&](int64_t done, int64_t total) { progress.Update("eval", done, total); };
            auto result = RunEval(**slm, &*router, backend, *rows, e, &pool, o->answers.empty() ? nullptr : &answers);
            progress.Done();
            if ((*stack)->bridge()) std::fprintf(stderr, "%s\n", BridgeSummary((*stack)->bridge()->bridge_stats()).c_str());
            if (const RemoteLlm* r = (*stack)->remote()) {  // every row together
              const RemoteStats rs = r->stats();
              std::fprintf(stderr, "server: %lld calls (%lld failed, %lld cancelled), %lld HTTP requests, %lld resyncs, "
                           "simulated network %.1f s%s%s\n",
                           static_cast<long long>(rs.calls), static_cast<long long>(rs.failed_calls),
                           static_cast<long long>(rs.cancelled_calls), static_cast<long long>(rs.http_requests),
                           static_cast<long long>(rs.resyncs), rs.sim_delay_s, rs.failed_calls > 0 ? "; failed: " : "",
                           rs.FailureSummary().c_str());
            }
            if (!result.ok()) return ReportError(cmd, result.status().message());
            if (!o->answers.empty()) {
              std::string lines;
              for (size_t k = 0; k < result->size(); ++k) {
                const EvalRow& row = (*result)[k];
                for (const EvalAnswer& a : answers[k]) {
                  nlohmann::json src = nlohmann::json::array();
                  for (TokenSource t : a.sources) src.push_back(TokenSourceName(t));
                  nlohmann::json j = {{"mode", DecodeModeName(row.mode)},
                                      {"threshold", row.threshold ? nlohmann::json(*row.threshold) : nlohmann::json(nullptr)},
                                      {"id", a.id}, {"ids", a.ids}, {"sources", src}, {"correct", a.correct}};
                  lines += j.dump() + "\n";
                }
              }
              TLR_CLI_CHECK(cmd, WriteText(o->answers, lines));
            }
            std::printf("%s", o->full_table ? EvalMarkdown(*result).c_str() : EvalTerminalTable(*result).c_str());
            if (!o->full_table) {
              std::printf("Times are per question (means). LLM cost: the tokens it read and wrote (output x %g) against\n"
                          "the LLM alone. Every column: --full-table (results.md with --out).\n", o->price_ratio);
            }
            std::printf("Pipeline %s", o->pipe.pipeline.c_str());
            if (e.sim_slm_s > 0) {
              std::printf("; SLM pace SIMULATED: every SLM pass takes at least %g ms (--sim-slm-ms)", o->pipe.sim_slm_ms);
            }
            std::printf(".\n");
            if (!o->out.empty()) {
              nlohmann::json meta = {{"slm", o->slm}, {"llm", remote ? o->net.server : o->llm}, {"router", o->router},
                                     {"backend", remote ? o->net.backend : "in-process"}, {"sim_rtt_ms", o->net.sim_rtt_ms},
                                     {"sim_jitter_ms", o->net.sim_jitter_ms}, {"pipeline", o->pipe.pipeline},
                                     {"spec_depth", e.pipeline.depth}, {"spec_branches", e.pipeline.branches},
                                     {"lookahead", e.pipeline.lookahead}, {"llm_budget", o->pipe.llm_budget},
                                     {"sim_slm_ms", o->pipe.sim_slm_ms},
                                     {"data", o->data}, {"questions", rows->size()},
                                     {"max_tokens", o->max_tokens}, {"threads", o->run.threads},
                                     {"price_ratio", o->price_ratio},
                                     {"prompt", o->chat ? "chat" : "plain"},
                                     {"enable_thinking", o->think ? nlohmann::json(*o->think) : nlohmann::json()}};
              TLR_CLI_CHECK(cmd, WriteText(o->out + "/results.json", EvalJson(*result, meta.dump())));
              TLR_CLI_CHECK(cmd, WriteText(o->out + "/results.csv", EvalCsv(*result)));
              TLR_CLI_CHECK(cmd, WriteText(o->out + "/results.md", EvalMarkdown(*result)));
              std::string plots;
              if (auto charts = EvalCharts(*result); charts.ok()) {
                for (const auto& [name, svg] : *charts) {
                  TLR_CLI_CHECK(cmd, WriteText(o->out + "/" + name, svg));
                  plots += " " + name;
                }
              }
              std::fprintf(stderr, "wrote %s/results.json, results.csv, results.md%s\n", o->out.c_str(), plots.c_str());
            }
            return 0;
          }};
}

}  // namespace tlr::cli
