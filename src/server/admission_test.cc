// Admission under a fake clock: the pass-time fit, the order calls are served in, and which
// calls are refused and when they may come back (admission.h).
#include "server/admission.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tlr {
namespace {

// 10 ms per pass plus 1 ms per token; output rows free.
PassTimeModel LinearModel() {
  PassTimeModel m(0.0, 1.0);
  for (int64_t t : {1, 8, 32, 64, 128}) m.Observe(t, 1, 0.010 + 0.001 * static_cast<double>(t));
  return m;
}

AdmissionWork Call(double now, double timeout, int64_t tokens, bool warm, uint64_t seq, int steps = 0) {
  AdmissionWork w;
  w.deadline = now + timeout;
  w.budget_s = timeout;
  w.tokens = tokens;
  w.warm = warm;
  w.seq = seq;
  w.steps = steps;
  return w;
}

AdmissionPolicy Exact() {
  AdmissionPolicy p;
  p.pass_tokens = 64;
  p.safety = 1.0;
  p.margin_s = 0;
  p.margin_share = 0;
  p.cold_share = 0.5;
  return p;
}

TEST(PassTimeModel, FitsFixedAndPerTokenCost) {
  const PassTimeModel m = LinearModel();
  EXPECT_NEAR(m.fixed_s(), 0.010, 1e-9);
  EXPECT_NEAR(m.per_unit_s(), 0.001, 1e-9);
  EXPECT_NEAR(m.Predict(100, 1), 0.110, 1e-9);
  EXPECT_EQ(m.TokensWithin(0.0505, 0), 40);
}

TEST(PassTimeModel, OutputRowsCostTheHead) {
  PassTimeModel m(2.0, 1.0);  // an output row costs two tokens' work
  for (int64_t t : {1, 16, 64}) m.Observe(t, 1, 0.001 * static_cast<double>(t + 2));
  EXPECT_NEAR(m.Predict(10, 3), 0.016, 1e-9);
}

TEST(PassTimeModel, SameSizedPassesGiveTheMeanPerToken) {
  PassTimeModel m(0.0, 1.0);
  m.Observe(32, 1, 0.064);
  m.Observe(32, 1, 0.064);
  EXPECT_NEAR(m.Predict(16, 1), 0.032, 1e-9);
}

TEST(PassTimeModel, RecentPassesWeighMore) {
  PassTimeModel m(0.0, 0.5);
  for (int i = 0; i < 20; ++i) m.Observe(10, 1, 0.010);
  for (int i = 0; i < 20; ++i) m.Observe(10, 1, 0.040);  // the machine got slower
  EXPECT_NEAR(m.Predict(10, 1), 0.040, 1e-4);
}

TEST(Admission, EverythingIsAdmittedBeforeAPassWasTimed) {
  PassTimeModel none;
  const AdmissionVerdict v = Admit({}, Call(0, 0.001, 100000, false, 0), 0, 0, none, Exact());
  EXPECT_TRUE(v.admit);
}

TEST(Admission, WarmBeforeColdThenByDeadline) {
  const AdmissionWork cold_early = Call(0, 1, 100, false, 0), warm_late = Call(0, 5, 8, true, 1),
                      warm_early = Call(0, 2, 8, true, 2);
  EXPECT_TRUE(ServedBefore(warm_late, cold_early));
  EXPECT_TRUE(ServedBefore(warm_early, warm_late));
  EXPECT_FALSE(ServedBefore(cold_early, warm_early));
  const std::vector<double> f = ProjectFinish({cold_early, warm_late, warm_early}, 0, 0, LinearModel(), 64);
  EXPECT_LT(f[2], f[1]);
  EXPECT_LT(f[1], f[0]);
  // Two warm calls of 8 tokens share a pass (10 ms + 16 ms); the cold call's 100 tokens take two
  // more passes (116 tokens in all: 2 x 10 ms + 116 ms).
  EXPECT_NEAR(f[1], 0.026, 1e-9);
  EXPECT_NEAR(f[0], 0.136, 1e-9);
}

TEST(Admission, ThePassInFlightAndGenerationStepsCount) {
  const std::vector<double> f = ProjectFinish({Call(0, 1, 10, true, 0, 3)}, 5.0, 0.1, LinearModel(), 64);
  // 0.1 s left of the pass running, 20 ms for the prefill, 3 steps priced as passes of 11
  // tokens (21 ms).
  EXPECT_NEAR(f[0], 5.0 + 0.1 + 0.020 + 3 * 0.021, 1e-9);
}

TEST(Admission, ColdCallsTakeOnlyTheirShareAndComeBackWhenTheQueueDrains) {
  const PassTimeModel m = LinearModel();
  const AdmissionPolicy p = Exact();
  std::vector<AdmissionWork> admitted;
  // 1 s timeouts: behind a queue (more than 0.1 s) a cold call must be answered within 0.5 s.
  // Each 64-token prompt is one 74 ms pass.
  int n = 0;
  for (uint64_t seq = 0; seq < 20; ++seq) {
    const AdmissionWork c = Call(0, 1.0, 64, false, seq);
    const AdmissionVerdict v = Admit(admitted, c, 0, 0, m, p);
    if (!v.admit) {
      // The sixth is answered at 6 x 74 ms = 444 ms, the seventh at 518 ms: 18 ms too late.
      EXPECT_EQ(n, 6);
      // 18 ms, but a Retry-After is at least 50 ms.
      EXPECT_NEAR(v.retry_after_s, 0.05, 1e-9);
      EXPECT_NE(v.why.find("may then use 50% of its time"), std::string::npos) << v.why;
      // It fits once the queue ahead has drained by that much.
      std::vector<AdmissionWork> later = admitted;
      later.erase(later.begin());  // the first prompt is done after its 74 ms pass
      const AdmissionWork again = Call(0.074, 1.0, 64, false, seq);
      EXPECT_TRUE(Admit(later, again, 0.074, 0, m, p).admit);
      break;
    }
    admitted.push_back(c);
    ++n;
  }
  EXPECT_EQ(n, 6);
  // A warm call still gets in: it goes first and the cold calls have room to their deadlines.
  EXPECT_TRUE(Admit(admitted, Call(0, 1.0, 8, true, 99), 0, 0, m, p).admit);
}

TEST(Admission, AWarmCallThatWouldMakeAnAdmittedCallLateIsRefused) {
  const PassTimeModel m = LinearModel();
  AdmissionPolicy p = Exact();
  p.cold_share = 1.0;
  // A cold prompt finishing at 0.180 s (three passes, 150 tokens) with 0.2 s to go.
  const std::vector<AdmissionWork> admitted = {Call(0, 0.2, 150, false, 0)};
  const AdmissionVerdict small = Admit(admitted, Call(0, 1.0, 1, true, 1), 0, 0, m, p);
  EXPECT_TRUE(small.admit) << small.why;  // one more token: 0.181 s
  const AdmissionVerdict big = Admit(admitted, Call(0, 1.0, 30, true, 1), 0, 0, m, p);
  EXPECT_FALSE(big.admit);
  EXPECT_NE(big.why.find("already admitted"), std::string::npos) << big.why;
  EXPECT_NEAR(big.retry_after_s, 0.05, 1e-9);  // 10 ms late; a Retry-After is at least 50 ms
  const AdmissionVerdict bigger = Admit(admitted, Call(0, 1.0, 120, true, 1), 0, 0, m, p);
  EXPECT_NEAR(bigger.retry_after_s, 0.320 - 0.2, 1e-9);  // 270 tokens in 5 passes: 50 + 270 ms
  // A call already late whatever comes does not block others.
  const std::vector<AdmissionWork> late = {Call(0, 0.1, 150, false, 0)};
  EXPECT_TRUE(Admit(late, Call(0, 1.0, 30, true, 1), 0, 0, m, p).admit);
}

TEST(Admission, OnAnIdleServerACallThatFitsItsDeadlineIsAdmittedWhateverItsSize) {
  // 900 tokens: 15 passes, 1.05 s, more than half of a 2 s timeout, but it waits for nothing;
  // behind a short queue too.
  const AdmissionVerdict v = Admit({}, Call(0, 2.0, 900, false, 0), 0, 0, LinearModel(), Exact());
  EXPECT_TRUE(v.admit) << v.why;
  EXPECT_NEAR(v.expected_s, 1.05, 1e-9);
  EXPECT_TRUE(Admit({Call(0, 2.0, 8, true, 0)}, Call(0, 2.0, 900, false, 1), 0, 0, LinearModel(), Exact()).admit);
  // Behind a long one it is refused: 40 routed tokens of 30 new tokens each take 1.39 s.
  std::vector<AdmissionWork> busy;
  for (uint64_t i = 0; i < 40; ++i) busy.push_back(Call(0, 10.0, 30, true, i));
  EXPECT_FALSE(Admit(busy, Call(0, 2.0, 100, false, 99), 0, 0, LinearModel(), Exact()).admit);
}

TEST(Admission, MarginAndSafetyAreKeptFree) {
  const PassTimeModel m = LinearModel();
  AdmissionPolicy p = Exact();
  const AdmissionWork c = Call(0, 0.105, 80, true, 0);  // 2 passes: 0.100 s
  p.cold_share = 1.0;
  EXPECT_TRUE(Admit({}, c, 0, 0, m, p).admit);
  EXPECT_FALSE(Admit({}, c, 0, 0, m, p).partial);
  // Past the margin or the stretched time, it no longer fits: on an idle server it is admitted
  // only to ingest what it can of its prompt.
  p.margin_s = 0.01;
  EXPECT_TRUE(Admit({}, c, 0, 0, m, p).partial);
  p.margin_s = 0;
  p.safety = 1.2;
  const AdmissionVerdict v = Admit({}, c, 0, 0, m, p);
  EXPECT_TRUE(v.partial);
  EXPECT_NEAR(v.expected_s, 0.120, 1e-9);
}

TEST(Admission, APrefillLongerThanItsTimeIsTakenInPartsWhenTheQueueIsShort) {
  const PassTimeModel m = LinearModel();
  // 900 tokens: 1.05 s, with 0.5 s to go.
  const AdmissionVerdict alone = Admit({}, Call(0, 0.5, 900, false, 0), 0, 0, m, Exact());
  EXPECT_TRUE(alone.admit);
  EXPECT_TRUE(alone.partial);
  // Behind a queue longer than a tenth of its time it is refused until the queue is short.
  std::vector<AdmissionWork> busy;
  for (uint64_t i = 0; i < 4; ++i) busy.push_back(Call(0, 10.0, 30, true, i));
  const AdmissionVerdict behind = Admit(busy, Call(0, 0.5, 900, false, 9), 0, 0, m, Exact());
  EXPECT_FALSE(behind.admit);
  EXPECT_FALSE(behind.never);
  EXPECT_GT(behind.retry_after_s, 0);
}

TEST(Admission, ACallWhoseGenerationCannotFitEvenOnAnIdleServerIsToldSo) {
  // 60 tokens to generate take 60 passes, 1.26 s, with 0.5 s to go: waiting cannot help.
  const AdmissionVerdict v = Admit({}, Call(0, 0.5, 10, true, 0, 60), 0, 0, LinearModel(), Exact());
  EXPECT_FALSE(v.admit);
  EXPECT_TRUE(v.never);
  EXPECT_NE(v.why.find("even when idle"), std::string::npos) << v.why;
}

// A line fitted to big passes under load can price a step at seconds (its fixed part): calls
// that steps as fast as measured before would answer in time are not refused as never (a 400
// tells the client not to retry, and a call refused runs no pass to correct the line). An idle
// server runs such a call; a busy one refuses it for now (429).
TEST(Admission, AStaleProjectionDoesNotRefuseAsNeverWhatTheFastestStepsWouldAnswer) {
  PassTimeModel m(0.0, 0.9);
  for (int i = 0; i < 5; ++i) m.Observe(1, 1, 0.001);
  for (int i = 0; i < 40; ++i) m.Observe(i % 2 ? 400 : 512, 1, i % 2 ? 4.0 : 4.1);
  ASSERT_GT(m.Predict(1, 1), 1.0);  // the line now says a step takes seconds
  EXPECT_DOUBLE_EQ(m.fastest_step_s(), 0.001);
  const AdmissionWork call = Call(0, 0.5, 1, true, 0, 128);  // 128 steps: 0.128 s at 1 ms a step
  const AdmissionVerdict idle = Admit({}, call, 0, 0, m, Exact());
  EXPECT_TRUE(idle.admit) << idle.why;
  EXPECT_FALSE(idle.never);
  const AdmissionVerdict busy = Admit({Call(0, 10.0, 1, true, 1, 4)}, call, 0, 0, m, Exact());
  EXPECT_FALSE(busy.admit);
  EXPECT_FALSE(busy.never) << busy.why;
  EXPECT_GT(busy.retry_after_s, 0);
  EXPECT_NE(busy.why.find("took 128 ms before"), std::string::npos) << busy.why;
  // What even the fastest steps cannot answer in time is still never: 1000 steps, 1 s.
  const AdmissionVerdict never = Admit({}, Call(0, 0.5, 1, true, 0, 1000), 0, 0, m, Exact());
  EXPECT_FALSE(never.admit);
  EXPECT_TRUE(never.never);
}

TEST(Admission, CallsWithoutDeadlineAreAlwaysAdmittedAndGoLast) {
  const PassTimeModel m = LinearModel();
  AdmissionWork forever;
  forever.tokens = 8;  // small, yet not served before calls with deadlines
  forever.warm = true;
  EXPECT_TRUE(ServedBefore(Call(0, 100, 500, false, 5), forever));
  EXPECT_TRUE(Admit({Call(0, 0.05, 8, true, 0)}, forever, 0, 0, m, Exact()).admit);
  // It does not delay a call with a deadline that comes after it.
  EXPECT_TRUE(Admit({forever}, Call(0, 0.05, 8, true, 1), 0, 0, m, Exact()).admit);
}

TEST(ConversationPacer, PacedOnlyWhileTheServerIsBusyAndRefusingCalls) {
  ConversationPacer p(0.1, 1.0, 1.0);
  // A server of 1000 tokens/s, idle, refusing nobody: new conversations of any size come in.
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(p.Wait(i * 0.01, 1000), 0);
    p.Admitted(500, i * 0.01, 1000);
  }
  EXPECT_FALSE(p.paced(0.5));
  p.Refused(1.0);
  EXPECT_FALSE(p.paced(1.0)) << "refusing, but the worker is idle";
  p.Working(0.5);
  EXPECT_FALSE(p.paced(1.2)) << "busy for less than a second";
  EXPECT_TRUE(p.paced(1.5));
  EXPECT_TRUE(p.paced(1.99));
  EXPECT_FALSE(p.paced(2.0));  // a second without a refusal: unbounded again
  EXPECT_EQ(p.Wait(2.5, 1000), 0);
  p.Refused(3.0);
  EXPECT_TRUE(p.paced(3.0));
  p.Idle();  // the worker found nothing to do: there is room
  EXPECT_FALSE(p.paced(3.0));
  EXPECT_EQ(p.Wait(3.0, 1000), 0);
}

