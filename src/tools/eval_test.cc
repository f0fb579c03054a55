// The evaluation harness on two random models: row bookkeeping, determinism, the output
// formats' required keys.
#include "tools/eval.h"
#include "tools/plots.h"
#include "tools/calibrate.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "device/decode/decode_test_support.h"
#include "model/random_model.h"
#include "ops/thread_pool.h"
#include "util/temp_dir.h"

namespace tlr {
namespace {

TEST(Eval, RowsFormatsAndDeterminism) {
  TempDir dir;
  RandomModelOptions o;
  o.preset = "tiny";
  o.type = "f32";
  o.seed = 31;
  ASSERT_TRUE(WriteRandomModel(o, dir.File("slm.gguf")).ok());
  o.seed = 32;
  ASSERT_TRUE(WriteRandomModel(o, dir.File("llm.gguf")).ok());
  auto slm = Model::Load(dir.File("slm.gguf"));
  auto llm = Model::Load(dir.File("llm.gguf"));
  ASSERT_TRUE(slm.ok() && llm.ok());
  std::vector<QaRow> rows;
  for (int i = 0; i < 6; ++i) {
    auto r = ParseQaRow(R"({"id": "q)" + std::to_string(i) + R"(", "question": "Where is thing )" + std::to_string(i) +
                        R"(?", "choices": {"label": ["A", "B", "C"], "text": ["here", "there", "away"]}, "answerKey": "B"})");
    ASSERT_TRUE(r.ok());
    rows.push_back(*r);
  }
  ThreadPool pool(2);
  auto router = Router::Builtin(RouterKind::kEntropy);
  InProcessLlm backend(**llm, 1, 512);
  EvalOptions e;
  e.thresholds = {0.0f, 0.5f, 1.01f};
  e.max_tokens = 10;
  int64_t last = 0;
  e.on_progress = [&](int64_t done, int64_t total) {
    EXPECT_EQ(done, last + 1);
    EXPECT_EQ(total, 5 * 6);
    last = done;
  };
  std::vector<std::vector<EvalAnswer>> answers;
  auto res = RunEval(**slm, &*router, &backend, rows, e, &pool, &answers);
  ASSERT_TRUE(res.ok()) << res.status().message();
  ASSERT_EQ(res->size(), 5u);
  const EvalRow &small = (*res)[0], &large = (*res)[1], &never = (*res)[2], &always = (*res)[4];
  EXPECT_EQ(small.mode, DecodeMode::kSmallOnly);
  EXPECT_EQ(large.mode, DecodeMode::kLargeOnly);
  EXPECT_EQ(small.routed, 0);
  EXPECT_EQ(large.routed, large.generated);
  EXPECT_EQ(never.routed, 0);
  EXPECT_EQ(never.correct, small.correct);  // threshold 0 never routes: the SLM alone
  EXPECT_EQ(always.routed, always.generated);
  EXPECT_EQ(always.correct, large.correct);  // always routing: the LLM alone
  for (const EvalRow& r : *res) {
    EXPECT_EQ(r.n, 6);
    EXPECT_LE(r.correct, r.well_formed);
    EXPECT_GT(r.generated, 0);
  }
  ASSERT_EQ(answers.size(), 5u);
  EXPECT_EQ(answers[0].size(), 6u);
  // The LLM's work: none for the SLM alone; the LLM alone generates every token; the run that
  // always routes costs what the LLM alone costs (the same calls, blocking: no lookahead).
  EXPECT_EQ(small.llm_generated, 0);
  EXPECT_EQ(small.llm_prefilled, 0);
  EXPECT_EQ(large.llm_generated, large.generated);
  EXPECT_GE(large.llm_prefilled, large.prompt_tokens);
  EXPECT_EQ(never.llm_generated, 0);
  EXPECT_GE(always.llm_generated, always.routed);
  ASSERT_TRUE(CostVsLlmAlone(large, *res).has_value());
  EXPECT_DOUBLE_EQ(*CostVsLlmAlone(large, *res), 1.0);
  EXPECT_DOUBLE_EQ(*CostVsLlmAlone(never, *res), 0.0);
  EXPECT_GT(*CostVsLlmAlone(always, *res), 0.0);
  EXPECT_DOUBLE_EQ(large.llm_cost(), static_cast<double>(large.llm_prefilled) + 4.0 * large.llm_generated);

