// Admission (server layer, part of the batch scheduler): whether a call can be answered before
// its deadline, decided at once when it arrives, from the scheduler's measured speed and the
// work it has already admitted. A call that cannot is refused (429 with Retry-After) instead of
// queued: queued, it would wait behind older calls until its device stopped waiting, and an
// overloaded server would spend its passes on answers nobody reads (congestion collapse).
//
// The model: a forward pass takes fixed + per_unit x (tokens + head_units x output rows)
// seconds (PassTimeModel, fitted to every pass as it runs; output rows cost the LM head). Calls
// are served in ServedBefore order: warm calls (a routed token on a session that holds its
// context: a few new tokens) before cold ones (a new or resynced conversation's prefill), then
// by deadline. A call's start and finish are projected by walking that order with the tokens of
// every call ahead of it, in passes of at most pass_tokens. A candidate is admitted when
//   - its own projected finish and that of every admitted call it would overtake stay within
//     their deadlines (less a margin for the reply's way back, with a safety factor on the
//     projection): whatever is admitted is answered in time as long as the model holds;
//   - a cold call behind a queue (more than quiet_share of its time to wait) is answered within
//     cold_share of its time: the rest is left to warm calls that arrive later and go first, so
//     under overload warm sessions' routed tokens keep being served. Behind a short queue (the
//     server has room) a cold call may use all its time, whatever its size: a conversation
//     refused while it grows (its device goes on with the SLM) is not locked out of a server
//     whose passes are half empty. (Measured, on 64-128 devices calling back to back: a bound on
//     the finish alone starved growing conversations while passes held one or two sequences; a
//     bound on the wait alone let large prefills crowd out routed tokens; a bound on warm calls'
//     wait cost goodput, as refused devices left passes less full.)
//
// Pure functions of their arguments (times are seconds on the scheduler's clock): the unit
// tests drive them with a fake clock.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tlr {

// Seconds per forward pass, fitted online by least squares with exponential forgetting (recent
// passes weigh more: the machine's load changes).
class PassTimeModel {
 public:
  // head_units: what one output row (the LM head over the vocabulary) costs in tokens' work.
  explicit PassTimeModel(double head_units = 0, double forget = 0.97);
  void Observe(int64_t tokens, int64_t outputs, double seconds);
  // Predicted seconds of a pass (0 until a pass was observed).
  double Predict(int64_t tokens, int64_t outputs) const;
  // Tokens (each sequence's last one with an output row) that fit within `seconds`; at least 1.
  int64_t TokensWithin(double seconds, double outputs_per_token) const;
  bool calibrated() const { return n_ > 0; }
  // The fastest pass of a few tokens (a generation step) seen so far, or 0: what a step has been
  // shown to cost, whatever the fitted line now says (fitted to big passes under load, its
  // fixed part can grow tenfold and more, and calls refused as never run no pass to correct it).
  double fastest_step_s() const { return fastest_step_; }
  double fixed_s() const { return fixed_; }
  double per_unit_s() const { return unit_; }
  double head_units() const { return head_units_; }

 private:
  void Fit();
  double head_units_, forget_;
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  double fixed_ = 0, unit_ = 0;
  double fastest_step_ = 0;
  int64_t n_ = 0;
};

// One call as admission sees it.
struct AdmissionWork {
  double deadline = std::numeric_limits<double>::infinity();  // absolute; inf: none
  double budget_s = 0;   // the time the call was given (timeout), for the margin; 0: none
  bool warm = true;
  int64_t tokens = 0;    // prefill tokens still to ingest
  int steps = 0;         // generation passes still due after the prefill (low priority excluded)
  bool first_token_only = false;  // the deadline bounds the first token (streaming)
  uint64_t seq = 0;      // arrival order
};

// Warm before cold, then earlier deadline, then arrival. A call without a deadline (offline work:
// router labels) counts as cold, whatever its size.
bool ServedBefore(const AdmissionWork& a, const AdmissionWork& b);

