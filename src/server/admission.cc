// Admission: the pass-time model and the projection of finish times (see admission.h).
#include "server/admission.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tlr {

PassTimeModel::PassTimeModel(double head_units, double forget) : head_units_(head_units), forget_(forget) {}

void PassTimeModel::Observe(int64_t tokens, int64_t outputs, double seconds) {
  if (tokens <= 0 || !(seconds >= 0)) return;
  const double x = static_cast<double>(tokens) + head_units_ * static_cast<double>(outputs);
  w_ = forget_ * w_ + 1;
  sx_ = forget_ * sx_ + x;
  sy_ = forget_ * sy_ + seconds;
  sxx_ = forget_ * sxx_ + x * x;
  sxy_ = forget_ * sxy_ + x * seconds;
  ++n_;
}

// y = a + b x over the weighted passes; when their sizes hardly differ the line is not
// determined, and the mean time per unit (a = 0) is used instead.
double PassTimeModel::per_unit_s() const {
  if (n_ == 0 || sx_ <= 0) return 0;
  const double det = w_ * sxx_ - sx_ * sx_;
  const double mean_x = sx_ / w_;
  if (det > 1e-9 * w_ * w_ * std::max(1.0, mean_x * mean_x)) {
    const double b = (w_ * sxy_ - sx_ * sy_) / det;
    const double a = (sy_ - b * sx_) / w_;
    if (b > 0 && a >= 0) return b;
    if (b > 0 && sxx_ > 0) return sxy_ / sxx_;  // the line would start below 0: through the origin
  }
  return sy_ / sx_;
}

double PassTimeModel::fixed_s() const {
  if (n_ == 0 || sx_ <= 0) return 0;
  const double b = per_unit_s();
  return std::max(0.0, (sy_ - b * sx_) / w_);
}

double PassTimeModel::Predict(int64_t tokens, int64_t outputs) const {
  if (n_ == 0) return 0;
  return fixed_s() + per_unit_s() * (static_cast<double>(tokens) + head_units_ * static_cast<double>(outputs));
}

int64_t PassTimeModel::TokensWithin(double seconds, double outputs_per_token) const {
  const double b = per_unit_s();
  if (n_ == 0 || b <= 0) return std::numeric_limits<int64_t>::max() / 4;
  const double per_token = b * (1 + head_units_ * outputs_per_token);
  return std::max<int64_t>(1, static_cast<int64_t>((seconds - fixed_s()) / per_token));
}

bool ServedBefore(const AdmissionWork& a, const AdmissionWork& b) {
  if (a.warm != b.warm) return a.warm;
  if (a.deadline != b.deadline) return a.deadline < b.deadline;
  return a.seq < b.seq;
}

std::vector<double> ProjectFinish(const std::vector<AdmissionWork>& work, double now, double pass_left_s,
                                  const PassTimeModel& model, int64_t pass_tokens, std::vector<double>* starts) {
  std::vector<size_t> order(work.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ServedBefore(work[a], work[b]); });
  pass_tokens = std::max<int64_t>(1, pass_tokens);
  // A generation step shares its pass with the others' work: priced as a pass as full as the
  // queue can make it.
  int64_t all_tokens = 0, generating = 0;
  for (const AdmissionWork& w : work) {
    all_tokens += w.tokens;
    generating += w.steps > 0 ? 1 : 0;
  }
  const int64_t step_tokens = std::min(pass_tokens, std::max<int64_t>(1, all_tokens + generating));
  const double step_s = model.Predict(step_tokens, std::min(step_tokens, static_cast<int64_t>(work.size())));
  const double fixed = model.fixed_s(), unit = model.per_unit_s(), head = model.head_units();
  std::vector<double> finish(work.size(), now);
  if (starts) starts->assign(work.size(), now);
  const double start = now + std::max(0.0, pass_left_s);
  // When `tokens` tokens with `outputs` output rows are done, in full passes.
  const auto done_at = [&](int64_t tokens, int64_t outputs) {
    const int64_t passes = (tokens + pass_tokens - 1) / pass_tokens;
    return start + static_cast<double>(passes) * fixed + unit * (static_cast<double>(tokens) + head * static_cast<double>(outputs));
  };
  int64_t tokens = 0, outputs = 0;
  for (size_t i : order) {
    const AdmissionWork& w = work[i];
    if (starts) (*starts)[i] = done_at(tokens, outputs);
    tokens += w.tokens;
    outputs += w.tokens > 0 ? 1 : 0;
    const double prefilled = done_at(tokens, outputs);
    finish[i] = prefilled + static_cast<double>(w.steps) * step_s;
    // The calls behind also wait for this one's generation steps (one token and row per pass).
    tokens += w.steps;
    outputs += w.steps;
  }
  return finish;
}

