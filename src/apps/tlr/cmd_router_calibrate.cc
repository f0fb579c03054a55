// `tlr router calibrate` (apps layer): the threshold that routes a chosen share of tokens (or
// reaches a chosen accuracy) on a question set, written into the router file as its
// recommended threshold (what generate, ui, chat and the C API use by default).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/tlr/commands.h"
#include "apps/tlr/model_args.h"
#include "apps/tlr/progress.h"
#include "model/model.h"
#include "ops/thread_pool.h"
#include "tools/calibrate.h"

namespace tlr::cli {

CLI::App* AddRouterCalibrate(CLI::App* router_app, RunFn* run) {
  struct Opts {
    std::string router, slm, llm, data, out;
    double target_routed = -1, target_accuracy = -1;
    int max_tokens = 40, limit = 0;
    bool chat = false;
    RunArgs run;
    LlmArgs net;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* app = router_app->add_subcommand(
      "calibrate", "Choose a router's threshold for a routed share (or an accuracy) and write it into the file");
  app->add_option("--router", o->router, "Router GGUF to calibrate (default: the bundled demo router)");
  app->add_option("--slm", o->slm, "The SLM it was trained for (default: the bundled demo SLM)");
  app->add_option("--llm", o->llm, "Large model GGUF in this process (default: the bundled demo LLM), or --server");
  app->add_option("--data", o->data, "Questions, CommonsenseQA JSONL (default: the bundled dev split, not the test "
                                     "split tlr eval reports on); use questions like the ones the router will see");
  auto* routed = app->add_option("--target-routed", o->target_routed,
                                 "Percent of generated tokens to route to the LLM, e.g. 7")
                     ->check(CLI::Range(0.01, 99.99));
  auto* acc = app->add_option("--target-accuracy", o->target_accuracy,
                              "Accuracy to reach (0..1, e.g. 0.8): the lowest threshold reaching it (fewest routed tokens)")
                  ->check(CLI::Range(0.001, 1.0));
  routed->excludes(acc);
  app->add_option("-o,--out", o->out, "Write the calibrated router here (required; name the --router file itself to "
                                      "rewrite it)");
  app->add_option("-n,--max-tokens", o->max_tokens, "Answer length per question")->default_val(40)
      ->check(CLI::Range(1, 4096));
  app->add_option("--limit", o->limit, "Use only the first N questions (0 = all)")->default_val(0)
      ->check(CLI::Range(0, 1 << 30));
  app->add_flag("--chat", o->chat, "Ask through the SLM's chat template (instruct models), as tlr eval --chat");
  AddThreadArgs(app, &o->run);
  AddSamplingArgs(app, &o->run);
  AddLlmServerArgs(app, &o->net);
  app->footer(
      "The threshold is the router's confidence below which a token goes to the LLM; calibration\n"
      "runs the questions jointly at thresholds it chooses (a coarse grid, then bisection) and\n"
      "prints the accuracy / routed-share curve. The chosen threshold becomes the file's\n"
      "recommended one. Example:\n"
      "  tlr router calibrate --router router.gguf --slm slm.gguf --server http://gpu-box:8080 \\\n"
      "      --data dev.jsonl --target-routed 7 -o router-7pct.gguf");
  *run = [o]() -> int {
    const char* cmd = "router calibrate";
    if (o->target_routed < 0 && o->target_accuracy < 0) {
      return ReportError(cmd, "give a target: --target-routed PERCENT or --target-accuracy FRACTION");
    }
    const bool remote = !o->net.server.empty();
    if (remote && !o->llm.empty()) return ReportError(cmd, "give either --llm or --server, not both");
    if (o->router.empty()) o->router = DemoFile("router.gguf");
    if (o->slm.empty()) o->slm = DemoFile("slm.gguf");
    if (o->llm.empty() && !remote) o->llm = DemoFile("llm.gguf");
    if (o->data.empty()) o->data = DemoFile("dev.jsonl");
    if (o->out.empty()) {
      return ReportError(cmd, "give -o FILE for the calibrated router (inputs are never rewritten unless -o names "
                              "them: -o " + o->router + " rewrites the router in place)");
    }
    for (const std::string* input : {&o->slm, &o->llm, &o->data}) {
      std::error_code ec;
      if (!input->empty() && std::filesystem::equivalent(*input, o->out, ec)) {
        return ReportError(cmd, "-o " + o->out + " is an input of this calibration (" + *input +
                                "), not a router: give another file");
      }
    }
    auto rows = LoadQaJsonl(o->data);
    if (!rows.ok()) return ReportError(cmd, "--data: " + rows.status().message());
    if (o->limit > 0 && static_cast<size_t>(o->limit) < rows->size()) rows->resize(o->limit);
    auto router = Router::Load(o->router);
    if (!router.ok()) return ReportError(cmd, router.status().message());
    auto slm = Model::Load(o->slm, ModelOptions(o->run.kv_type));
    if (!slm.ok()) return ReportError(cmd, "SLM: " + slm.status().message());
    TLR_CLI_CHECK(cmd, router->CheckCompatible(**slm));
    std::unique_ptr<Model> llm;
    if (!remote) {
      auto m = Model::Load(o->llm, ModelOptions(o->run.kv_type));
      if (!m.ok()) return ReportError(cmd, "LLM: " + m.status().message());
      llm = std::move(m).value();
    }
    ThreadPool pool(o->run.threads);
    auto stack = MakeLlm(o->net, llm.get(), o->run.threads, o->run.ctx, (*slm)->tokenizer(), o->run.sampling.seed);
    if (!stack.ok()) return ReportError(cmd, stack.status().message());
    CalibrateOptions c;
    c.eval.max_tokens = o->max_tokens;
    c.eval.n_ctx = o->run.ctx;
    c.eval.sampling = o->run.sampling;
    c.eval.chat = o->chat;
    if (o->target_routed > 0) c.target_routed_pct = o->target_routed;
    if (o->target_accuracy > 0) c.target_accuracy = o->target_accuracy;
    Progress progress;
    c.on_pass = [&](int done, int most) { progress.Update("calibrate", done, most); };
    if (c.target_routed_pct) {
      std::fprintf(stderr, "router calibrate: %zu questions, target %g%% of tokens routed\n", rows->size(), o->target_routed);
    } else {
      std::fprintf(stderr, "router calibrate: %zu questions, target accuracy %g\n", rows->size(), o->target_accuracy);
    }
    auto result = CalibrateThreshold(**slm, &*router, (*stack)->backend(), *rows, c, &pool);
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
    summary["calibration"] = {{"data", o->data},
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
  };
  return app;
}

}  // namespace tlr::cli
