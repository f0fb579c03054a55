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
  if (tokens <= 4 && seconds > 0 && (fastest_step_ == 0 || seconds < fastest_step_)) fastest_step_ = seconds;
  Fit();
}

// y = a + b x over the weighted passes. When their sizes hardly differ (steady traffic) the line
// is not determined: the last slope that was (at first the calibration's) is kept and only the
// fixed part follows the times, so a machine dominated by its fixed cost is not priced as if
// every unit cost the mean.
void PassTimeModel::Fit() {
  const double mean_x = sx_ / w_, mean_y = sy_ / w_;
  const double det = w_ * sxx_ - sx_ * sx_;
  if (det > 1e-9 * w_ * w_ * std::max(1.0, mean_x * mean_x)) {
    const double b = (w_ * sxy_ - sx_ * sy_) / det;
    const double a = (sy_ - b * sx_) / w_;
    if (b > 0 && a >= 0) {
      fixed_ = a;
      unit_ = b;
      return;
    }
    if (b > 0 && sxx_ > 0) {  // the line would start below 0: through the origin
      fixed_ = 0;
      unit_ = sxy_ / sxx_;
      return;
    }
  }
  if (unit_ <= 0) unit_ = mean_x > 0 ? mean_y / mean_x : 0;
  fixed_ = std::max(0.0, mean_y - unit_ * mean_x);
}

double PassTimeModel::Predict(int64_t tokens, int64_t outputs) const {
  if (n_ == 0) return 0;
  return fixed_s() + per_unit_s() * (static_cast<double>(tokens) + head_units_ * static_cast<double>(outputs));
}

int64_t PassTimeModel::TokensWithin(double seconds, double outputs_per_token) const {
  constexpr double kMany = 1e15;
  const double b = per_unit_s();
  if (n_ == 0 || b <= 0) return static_cast<int64_t>(kMany);
  const double per_token = b * (1 + head_units_ * outputs_per_token);
  return static_cast<int64_t>(std::clamp((seconds - fixed_s()) / per_token, 1.0, kMany));
}

bool IsWarm(const AdmissionWork& w) { return w.warm && std::isfinite(w.deadline); }

bool ServedBefore(const AdmissionWork& a, const AdmissionWork& b) {
  if (IsWarm(a) != IsWarm(b)) return IsWarm(a);
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
    // A call whose deadline bounds its first token is answered when its prefill is done; its
    // generation still takes the passes of the calls behind.
    finish[i] = prefilled + (w.first_token_only ? 0.0 : static_cast<double>(w.steps) * step_s);
    // The calls behind also wait for this one's generation steps (one token and row per pass).
    tokens += w.steps;
    outputs += w.steps;
  }
  return finish;
}

namespace {

double Margin(const AdmissionWork& w, const AdmissionPolicy& p) {
  return p.margin_s + (std::isfinite(w.budget_s) ? p.margin_share * w.budget_s : 0.0);
}

}  // namespace