namespace {

double Margin(const AdmissionWork& w, const AdmissionPolicy& p) { return p.margin_s + p.margin_share * w.budget_s; }

}  // namespace

AdmissionVerdict Admit(const std::vector<AdmissionWork>& admitted, const AdmissionWork& candidate, double now,
                       double pass_left_s, const PassTimeModel& model, const AdmissionPolicy& policy) {
  AdmissionVerdict v;
  if (!model.calibrated()) return v;
  std::vector<AdmissionWork> all = admitted;
  all.push_back(candidate);
  std::vector<double> starts;
  const std::vector<double> with = ProjectFinish(all, now, pass_left_s, model, policy.pass_tokens, &starts);
  const auto stretched = [&](double t) { return now + policy.safety * (t - now); };
  v.expected_s = policy.safety * (with.back() - now);
  const auto ms = [](double s) { return std::to_string(static_cast<int>(std::max(0.0, s) * 1e3)); };
  // The candidate itself: in time, and not waiting longer than its share.
  double late = 0;
  const double allowed = candidate.deadline - Margin(candidate, policy);
  if (stretched(with.back()) > allowed) {
    late = stretched(with.back()) - allowed;
    v.why = "it would be answered in about " + ms(v.expected_s) + " ms, past the " + ms(allowed - now) +
            " ms it can use";
  } else if (!candidate.warm && std::isfinite(candidate.deadline)) {
    // A cold call behind others must leave the rest of its time to warm calls; with nothing
    // admitted ahead of it (an idle server) it may use all of it.
    const double may = now + policy.cold_share * (candidate.deadline - now);
    const bool alone = starts.back() <= now + std::max(0.0, pass_left_s) + 1e-9;
    if (!alone && stretched(with.back()) > may) {
      late = stretched(with.back()) - may;
      v.why = "it would be answered in about " + ms(v.expected_s) + " ms, behind calls admitted before it; a new or "
              "resynced conversation may then use " + std::to_string(static_cast<int>(policy.cold_share * 100)) +
              "% of its time (" + ms(may - now) + " ms), the rest is for routed tokens of conversations in progress";
    }
  }
  // The admitted calls it would overtake must stay in time (those already late by the model's
  // drift are not its doing).
  const std::vector<double> without = ProjectFinish(admitted, now, pass_left_s, model, policy.pass_tokens);
  for (size_t i = 0; i < admitted.size(); ++i) {
    const AdmissionWork& w = admitted[i];
    if (!ServedBefore(candidate, w)) continue;
    const double limit = w.deadline - Margin(w, policy);
    if (stretched(with[i]) <= limit || stretched(without[i]) > limit) continue;
    if (v.why.empty()) v.why = "answering it now would make calls already admitted miss their deadlines";
    late = std::max(late, stretched(with[i]) - limit);
  }
  if (late > 0) {
    v.admit = false;
    // Nothing frees up before the pass in flight ends.
    v.retry_after_s = std::clamp(std::max(late, pass_left_s), 0.05, 60.0);
  }
  return v;
}

}  // namespace tlr
