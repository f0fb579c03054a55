// Threshold calibration (see calibrate.h).
#include "tools/calibrate.h"

#include <algorithm>
#include <cmath>

namespace tlr {

Expected<CalibrationResult> CalibrateThreshold(const Model& slm, Router* router, LlmBackend* llm,
                                               const std::vector<QaRow>& rows, const CalibrateOptions& opts,
                                               ThreadPool* pool) {
  if (opts.target_routed_pct.has_value() == opts.target_accuracy.has_value()) {
    return Status::Error("give one target: a routed share or an accuracy");
  }
  if (opts.target_routed_pct && !(*opts.target_routed_pct > 0 && *opts.target_routed_pct < 100)) {
    return Status::Error("the routed share must be in (0, 100) percent");
  }
  if (opts.target_accuracy && !(*opts.target_accuracy > 0 && *opts.target_accuracy <= 1)) {
    return Status::Error("the accuracy must be in (0, 1]");
  }
  if (opts.grid.empty()) return Status::Error("no thresholds to try");
  CalibrationResult out;
  // Past the grid's ends, when the target lies beyond them: toward 0 and toward 1.
  const std::vector<float> below = {0.02f, 0.01f, 0.003f, 0.001f}, above = {0.98f, 0.99f, 0.997f, 0.999f};
  const int most = static_cast<int>(opts.grid.size() + below.size()) + opts.bisect_steps;
  int passes = 0;
  auto measure = [&](const std::vector<float>& ts) -> Status {
    EvalOptions e = opts.eval;
    e.thresholds = ts;
    e.small_only = e.large_only = false;
    TLR_ASSIGN_OR_RETURN(auto evrows, RunEval(slm, router, llm, rows, e, pool));
    for (const EvalRow& r : evrows) {
      if (!r.threshold) continue;
      // A FALLBACK is a token the router sent that the LLM never answered: counted as the SLM's,
      // it would move the curve (and the threshold chosen) by the server's failures.
      if (r.fallbacks > 0) {
        return Status::Error("at threshold " + std::to_string(*r.threshold) + ", " + std::to_string(r.fallbacks) +
                             " routed tokens got no answer from the LLM (FALLBACK: the server failed or was too "
                             "slow; raise --llm-timeout): calibrate against an LLM that answers every call");
      }
      out.curve.push_back({*r.threshold, r.routed_pct(), r.accuracy(), r.generated, r.routed});
      if (opts.on_pass) opts.on_pass(++passes, most);
    }
    std::sort(out.curve.begin(), out.curve.end(),
              [](const CalibrationPoint& a, const CalibrationPoint& b) { return a.threshold < b.threshold; });
    return Status::Ok();
  };
  // How far a point is from the target (negative: below it).
  auto gap = [&](const CalibrationPoint& p) {
    return opts.target_routed_pct ? p.routed_pct - *opts.target_routed_pct : p.accuracy - *opts.target_accuracy;
  };
  std::vector<float> grid = opts.grid;
  std::sort(grid.begin(), grid.end());
  TLR_RETURN_IF_ERROR(measure(grid));
  for (size_t nb = 0, na = 0;;) {  // one threshold at a time until the target is bracketed
    size_t h = 0;
    while (h < out.curve.size() && gap(out.curve[h]) < 0) ++h;
    if (h == 0 && opts.target_routed_pct && std::fabs(gap(out.curve.front())) <= opts.tolerance_pct) break;
    float next = -1;
    if (h == 0) {
      while (nb < below.size() && below[nb] >= out.curve.front().threshold) ++nb;
      if (nb < below.size()) next = below[nb++];
    } else if (h == out.curve.size()) {
      while (na < above.size() && above[na] <= out.curve.back().threshold) ++na;
      if (na < above.size()) next = above[na++];
    }
    if (next < 0) break;
    TLR_RETURN_IF_ERROR(measure({next}));
  }
  // The bracket: the first threshold at or above the target and the one before it.
  for (int step = 0; step < opts.bisect_steps; ++step) {
    size_t h = 0;
    while (h < out.curve.size() && gap(out.curve[h]) < 0) ++h;
    if (h == 0 || h == out.curve.size()) break;  // the target is outside the thresholds' range
    const CalibrationPoint& lo = out.curve[h - 1];
    const CalibrationPoint& hi = out.curve[h];
    if (hi.threshold - lo.threshold < 1e-4f) break;
    if (opts.target_routed_pct && std::min(std::fabs(gap(lo)), std::fabs(gap(hi))) <= opts.tolerance_pct) break;
    TLR_RETURN_IF_ERROR(measure({0.5f * (lo.threshold + hi.threshold)}));
  }
  // The choice: the point nearest the routed target; for accuracy, the lowest threshold that
  // reaches it (the fewest routed tokens), else the most accurate.
  const CalibrationPoint* best = &out.curve.front();
  if (opts.target_routed_pct) {
    for (const CalibrationPoint& p : out.curve) {
      if (std::fabs(gap(p)) < std::fabs(gap(*best))) best = &p;
    }
  } else {
    const CalibrationPoint* reach = nullptr;
    for (const CalibrationPoint& p : out.curve) {
      if (!reach && gap(p) >= 0) reach = &p;
      if (p.accuracy > best->accuracy) best = &p;
    }
    if (reach) best = reach;
  }
  out.threshold = best->threshold;
  out.at = *best;
  out.met = opts.target_routed_pct ? std::fabs(gap(*best)) <= std::max(opts.tolerance_pct, 0.5) : gap(*best) >= 0;
  return out;
}

}  // namespace tlr
