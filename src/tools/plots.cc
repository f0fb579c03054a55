// Minimal SVG line/area charts (see plots.h).
#include "tools/plots.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tlr {

namespace {

constexpr double kW = 640, kH = 400, kLeft = 70, kRight = 160, kTop = 40, kBottom = 55;

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string Num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string Tick(double v) {
  char b[32];
  if (std::fabs(v) >= 100 || v == std::floor(v)) std::snprintf(b, sizeof b, "%.0f", v);
  else if (std::fabs(v) >= 1) std::snprintf(b, sizeof b, "%.1f", v);
  else std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// A "nice" step for about n ticks over [lo, hi].
double NiceStep(double lo, double hi, int n) {
  const double raw = (hi - lo) / n;
  if (raw <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string RenderSvgChart(const ChartSpec& spec) {
  double x0 = 1e300, x1 = -1e300, y0 = 0, y1 = -1e300;
  std::vector<std::vector<std::pair<double, double>>> tops;  // stacked series, cumulative
  std::vector<std::pair<double, double>> base;
  for (const Series& s : spec.series) {
    std::vector<std::pair<double, double>> pts = s.points;
    if (s.stacked_area) {
      for (size_t i = 0; i < pts.size(); ++i) pts[i].second += i < base.size() ? base[i].second : 0;
      base = pts;
    }
    tops.push_back(pts);
    for (auto [x, y] : pts) {
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y1 = std::max(y1, y);
      y0 = std::min(y0, y);
    }
  }
  for (auto& [label, y] : spec.hlines) y1 = std::max(y1, y), y0 = std::min(y0, y);
  if (x0 > x1) x0 = 0, x1 = 1;
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  if (y1 <= y0) y1 = y0 + 1;
  const double ystep = NiceStep(y0, y1, 5);
  y1 = std::ceil(y1 / ystep) * ystep;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return kTop + ph - (y - y0) / (y1 - y0) * ph; };
  std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(kW) + "\" height=\"" + Num(kH) +
       "\" viewBox=\"0 0 " + Num(kW) + " " + Num(kH) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<title>" + Escape(spec.title) + "</title>\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + Num(kW / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" + Escape(spec.title) + "</text>\n";
  // Axes, grid and ticks.
  for (double y = y0; y <= y1 + 1e-9; y += ystep) {
    o += "<line x1=\"" + Num(kLeft) + "\" y1=\"" + Num(Y(y)) + "\" x2=\"" + Num(kLeft + pw) + "\" y2=\"" +
         Num(Y(y)) + "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + Num(kLeft - 6) + "\" y=\"" + Num(Y(y) + 4) + "\" text-anchor=\"end\">" + Tick(y) + "</text>\n";
  }
  const double xstep = NiceStep(x0, x1, 6);
  for (double x = std::ceil(x0 / xstep) * xstep; x <= x1 + 1e-9; x += xstep) {
    o += "<line x1=\"" + Num(X(x)) + "\" y1=\"" + Num(kTop + ph) + "\" x2=\"" + Num(X(x)) + "\" y2=\"" +
         Num(kTop + ph + 5) + "\" stroke=\"black\"/>\n";
    o += "<text x=\"" + Num(X(x)) + "\" y=\"" + Num(kTop + ph + 18) + "\" text-anchor=\"middle\">" + Tick(x) + "</text>\n";
  }
  o += "<rect x=\"" + Num(kLeft) + "\" y=\"" + Num(kTop) + "\" width=\"" + Num(pw) + "\" height=\"" + Num(ph) +
       "\" fill=\"none\" stroke=\"black\"/>\n";
  o += "<text x=\"" + Num(kLeft + pw / 2) + "\" y=\"" + Num(kH - 12) + "\" text-anchor=\"middle\">" +
       Escape(spec.x_label) + "</text>\n";
  o += "<text transform=\"translate(18 " + Num(kTop + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       Escape(spec.y_label) + "</text>\n";
  // Series (areas first, bottom to top, then lines).
  std::vector<std::pair<double, double>> below;
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const Series& s = spec.series[i];
    if (!s.stacked_area || tops[i].empty()) continue;
    std::string pts;
    for (auto [x, y] : tops[i]) pts += Num(X(x)) + "," + Num(Y(y)) + " ";
    for (size_t k = tops[i].size(); k-- > 0;) {
      const double yb = k < below.size() ? below[k].second : y0;
      pts += Num(X(tops[i][k].first)) + "," + Num(Y(yb)) + " ";
    }
    o += "<polygon points=\"" + pts + "\" fill=\"" + s.color + "\" fill-opacity=\"0.6\" stroke=\"" + s.color + "\"/>\n";
    below = tops[i];
  }
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const Series& s = spec.series[i];
    if (s.stacked_area || tops[i].empty()) continue;
    std::string pts;
    for (auto [x, y] : tops[i]) pts += Num(X(x)) + "," + Num(Y(y)) + " ";
    o += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"2\"/>\n";
    for (auto [x, y] : tops[i]) {
      o += "<circle cx=\"" + Num(X(x)) + "\" cy=\"" + Num(Y(y)) + "\" r=\"3\" fill=\"" + s.color + "\"/>\n";
    }
  }
  for (auto& [label, y] : spec.hlines) {
    o += "<line x1=\"" + Num(kLeft) + "\" y1=\"" + Num(Y(y)) + "\" x2=\"" + Num(kLeft + pw) + "\" y2=\"" + Num(Y(y)) +
         "\" stroke=\"#555\" stroke-dasharray=\"6 4\"/>\n";
    o += "<text x=\"" + Num(kLeft + pw + 6) + "\" y=\"" + Num(Y(y) + 4) + "\">" + Escape(label) + "</text>\n";
  }
  // Legend.
  double ly = kTop + 10;
  for (const Series& s : spec.series) {
    o += "<rect x=\"" + Num(kLeft + pw + 8) + "\" y=\"" + Num(ly + 40) + "\" width=\"12\" height=\"12\" fill=\"" +
         s.color + "\"/>\n";
    o += "<text x=\"" + Num(kLeft + pw + 26) + "\" y=\"" + Num(ly + 50) + "\">" + Escape(s.name) + "</text>\n";
    ly += 18;
  }
  o += "</svg>\n";
  return o;
}

Expected<std::vector<std::pair<std::string, std::string>>> EvalCharts(const std::vector<EvalRow>& rows) {
  std::vector<const EvalRow*> joint, by_policy[2];
  const EvalRow *small = nullptr, *large = nullptr;
  for (const EvalRow& r : rows) {
    if (r.mode == DecodeMode::kJoint) by_policy[r.policy == RoutePolicy::kCost].push_back(&r);
    if (r.mode == DecodeMode::kSmallOnly) small = &r;
    if (r.mode == DecodeMode::kLargeOnly) large = &r;
  }
  auto by_threshold = [](const EvalRow* a, const EvalRow* b) { return *a->threshold < *b->threshold; };
  for (auto& v : by_policy) std::sort(v.begin(), v.end(), by_threshold);
  // The charts against the threshold: the threshold policy's rows (the cost policy's when alone).
  joint = by_policy[0].empty() ? by_policy[1] : by_policy[0];
  if (joint.empty()) return Status::Error("no joint rows to plot");
  std::vector<std::pair<std::string, double>> refs;
  if (small) refs.push_back({"SLM alone", 100 * small->accuracy()});
  if (large) refs.push_back({"LLM alone", 100 * large->accuracy()});
  std::vector<std::pair<std::string, std::string>> out;
  ChartSpec acc{"Accuracy vs threshold", "threshold", "accuracy (%)", {{"joint", "#c62828", {}}}, refs};
  ChartSpec routed{"Routed tokens vs threshold", "threshold", "routed tokens (% of generated)", {{"joint", "#1565c0", {}}}, {}};
  ChartSpec lat{"Time per question vs threshold", "threshold", "seconds per question",
                {{"SLM", "#2e7d32", {}, true}, {"router", "#f9a825", {}, true}, {"comm + LLM", "#c62828", {}, true}}, {}};
  for (const EvalRow* r : joint) {
    const double t = *r->threshold;
    acc.series[0].points.push_back({t, 100 * r->accuracy()});
    routed.series[0].points.push_back({t, r->routed_pct()});
    lat.series[0].points.push_back({t, r->mean(r->slm_s)});
    lat.series[1].points.push_back({t, r->mean(r->router_s)});
    lat.series[2].points.push_back({t, r->mean(r->llm_s)});
  }
  // Accuracy against routed share and against the LLM's cost: one line per policy.
  ChartSpec tradeoff{"Accuracy vs routed tokens", "routed tokens (% of generated)", "accuracy (%)", {}, refs};
  ChartSpec cost{"Accuracy vs the LLM's cost", "LLM cost (% of the LLM alone's: read + R x written)", "accuracy (%)",
                 {}, refs};
  const char* const kNames[2] = {"threshold policy", "cost policy"};
  const char* const kColors[2] = {"#6a1b9a", "#ef6c00"};
  for (int k = 0; k < 2; ++k) {
    if (by_policy[k].empty()) continue;
    Series t{kNames[k], kColors[k], {}}, c{kNames[k], kColors[k], {}};
    for (const EvalRow* r : by_policy[k]) {
      t.points.push_back({r->routed_pct(), 100 * r->accuracy()});
      if (auto v = CostVsLlmAlone(*r, rows)) c.points.push_back({100 * *v, 100 * r->accuracy()});
    }
    std::sort(t.points.begin(), t.points.end());
    std::sort(c.points.begin(), c.points.end());
    tradeoff.series.push_back(std::move(t));
    if (!c.points.empty()) cost.series.push_back(std::move(c));
  }
  out.push_back({"accuracy_vs_threshold.svg", RenderSvgChart(acc)});
  out.push_back({"routed_vs_threshold.svg", RenderSvgChart(routed)});
  out.push_back({"latency_vs_threshold.svg", RenderSvgChart(lat)});
  out.push_back({"accuracy_vs_routed.svg", RenderSvgChart(tradeoff)});
  // Only with the LLM alone's row to price against.
  if (!cost.series.empty()) out.push_back({"accuracy_vs_cost.svg", RenderSvgChart(cost)});
  return out;
}

}  // namespace tlr