TEST(ConversationPacer, WhilePacedNewConversationsGetTheirShareOfTheTokenRate) {
  ConversationPacer p(0.1, 1.0, 1.0);  // 100 of 1000 tokens/s, at most 1 s of it saved
  p.Working(0);
  double now = 10;
  int64_t admitted = 0;
  while (now < 20) {
    p.Refused(now);  // refusals go on all along
    if (p.Wait(now, 1000) == 0) {
      p.Admitted(64, now, 1000);
      admitted += 64;
    }
    now += 0.01;
  }
  // 10 s at 100 tokens/s, plus the 100 saved when it began, plus the last call's overdraft.
  EXPECT_GE(admitted, 1000);
  EXPECT_LE(admitted, 1100 + 64);
  // A large one is admitted on credit and the next waits for the debt to be paid.
  ConversationPacer q(0.1, 1.0, 1.0);
  q.Working(0);
  q.Refused(10);
  EXPECT_EQ(q.Wait(10, 1000), 0);
  q.Admitted(600, 10, 1000);  // 100 saved - 600: 500 owed, 5 s at 100 tokens/s
  EXPECT_NEAR(q.Wait(10, 1000), 5.0, 1e-9);
  q.Refused(14.5);
  EXPECT_NEAR(q.Wait(14.5, 1000), 0.5, 1e-9);
  EXPECT_EQ(q.Wait(15.0, 1000), 0);
  // Admissions while not paced are not charged: the debt is still what it was.
  ConversationPacer r(0.1, 1.0, 1.0);
  r.Working(0);
  r.Refused(10);
  r.Admitted(300, 10, 1000);  // 200 owed
  r.Idle();
  r.Admitted(5000, 10.5, 1000);
  r.Working(10.5);
  r.Refused(11.5);
  EXPECT_NEAR(r.Wait(11.5, 1000), 0.5, 1e-9);
}

TEST(ConversationPacer, ShareOneNeverPacesAndShareZeroAdmitsNoneWhilePaced) {
  ConversationPacer all(1.0);
  all.Working(0);
  all.Refused(10);
  EXPECT_FALSE(all.paced(10));
  EXPECT_EQ(all.Wait(10, 1000), 0);
  ConversationPacer none(0.0);
  none.Working(0);
  none.Refused(10);
  EXPECT_GT(none.Wait(10, 1000), 0);
  EXPECT_EQ(none.Wait(11.5, 1000), 0);  // the refusals stopped
}

}  // namespace
}  // namespace tlr
