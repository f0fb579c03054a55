// `tlr router calibrate` (apps layer): the threshold that routes a chosen share of tokens (or
// reaches a chosen accuracy) on a question set, written into the router file as its
// recommended threshold (what generate, ui, chat and the C API use by default).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "apps/tlr/progress.h"
#include "model/model.h"
#include "ops/thread_pool.h"
#include "tools/calibrate.h"

namespace tlr::cli {

namespace {

struct CalibrateOwn {
  std::string out;
  double target_routed = -1, target_accuracy = -1;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(CalibrateOwn, out, target_routed, target_accuracy)

}  // namespace

Command AddRouterCalibrate(CLI::App* router_app) {
  auto [app, o, p] = NewCommand<CalibrateOwn>(
      router_app, "calibrate",
      "Choose a router's threshold for a routed share (or an accuracy) and write it into the file");
  p->max_tokens = 40;
  auto* routed = Example(app->add_option("--target-routed", o->target_routed,
                                         "Percent of generated tokens to route to the LLM, e.g. 7")
                             ->check(CLI::Range(0.01, 99.99)),
                         "5");
  auto* acc = Example(app->add_option("--target-accuracy", o->target_accuracy,
                                      "Accuracy to reach (0..1, e.g. 0.8): the lowest threshold reaching it (fewest "
                                      "routed tokens)")
                          ->check(CLI::Range(0.001, 1.0)),
                      "0.8");
  routed->excludes(acc);
  Example(app->add_option("-o,--out", o->out, "Write the calibrated router here (required; name the --router file "
                                              "itself to rewrite it)"),
          "r2.gguf");
  AddOptions(app, kCmdRouterCalibrate, p.get());
  app->footer(
      "The threshold is the router's confidence below which a token goes to the LLM; calibration\n"
      "runs the questions jointly at thresholds it chooses (a grid from 0.05 to 0.95, down to\n"
      "0.001 or up to 0.999 when the target lies beyond it, then bisection) and prints the\n"
      "accuracy / routed-share curve. The chosen threshold becomes the file's\n"
      "recommended one. Example:\n"
      "  tlr router calibrate --router router.gguf --slm slm.gguf --server http://gpu-box:8080 \\\n"
      "      --data dev.jsonl --target-routed 7 -o router-7pct.gguf");
  return MakeCommand(app, p, o, [o = o, p = p](const std::string& cmd) -> int {
    if (o->target_routed < 0 && o->target_accuracy < 0) {
      return ReportError(cmd, "give a target: --target-routed PERCENT or --target-accuracy FRACTION");
    }
    if (o->out.empty()) {
      return ReportError(cmd, "give -o FILE for the calibrated router (inputs are never rewritten unless -o names "
                              "them: -o " + p->router + " rewrites the router in place)");
    }
    auto rows = LoadQaJsonl(p->data);
    if (!rows.ok()) return ReportError(cmd, "--data: " + rows.status().message());
    if (p->limit > 0 && static_cast<size_t>(p->limit) < rows->size()) rows->resize(p->limit);
    // A target accuracy needs each question's answer (a target routed share only counts tokens).
    if (o->target_accuracy > 0) {
      if (Status g = RequireGradable(*rows, p->data); !g.ok()) return ReportError(cmd, "--data: " + g.message());
    }
    PairNeeds needs;
    needs.router_file = true;
    auto pair = LoadPair(*p, needs);
    if (!pair.ok()) return ReportError(cmd, pair.status().message());
    Router* router = pair->router.get();
    ThreadPool pool(p->threads);
    auto stack = MakeLlmStack(*pair, p->ctx, pair->slm->tokenizer());
    if (!stack.ok()) return ReportError(cmd, stack.status().message());
    CalibrateOptions c;
    c.eval.max_tokens = p->decode.max_tokens;
    c.eval.n_ctx = p->ctx;
    c.eval.sampling = p->decode.sampling;
    c.eval.chat = p->chat;
    if (o->target_routed > 0) c.target_routed_pct = o->target_routed;
    if (o->target_accuracy > 0) c.target_accuracy = o->target_accuracy;
    Progress progress;
    int passes = 0;  // the bisection may stop before its bound: the last line says it ended
    c.on_pass = [&](int done, int most) {
      passes = done;
      progress.Update("calibrate", done, most);
    };
    if (c.target_routed_pct) {
      std::fprintf(stderr, "router calibrate: %zu questions, target %g%% of tokens routed\n", rows->size(), o->target_routed);
    } else {
      std::fprintf(stderr, "router calibrate: %zu questions, target accuracy %g\n", rows->size(), o->target_accuracy);
    }
    auto result = CalibrateThreshold(*pair->slm, router, (*stack)->backend(), *rows, c, &pool);
    if (result.ok() && passes > 0) progress.Update("calibrate", passes, passes);
    progress.Done();
    if (!result.ok()) return ReportError(cmd, result.status().message());
    std::printf("| threshold | routed %% | accuracy |\n|---:|---:|---:|\n");
    for (const CalibrationPoint& p : result->curve) {
      std::printf("| %.4f | %.2f | %.4f |%s\n", p.threshold, p.routed_pct, p.accuracy,
                  p.threshold == result->threshold ? " <- chosen" : "");
    }
    // The file keeps its training summary, with the calibration added to it.
    nlohmann::json summary = nlohmann::json::parse(router->info().training_summary, nullptr, false);
    if (!summary.is_object()) summary = nlohmann::json::object();
    summary["calibration"] = {{"data", p->data},
                              {"questions", rows->size()},
                              {"target", c.target_routed_pct ? nlohmann::json{{"routed_pct", o->target_routed}}
                                                             : nlohmann::json{{"accuracy", o->target_accuracy}}},
                              {"threshold", result->threshold},
                              {"routed_pct", result->at.routed_pct},
                              {"accuracy", result->at.accuracy},
                              {"previous_threshold", router->info().threshold}};
    router->mutable_info().threshold = result->threshold;
    router->mutable_info().training_summary = summary.dump();
    TLR_CLI_CHECK(cmd, router->Save(o->out));
    std::fprintf(stderr, "threshold %.4f: %.2f%% of tokens routed, accuracy %.4f on %zu questions%s; written to %s\n",
                 result->threshold, result->at.routed_pct, result->at.accuracy, rows->size(),
                 result->met ? "" : " (the target was not reached: the nearest threshold tried)", o->out.c_str());
    return 0;
  });
}

}  // namespace tlr::cli