AdmissionVerdict Admit(const std::vector<AdmissionWork>& admitted, const AdmissionWork& candidate, double now,
                       double pass_left_s, const PassTimeModel& model, const AdmissionPolicy& policy,
                       int64_t pass_tokens_without) {
  AdmissionVerdict v;
  if (!model.calibrated()) return v;
  if (pass_tokens_without <= 0) pass_tokens_without = policy.pass_tokens;
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
  // More than its time even on an idle server. If its generation alone does not fit, waiting
  // cannot help (never). Else it is the prefill: behind a short queue, the call is admitted to
  // ingest what it can before its deadline (partial); what it ingested stays in the session, so
  // the device's next call goes on from there and some call of the conversation fits at last.
  const double alone = ProjectFinish({candidate}, now, 0, model, policy.pass_tokens).back();
  if (stretched(alone) > allowed) {
    AdmissionWork steps_only = candidate;
    steps_only.tokens = 1;
    const double least = ProjectFinish({steps_only}, now, 0, model, policy.pass_tokens).back();
    const double left = std::isfinite(candidate.deadline) ? candidate.deadline - now : 0;
    // The steps at the fastest pass of their size seen so far: if they fit, the projection (a
    // line fitted to other passes) is what says never, not the call.
    const int need = candidate.first_token_only ? 1 : std::max(1, candidate.steps);
    const bool fits_at_best =
        model.fastest_step_s() > 0 && now + policy.safety * model.fastest_step_s() * need <= allowed;
    if (stretched(least) > allowed && fits_at_best) {
      if (admitted.empty() && pass_left_s <= 0) {  // idle: run it, and measure
        v.expected_s = policy.safety * model.fastest_step_s() * need;
        return v;
      }
      v.admit = false;
      v.retry_after_s = std::clamp(pass_left_s, 0.05, 1.0);
      v.why = "the server projects " + ms(policy.safety * (least - now)) + " ms for it, more than the " + ms(allowed - now) +
              " ms its timeout leaves, though such steps took " + ms(policy.safety * model.fastest_step_s() * need) +
              " ms before: it is busy; it is run when idle";
      return v;
    }
    if (stretched(least) > allowed) {
      v.admit = false;
      v.never = true;
      v.why = "it needs about " + ms(policy.safety * (least - now)) + " ms of the server's time even when idle, more than the " +
              ms(allowed - now) + " ms its timeout leaves: give the call more time (the device's --llm-timeout)";
    } else if (policy.safety * (starts.back() - now) <= policy.quiet_share * left) {
      v.partial = true;
    } else {
      v.admit = false;
      v.retry_after_s = std::clamp(std::max(policy.safety * (starts.back() - now) - policy.quiet_share * left, pass_left_s), 0.05, 60.0);
      v.why = "its prefill takes longer than its time, and the server is busy: it is ingested in parts when the queue is short";
    }
    return v;
  }
  if (stretched(with.back()) > allowed) {
    late = stretched(with.back()) - allowed;
    v.why = "it would be answered in about " + ms(v.expected_s) + " ms, past the " + ms(allowed - now) +
            " ms it can use";
  } else if (!candidate.warm && std::isfinite(candidate.deadline)) {
    // Behind a queue, a cold call must leave the rest of its time to warm calls; behind a short
    // one (the server has room) it may use all of it, whatever its size.
    const double left = candidate.deadline - now;
    const double wait = policy.safety * (starts.back() - now);
    const double may = now + policy.cold_share * left;
    if (wait > policy.quiet_share * left && stretched(with.back()) > may) {
      late = stretched(with.back()) - may;
      v.why = "it would be answered in about " + ms(v.expected_s) + " ms, behind " + ms(wait) +
              " ms of calls admitted before it; a new or resynced conversation may then use " +
              std::to_string(static_cast<int>(policy.cold_share * 100)) + "% of its time (" + ms(may - now) +
              " ms): the server is busy with conversations in progress";
    }
  }
  // The admitted calls it would overtake must stay in time (those already late by the model's
  // drift are not its doing).
  const std::vector<double> without = ProjectFinish(admitted, now, pass_left_s, model, pass_tokens_without);
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

ConversationPacer::ConversationPacer(double share, double memory_s, double burst_s)
    : share_(std::clamp(share, 0.0, 1.0)), memory_s_(memory_s), burst_s_(burst_s) {}

void ConversationPacer::Refused(double now) { refused_at_ = std::max(refused_at_, now); }

bool ConversationPacer::paced(double now) const {
  return share_ < 1 && now - refused_at_ < memory_s_ && busy_since_ >= 0 && now - busy_since_ >= memory_s_;
}

double ConversationPacer::Credit(double now, double tokens_per_s) const {
  const double rate = share_ * std::max(0.0, tokens_per_s);
  const double cap = rate * burst_s_;
  if (!std::isfinite(credit_)) return cap;
  return std::min(cap, credit_ + rate * std::max(0.0, now - credit_at_));
}

double ConversationPacer::Wait(double now, double tokens_per_s) const {
  if (!paced(now)) return 0;
  const double rate = share_ * tokens_per_s;
  if (!(rate > 0)) return 60.0;  // none while paced
  const double credit = Credit(now, tokens_per_s);
  return credit >= 0 ? 0.0 : -credit / rate;
}

void ConversationPacer::Admitted(int64_t tokens, double now, double tokens_per_s) {
  if (!paced(now)) return;
  credit_ = Credit(now, tokens_per_s) - static_cast<double>(std::max<int64_t>(0, tokens));
  credit_at_ = now;
}

}  // namespace tlr