struct AdmissionPolicy {
  int64_t pass_tokens = 512;  // tokens per pass (the scheduler's budget)
  double cold_share = 0.5;    // a cold call behind a queue is answered within this share of its time
  double quiet_share = 0.1;   // a queue shorter than this share of a call's time is no queue
  double margin_s = 0.02;     // kept free before every deadline (the reply's way back) ...
  double margin_share = 0.05; // ... plus this share of the call's budget
  double safety = 1.2;        // projected durations are stretched by this
  int64_t warm_tokens = 32;   // a call feeding at most this many tokens is warm
  double new_share = 0.1;     // while the busy server refuses calls, new conversations get at most
                              // this share of its token rate (ConversationPacer)
};

struct AdmissionVerdict {
  bool admit = true;
  double expected_s = 0;     // projected time until the candidate is answered
  double retry_after_s = 0;  // refused: when a call like it may fit again
  bool never = false;        // refused: it would not fit its deadline even on an idle server (its
                             // generation alone does not, neither projected nor at the fastest
                             // steps seen; fitting only at those, it is refused (busy) or admitted
                             // (idle) instead, and its passes correct the projection)
  bool partial = false;      // admitted to ingest what it can of its prefill before its deadline
  std::string why;           // refused: in words
};

// Decides on `candidate` against the calls already admitted (in any order), at time `now`, with
// the pass in flight expected to end in `pass_left_s`. `pass_tokens_without`: the pass size the
// admitted calls would get without the candidate (its deadline may shrink passes; 0: the same).
// Without a calibrated model every call is admitted.
AdmissionVerdict Admit(const std::vector<AdmissionWork>& admitted, const AdmissionWork& candidate, double now,
                       double pass_left_s, const PassTimeModel& model, const AdmissionPolicy& policy,
                       int64_t pass_tokens_without = 0);

// New conversations under overload. While the server is busy without a gap and refusing calls,
// every new or resynced conversation it admits takes its prefill (a 64-token prompt is the work
// of ~7 routed calls) from the routed tokens of conversations in progress, which then make
// fewer calls per second or are refused. In that state (busy for memory_s, and a call refused
// within memory_s, not counting the pacer's own refusals) new conversations draw on a token
// bucket filled at `share` of the server's token rate (at most `burst_s` of it saved): they
// still get in, at a bounded pace, and the rest of the server's time goes to conversations in
// progress. As soon as the worker finds nothing to do, or a second passes without a refusal,
// they are admitted as any call. (Measured, 30 s at 64-128 devices calling back to back:
// without it 50-74 conversations started and took 30-48% of the prefill tokens;
// docs/performance.md, Overload.)
class ConversationPacer {
 public:
  explicit ConversationPacer(double share = 0.1, double memory_s = 1.0, double burst_s = 1.0);
  // A call was refused at `now` (not by the pacer: its own refusals do not keep it on).
  void Refused(double now);
  // The worker found nothing to do; it has work at `now` (busy since then unless it already was).
  void Idle() { busy_since_ = -1; }
  void Working(double now) {
    if (busy_since_ < 0) busy_since_ = now;
  }
  bool paced(double now) const;
  // Seconds until a new conversation may be admitted (0: now), the server ingesting
  // `tokens_per_s` at full load.
  double Wait(double now, double tokens_per_s) const;
  // A new conversation of `tokens` was admitted (charged only while paced).
  void Admitted(int64_t tokens, double now, double tokens_per_s);
  double share() const { return share_; }

 private:
  double Credit(double now, double tokens_per_s) const;
  double share_, memory_s_, burst_s_;
  double refused_at_ = -std::numeric_limits<double>::infinity();
  double busy_since_ = -1;
  double credit_ = std::numeric_limits<double>::infinity(), credit_at_ = 0;  // tokens at credit_at_
};

// Projected finish times (absolute) of `work` served in ServedBefore order from `now`, indexed
// like `work`; with `starts`, also when each one's own work begins (the work ahead of it done).
std::vector<double> ProjectFinish(const std::vector<AdmissionWork>& work, double now, double pass_left_s,
                                  const PassTimeModel& model, int64_t pass_tokens,
                                  std::vector<double>* starts = nullptr);

}  // namespace tlr
