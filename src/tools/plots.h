// SVG charts of an evaluation (tools layer): self-contained SVG 1.1 files (no scripts, no
// external fonts or links), so they open offline in any browser.
//   accuracy_vs_threshold.svg, routed_vs_threshold.svg, latency_vs_threshold.svg (stacked
//   per-question SLM, router and communication + LLM time), accuracy_vs_routed.svg and
//   accuracy_vs_cost.svg (the LLM's cost against it alone; with a large_only row only): one line
//   per routing policy, the small_only and large_only accuracies as reference lines.
#pragma once

#include <string>
#include <vector>

#include "tools/eval.h"
#include "util/status.h"

namespace tlr {

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
  bool stacked_area = false;  // drawn as a filled band on top of the previous stacked series
};

struct ChartSpec {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  std::vector<std::pair<std::string, double>> hlines;  // labelled horizontal reference lines
};

// One chart as SVG text.
std::string RenderSvgChart(const ChartSpec& spec);

// The four evaluation charts; fails when there are no joint rows. Returns (file name, SVG).
Expected<std::vector<std::pair<std::string, std::string>>> EvalCharts(const std::vector<EvalRow>& rows);

}  // namespace tlr
