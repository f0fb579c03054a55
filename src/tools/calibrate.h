// Threshold calibration (tools layer): the threshold that makes a router route a chosen share of
// the tokens (or reach a chosen accuracy) on a question set, measured by running the questions
// jointly (eval.h) at the thresholds it tries. The routed share grows with the threshold, so the
// search brackets the target on a coarse grid of thresholds and bisects inside the bracket;
// every threshold tried is reported (the accuracy / routed-share curve).
#pragma once

#include <optional>
#include <vector>

#include "tools/eval.h"

namespace tlr {

struct CalibrateOptions {
  EvalOptions eval;                        // thresholds and baselines are the calibration's own
  std::optional<double> target_routed_pct;  // e.g. 7: 7% of generated tokens from the LLM
  std::optional<double> target_accuracy;    // e.g. 0.8: the lowest threshold reaching it
  std::vector<float> grid = {0.05f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 0.95f};
  int bisect_steps = 6;                     // passes inside the bracket
  double tolerance_pct = 0.1;               // routed target: close enough (points)
  // Progress: passes done, passes at most.
  std::function<void(int, int)> on_pass;
};

struct CalibrationPoint {
  float threshold = 0;
  double routed_pct = 0, accuracy = 0;
  int64_t generated = 0, routed = 0;
};

struct CalibrationResult {
  float threshold = 0;          // the chosen one
  CalibrationPoint at;          // what it gave
  bool met = false;             // the target was reached (accuracy) or hit within tolerance (routed)
  std::vector<CalibrationPoint> curve;  // every threshold tried, ascending
};

// Exactly one of the targets must be set.
Expected<CalibrationResult> CalibrateThreshold(const Model& slm, Router* router, LlmBackend* llm,
                                               const std::vector<QaRow>& rows, const CalibrateOptions& opts,
                                               ThreadPool* pool);

}  // namespace tlr
