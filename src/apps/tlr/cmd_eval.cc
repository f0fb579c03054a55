// `tlr eval`: accuracy, routed share and latency of the collaborative decoder on a
// multiple-choice set, for the baselines and a list of thresholds (apps layer).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "apps/tlr/progress.h"
#include "device/remote/remote_llm.h"
#include "model/model.h"
#include "ops/thread_pool.h"
#include "tools/eval.h"
#include "tools/plots.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace {

Expected<std::vector<float>> ParseThresholds(const std::string& s, const std::string& flag) {
  std::vector<float> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    const float v = std::strtof(item.c_str(), &end);
    if (!end || *end != 0 || !(v >= 0.0f && v <= 1.0f)) {
      return Status::Error(flag + ": '" + item + "' is not a number in [0, 1]");
    }
    out.push_back(v);
  }
  return out;
}

Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace

namespace {

struct EvalOwn {
  std::string out, answers, thresholds = "0.4,0.5,0.6,0.7,0.72,0.76,0.8,0.9", cost_thresholds;
  bool no_baselines = false, full_table = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(EvalOwn, out, answers, thresholds, cost_thresholds, no_baselines, full_table)

}  // namespace

Command AddEvalCommand(CLI::App& root) {
  auto [app, o, p] = NewCommand<EvalOwn>(
      &root, "eval", "Accuracy, routed share and latency per threshold on a multiple-choice set (Table 1)");
  p->max_tokens = 100;
  p->limit = 100;
  Example(app->add_option("--thresholds", o->thresholds, "Comma-separated thresholds for joint rows")
              ->capture_default_str(),
          "0.5");
  Example(app->add_flag("--no-baselines", o->no_baselines, "Skip the small_only and large_only rows"), "");
  Example(app->add_flag("--full-table", o->full_table,
                        "Print every column (22, as Markdown) instead of the terminal's nine"),
          "");
  Example(app->add_option("--cost-thresholds", o->cost_thresholds,
                          "Comma-separated thresholds for joint rows under the cost policy (--policy cost in "
                          "generate; useful range 0.95-0.999), after the --thresholds rows"),
          "0.99");
  Example(app->add_option("--out", o->out,
                          "Directory for results.json, results.csv, results.md (the full table) and SVG plots "
                          "(accuracy and routed share vs threshold, stacked latency, accuracy vs routed share, "
                          "accuracy vs the LLM's cost)"),
          "results");
  Example(app->add_option("--answers", o->answers,
                          "Write every answer as JSONL: row (mode, threshold, policy), question id, prompt length, "
                          "token ids, their sources and the router's confidences (-1: not scored); pipeline on and off give the same "
                          "lines"),
          "a.jsonl");
  AddOptions(app, kCmdEval, p.get());
  app->footer("Examples:\n"
              "  tlr eval --limit 200 --out results/   # bundled demo pair, test split\n"
              "  tlr eval --server http://127.0.0.1:8080 --sim-rtt 170 --out results/   # LLM behind `tlr serve`\n"
              "  tlr eval --sim-rtt 170 --sim-slm-ms 20 --pipeline off --thresholds 0.8   # the blocking loop");
  return MakeCommand(app, p, o, [o = o, p = p](const std::string& cmd) -> int {
            auto thresholds = ParseThresholds(o->thresholds, "--thresholds");
            TLR_CLI_CHECK(cmd, thresholds.status());
            auto cost_thresholds = ParseThresholds(o->cost_thresholds, "--cost-thresholds");
            TLR_CLI_CHECK(cmd, cost_thresholds.status());
            auto rows = LoadQaJsonl(p->data);
            if (!rows.ok()) return ReportError(cmd, rows.status().message());
            if (p->limit > 0 && static_cast<size_t>(p->limit) < rows->size()) rows->resize(p->limit);
            TLR_CLI_CHECK(cmd, RequireGradable(*rows, p->data));
            auto pair = LoadPair(*p, PairNeeds{});
            if (!pair.ok()) return ReportError(cmd, pair.status().message());
            const bool remote = p->remote();
            if (!o->out.empty()) {
              std::error_code ec;
              std::filesystem::create_directories(o->out, ec);
              if (ec) return ReportError(cmd, "cannot create '" + o->out + "': " + ec.message());
            }
            ThreadPool pool(p->threads);
            auto stack = MakeLlmStack(*pair, p->ctx, pair->slm->tokenizer());
            if (!stack.ok()) return ReportError(cmd, stack.status().message());
            LlmBackend* backend = (*stack)->backend();
            EvalOptions e;
            e.thresholds = *thresholds;
            e.cost_thresholds = *cost_thresholds;
            e.cost_budget = p->cost_budget;
            e.small_only = e.large_only = !o->no_baselines;
            e.max_tokens = p->decode.max_tokens;
            e.n_ctx = p->ctx;
            e.route_span = p->decode.route_span;
            e.sampling = p->decode.sampling;
            e.chat = p->chat;
            e.enable_thinking = p->think;
            e.price_ratio = p->price_ratio;
            e.pipeline = p->decode.pipeline;
            e.sim_slm_s = p->decode.sim_slm_s;
            std::vector<std::vector<EvalAnswer>> answers;
            Progress progress;
            e.on_progress = [&](int64_t done, int64_t total) { progress.Update("eval", done, total); };
            auto result = RunEval(*pair->slm, pair->router.get(), backend, *rows, e, &pool, o->answers.empty() ? nullptr : &answers);
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
                                      {"policy", row.mode == DecodeMode::kJoint ? nlohmann::json(RoutePolicyName(row.policy))
                                                                                 : nlohmann::json(nullptr)},
                                      {"id", a.id}, {"ids", a.ids}, {"sources", src}, {"correct", a.correct},
                                      {"confidences", a.confidences}, {"prompt_tokens", a.prompt_tokens}};
                  lines += j.dump() + "\n";
                }
              }
              TLR_CLI_CHECK(cmd, WriteText(o->answers, lines));
            }
            std::printf("%s", o->full_table ? EvalMarkdown(*result).c_str() : EvalTerminalTable(*result).c_str());
            if (!o->full_table) {
              std::printf("Times are per question (means). LLM cost: the tokens it read and wrote (output x %g) against\n"
                          "the LLM alone. Every column: --full-table (results.md with --out).\n", p->price_ratio);
            }
            std::printf("Pipeline %s", p->pipeline.c_str());
            if (e.sim_slm_s > 0) {
              std::printf("; SLM pace SIMULATED: every SLM pass takes at least %g ms (--sim-slm-ms)", p->sim_slm_ms);
            }
            std::printf(".\n");
            if (!o->out.empty()) {
              nlohmann::json meta = {{"slm", p->slm}, {"llm", remote ? p->server.url : p->llm}, {"router", p->router},
                                     {"backend", remote ? p->server.backend : "in-process"}, {"sim_rtt_ms", p->server.sim_rtt_ms},
                                     {"sim_jitter_ms", p->server.sim_jitter_ms}, {"pipeline", p->pipeline},
                                     {"spec_depth", e.pipeline.depth}, {"spec_branches", e.pipeline.branches},
                                     {"lookahead", e.pipeline.lookahead}, {"llm_budget", p->llm_budget},
                                     {"sim_slm_ms", p->sim_slm_ms},
                                     {"data", p->data}, {"questions", rows->size()},
                                     {"max_tokens", p->decode.max_tokens}, {"threads", p->threads},
                                     {"price_ratio", p->price_ratio},
                                     {"prompt", p->chat ? "chat" : "plain"},
                                     {"enable_thinking", p->think ? nlohmann::json(*p->think) : nlohmann::json()}};
              TLR_CLI_CHECK(cmd, WriteText(o->out + "/results.json", EvalJson(*result, meta.dump())));
              TLR_CLI_CHECK(cmd, WriteText(o->out + "/results.csv", EvalCsv(*result)));
              TLR_CLI_CHECK(cmd, WriteText(o->out + "/results.md", EvalMarkdown(*result)));
              std::string plots;
              if (auto charts = EvalCharts(*result); charts.ok()) {
                for (const auto& [name, svg] : *charts) {
                  TLR_CLI_CHECK(cmd, WriteText(o->out + "/" + name, svg));
                  plots += ", " + name;
                }
              }
              std::fprintf(stderr, "wrote %s/results.json, results.csv, results.md%s\n", o->out.c_str(), plots.c_str());
            }
            return 0;
          });
}

}  // namespace tlr::cli