  // The same run again gives the same table (timings aside).
  e.on_progress = nullptr;
  auto again = RunEval(**slm, &*router, &backend, rows, e, &pool);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < res->size(); ++i) {
    EXPECT_EQ((*again)[i].correct, (*res)[i].correct);
    EXPECT_EQ((*again)[i].routed, (*res)[i].routed);
    EXPECT_EQ((*again)[i].generated, (*res)[i].generated);
  }

  const auto j = nlohmann::json::parse(EvalJson(*res, R"({"data": "x"})"));
  EXPECT_EQ(j["data"], "x");
  ASSERT_EQ(j["rows"].size(), 5u);
  for (const char* key : {"mode", "threshold", "policy", "n", "accuracy", "well_formed_pct", "generated_tokens",
                          "routed_tokens", "routed_pct", "ttft_s", "tbt_slm_s", "slm_time_s",
                          "comm_llm_time_s", "overall_s", "fallbacks", "llm_prefilled_tokens",
                          "llm_generated_tokens", "llm_generated_per_routed", "llm_forward_s", "price_ratio",
                          "llm_cost", "llm_cost_vs_llm_alone"}) {
    EXPECT_TRUE(j["rows"][0].contains(key)) << key;
  }
  EXPECT_TRUE(j["rows"][0]["threshold"].is_null());
  EXPECT_EQ(j["rows"][3]["threshold"], 0.5);
  EXPECT_EQ(j["rows"][1]["llm_cost_vs_llm_alone"], 1.0);  // the LLM alone
  EXPECT_EQ(j["rows"][0]["llm_generated_tokens"], 0);
  const std::string md = EvalMarkdown(*res);
  EXPECT_NE(md.find("| joint @ 0.50 | 6 |"), std::string::npos) << md;
  const std::string csv = EvalCsv(*res);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 6);

  // The charts: one SVG document each, a point per threshold, reference lines for baselines.
  auto charts = EvalCharts(*res);
  ASSERT_TRUE(charts.ok());
  ASSERT_EQ(charts->size(), 5u);  // with accuracy_vs_cost.svg: there is a large_only row
  for (const auto& [name, svg] : *charts) {
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << name;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << name;
    EXPECT_EQ(svg.find("nan"), std::string::npos) << name;
    size_t opens = 0, closes = 0;
    for (size_t p = svg.find('<'); p != std::string::npos; p = svg.find('<', p + 1)) {
      if (svg.compare(p, 2, "</") == 0) ++closes;
      else if (svg.compare(p, 2, "<?") != 0) {
        const size_t end = svg.find('>', p);
        if (svg[end - 1] != '/') ++opens;
      }
    }
    EXPECT_EQ(opens, closes) << name << ": unbalanced tags";
  }
  const std::string& acc = (*charts)[0].second;
  size_t circles = 0;
  for (size_t p = acc.find("<circle"); p != std::string::npos; p = acc.find("<circle", p + 1)) ++circles;
  EXPECT_EQ(circles, 3u);  // one per threshold
  EXPECT_NE(acc.find("SLM alone"), std::string::npos);
  EXPECT_NE(acc.find("LLM alone"), std::string::npos);

  // Cost policy rows come after the threshold rows, each answer's confidences and LLM work come
  // with it, and the cost chart has a line per policy.
  e.thresholds = {0.5f};
  e.cost_thresholds = {0.9f};
  std::vector<std::vector<EvalAnswer>> both_answers;
  auto both = RunEval(**slm, &*router, &backend, rows, e, &pool, &both_answers);
  ASSERT_TRUE(both.ok()) << both.status().message();
  ASSERT_EQ(both->size(), 4u);
  EXPECT_EQ((*both)[3].policy, RoutePolicy::kCost);
  EXPECT_NE(EvalTerminalTable(*both).find("cost @ 0.900"), std::string::npos);
  const auto jb = nlohmann::json::parse(EvalJson(*both, ""));
  EXPECT_EQ(jb["rows"][2]["policy"], "threshold");
  EXPECT_EQ(jb["rows"][3]["policy"], "cost");
  EXPECT_TRUE(jb["rows"][0]["policy"].is_null());
  int64_t prefilled = 0;
  for (const EvalAnswer& a : both_answers[2]) {
    EXPECT_EQ(a.confidences.size(), a.ids.size());
    prefilled += a.llm_prefilled;
  }
  EXPECT_EQ(prefilled, (*both)[2].llm_prefilled);
  auto both_charts = EvalCharts(*both);
  ASSERT_TRUE(both_charts.ok());
  const std::string& cost_chart = both_charts->back().second;
  EXPECT_EQ(both_charts->back().first, "accuracy_vs_cost.svg");
  EXPECT_NE(cost_chart.find("threshold policy"), std::string::npos);
  EXPECT_NE(cost_chart.find("cost policy"), std::string::npos);

  e.thresholds.clear();
  e.cost_thresholds.clear();
  e.small_only = e.large_only = false;
  EXPECT_FALSE(RunEval(**slm, &*router, &backend, rows, e, &pool).ok());

  // Calibration against an LLM that answers no call refuses to choose a threshold: its FALLBACK
  // tokens would count as the SLM's and the curve would show nothing routed.
  CalibrateOptions c;
  c.eval.max_tokens = 10;
  c.target_routed_pct = 8;
  DownLlm down((*slm)->tokenizer().Fingerprint());
  auto cal = CalibrateThreshold(**slm, &*router, &down, rows, c, &pool);
  ASSERT_FALSE(cal.ok());
  EXPECT_NE(cal.status().message().find("routed tokens got no answer from the LLM"), std::string::npos)
      << cal.status().message();
  EXPECT_GT(down.calls, 0);
  EXPECT_TRUE(CalibrateThreshold(**slm, &*router, &backend, rows, c, &pool).ok());
}

}  // namespace
}  // namespace tlr
