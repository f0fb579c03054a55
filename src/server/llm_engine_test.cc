// LlmEngine: sessions, delta ingest, conflicts, idempotency, eviction, expiry and batching,
// against the in-process LLM backend as the reference (demo LLM, greedy).
#include "server/llm_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "device/llm/llm_backend.h"
#include "routing/label_llm.h"
#include "net/protocol.h"
#include "ops/thread_pool.h"
#include "server/engine_test_fixture.h"
#include "util/test_support.h"

namespace tlr {
namespace {

TEST_F(EngineTest, DeltaCallsMatchFromScratchGreedy) {
  Metrics metrics;
  LlmEngine engine(*llm_, nullptr, EngineLimits{}, &metrics);
  SessionInfo info;
  ASSERT_TRUE(engine.CreateSession(&info).ok());
  std::vector<int32_t> ctx = Question("Where would you find a zinthar?");
  std::vector<int32_t> held;
  int64_t sent = 0;
  for (int step = 0; step < 5; ++step) {
    EngineResult r = engine.Next(Call(info.id, held, ctx, 2, std::to_string(step)));
    ASSERT_TRUE(r.ok()) << r.message;
    sent += static_cast<int64_t>(ctx.size() - held.size());
    EXPECT_EQ(r.reply.tokens, Reference(ctx, 2)) << "step " << step;
    // The session holds the context and the first generated token (fed back for the second).
    EXPECT_EQ(r.reply.position, static_cast<int64_t>(ctx.size()) + 1);
    held = ctx;
    held.push_back(r.reply.tokens[0]);
    // The device keeps the first token, then its SLM adds two of its own.
    ctx.push_back(r.reply.tokens[0]);
    ctx.push_back(11);
    ctx.push_back(12);
  }
  EXPECT_EQ(engine.prefill_tokens(), sent);
  EXPECT_EQ(engine.decode_tokens(), 5);
  EXPECT_EQ(metrics.Value("tlr_prefill_tokens_total"), static_cast<double>(sent));
}

TEST_F(EngineTest, ConflictReportsWhatTheSessionHolds) {
  LlmEngine engine(*llm_, nullptr, EngineLimits{}, nullptr);
  SessionInfo info;
  ASSERT_TRUE(engine.CreateSession(&info).ok());
  const std::vector<int32_t> ctx = Question("What is a bolrin made of?");
  ASSERT_TRUE(engine.Next(Call(info.id, {}, ctx, 1, "a")).ok());
  // The device claims more than the session holds.
  std::vector<int32_t> longer = ctx;
  longer.push_back(5);
  longer.push_back(6);
  NextRequest bad = Call(info.id, longer, longer, 1, "b");
  bad.append = {7};
  EngineResult r = engine.Next(bad);
  EXPECT_EQ(r.code, EngineCode::kConflict);
  EXPECT_EQ(r.held, static_cast<int64_t>(ctx.size()));
  EXPECT_EQ(r.held_hash, TokenPrefixHash(ctx));
  // A wrong hash for a valid length is a conflict too.
  NextRequest wrong = Call(info.id, ctx, longer, 1, "c");
  wrong.prefix_hash ^= 1;
  EXPECT_EQ(engine.Next(wrong).code, EngineCode::kConflict);
  // Resending from what it holds works and equals the reference.
  EngineResult ok = engine.Next(Call(info.id, ctx, longer, 1, "d"));
  ASSERT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(ok.reply.tokens, Reference(longer, 1));
  // A shorter base (the device went back) truncates and still matches.
  std::vector<int32_t> edited(ctx.begin(), ctx.begin() + 4);
  edited.push_back(9);
  EngineResult back = engine.Next(Call(info.id, std::vector<int32_t>(ctx.begin(), ctx.begin() + 4), edited, 1, "e"));
  ASSERT_TRUE(back.ok()) << back.message;
  EXPECT_EQ(back.reply.tokens, Reference(edited, 1));
  EXPECT_EQ(back.reply.position, 5);
}

// A pipelining device sends a base that is safe whatever order its calls run in, so it often
// resends what an earlier call left in the session (the reply and the lookahead it confirmed):
// the session keeps those tokens instead of rewinding and prefilling them again, and every
// reply reports the session's work so far.
TEST_F(EngineTest, ResentTokensPastTheBaseAreKeptNotPrefilledAgain) {
  Metrics metrics;
  LlmEngine engine(*llm_, nullptr, EngineLimits{}, &metrics);
  SessionInfo info;
  ASSERT_TRUE(engine.CreateSession(&info).ok());
  const std::vector<int32_t> ctx = Question("What is a bolrin made of?");
  NextRequest first = Call(info.id, {}, ctx, 1, "a");
  first.lookahead = 3;
  EngineResult a = engine.Next(first);
  ASSERT_TRUE(a.ok()) << a.message;
  ASSERT_EQ(a.reply.lookahead.size(), 3u);
  EXPECT_EQ(a.reply.session_work.prefilled, static_cast<int64_t>(ctx.size()));
  EXPECT_EQ(a.reply.session_work.generated, 4);
  EXPECT_GT(a.reply.session_work.forward_s, 0);
  // The device confirmed the answer and two lookahead tokens, then its SLM wrote one token of
  // its own; it sends from base ctx.size() (what it was sure of when it sent).
  std::vector<int32_t> next = ctx;
  next.push_back(a.reply.tokens[0]);
  next.push_back(a.reply.lookahead[0]);
  next.push_back(a.reply.lookahead[1]);
  next.push_back(17);
  EngineResult b = engine.Next(Call(info.id, ctx, next, 1, "b"));
  ASSERT_TRUE(b.ok()) << b.message;
  EXPECT_EQ(b.reply.tokens, Reference(next, 1));
  EXPECT_EQ(b.reply.prefilled, 1);  // only the SLM's own token
  EXPECT_EQ(metrics.Value("tlr_kept_tokens_total"), 3);
  EXPECT_EQ(metrics.Value("tlr_rewound_tokens_total"), 0);  // the session held ctx + 3 tokens
  EXPECT_EQ(b.reply.session_work.prefilled, static_cast<int64_t>(ctx.size()) + 1);
  EXPECT_EQ(b.reply.session_work.generated, 5);
  EXPECT_GE(b.reply.session_work.forward_s, a.reply.session_work.forward_s);
  // Everything appended matches what the session holds: the last token is read again (its
  // outputs answer the call) and the answer is still the reference's.
  std::vector<int32_t> same(next.begin(), next.end() - 1);
  EngineResult c = engine.Next(Call(info.id, ctx, same, 1, "c"));
  ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_EQ(c.reply.tokens, Reference(same, 1));
  EXPECT_EQ(c.reply.prefilled, 1);
  // A context that parts from the session's after the base rewinds only from there.
  std::vector<int32_t> other = ctx;
  other.push_back(a.reply.tokens[0]);
  other.push_back(a.reply.lookahead[0] == 21 ? 22 : 21);
  EngineResult d = engine.Next(Call(info.id, ctx, other, 1, "d"));
  ASSERT_TRUE(d.ok()) << d.message;
  EXPECT_EQ(d.reply.tokens, Reference(other, 1));
  EXPECT_EQ(d.reply.prefilled, 1);
}

TEST_F(EngineTest, RepeatedRequestIdIsAnsweredOnceAndNotAppendedTwice) {
  LlmEngine engine(*llm_, nullptr, EngineLimits{}, nullptr);
  SessionInfo info;
  ASSERT_TRUE(engine.CreateSession(&info).ok());
  const std::vector<int32_t> ctx = Question("What is a drelk used for?");
  EngineResult a = engine.Next(Call(info.id, {}, ctx, 3, "same"));
  ASSERT_TRUE(a.ok());
  const int64_t ingested = engine.prefill_tokens() + engine.decode_tokens();
  EngineResult b = engine.Next(Call(info.id, {}, ctx, 3, "same"));
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b.reply.replayed);
  EXPECT_EQ(b.reply.tokens, a.reply.tokens);
  EXPECT_EQ(b.reply.position, a.reply.position);
  EXPECT_EQ(engine.prefill_tokens() + engine.decode_tokens(), ingested);
}

TEST_F(EngineTest, BadCallsAreRejected) {
  EngineLimits lim;
  lim.max_context = 64;
  LlmEngine engine(*llm_, nullptr, lim, nullptr);
  SessionInfo info;
  ASSERT_TRUE(engine.CreateSession(&info).ok());
  EXPECT_EQ(engine.Next(Call("nope", {}, {1, 2}, 1, "")).code, EngineCode::kNotFound);
  EXPECT_EQ(engine.Next(Call(info.id, {}, {}, 1, "")).code, EngineCode::kBadRequest);
  EXPECT_EQ(engine.Next(Call(info.id, {}, {1, -3}, 1, "")).code, EngineCode::kBadRequest);
  EXPECT_EQ(engine.Next(Call(info.id, {}, {1, 1 << 30}, 1, "")).code, EngineCode::kBadRequest);
  EXPECT_EQ(engine.Next(Call(info.id, {}, {1, 2}, 0, "")).code, EngineCode::kBadRequest);
  EXPECT_EQ(engine.Next(Call(info.id, {}, std::vector<int32_t>(65, 3), 1, "")).code, EngineCode::kBadRequest);
  EXPECT_TRUE(engine.Next(Call(info.id, {}, std::vector<int32_t>(64, 3), 1, "")).ok());  // fills the context exactly
  EXPECT_TRUE(engine.DeleteSession(info.id));
  EXPECT_FALSE(engine.DeleteSession(info.id));
  EXPECT_EQ(engine.Next(Call(info.id, {}, {1, 2}, 1, "")).code, EngineCode::kNotFound);
}

TEST_F(EngineTest, KvBudgetEvictsTheLeastRecentlyUsedIdleSession) {
  Metrics metrics;
  EngineLimits lim;
  LlmEngine probe(*llm_, nullptr, lim, nullptr);
  lim.kv_budget_bytes = probe.kv_bytes_per_token() * 100;  // room for 100 positions
  lim.prompt_cache_slots = 0;
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  SessionInfo a, b;
  ASSERT_TRUE(engine.CreateSession(&a).ok());
  ASSERT_TRUE(engine.CreateSession(&b).ok());
  std::vector<int32_t> ca(60, 40), cb(60, 41);
  ASSERT_TRUE(engine.Next(Call(a.id, {}, ca, 1, "1")).ok());
  EXPECT_LE(engine.kv_bytes(), lim.kv_budget_bytes);
  ASSERT_TRUE(engine.Next(Call(b.id, {}, cb, 1, "2")).ok());  // evicts a
  EXPECT_LE(engine.kv_bytes(), lim.kv_budget_bytes);
  EXPECT_EQ(metrics.Value("tlr_evictions_total"), 1);
  ca.push_back(42);
  EngineResult r = engine.Next(Call(a.id, std::vector<int32_t>(60, 40), ca, 1, "3"));
  EXPECT_EQ(r.code, EngineCode::kConflict);
  EXPECT_EQ(r.held, 0);
  // Resent from zero it works (evicting b in turn) and matches the reference.
  r = engine.Next(Call(a.id, {}, ca, 1, "4"));
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.reply.tokens, Reference(ca, 1));
  // One call larger than the whole budget is refused, not served by evicting everyone.
  EXPECT_EQ(engine.Next(Call(b.id, {}, std::vector<int32_t>(120, 3), 1, "5")).code, EngineCode::kOverloaded);
}

// Devices calling side by side under a budget too small for all of them: every call may evict
// another session's cache while that session's own call is starting or finishing. Under
// ThreadSanitizer (make tsan-test) this exercises MakeRoom's reads of other sessions.
TEST_F(EngineTest, EvictionBetweenConcurrentSessionsKeepsEveryAnswerRight) {
  Metrics metrics;
  EngineLimits lim;
  LlmEngine probe(*llm_, nullptr, lim, nullptr);
  lim.kv_budget_bytes = probe.kv_bytes_per_token() * 80;  // about two of the four contexts
  lim.prompt_cache_slots = 0;
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  constexpr int kDevices = 4, kCalls = 6;
  std::vector<std::vector<int32_t>> prompts;
  for (int d = 0; d < kDevices; ++d) prompts.emplace_back(24, 30 + d);
  std::vector<std::string> errors;
  const auto answers = RunDevices(engine, prompts, kCalls, /*retry=*/true, &errors);
  for (int d = 0; d < kDevices; ++d) {
    ASSERT_TRUE(errors[d].empty()) << "device " << d << ": " << errors[d];
    EXPECT_EQ(Reference(prompts[d], kCalls), answers[d]) << "device " << d;
  }
  EXPECT_GT(metrics.Value("tlr_evictions_total"), 0);
  EXPECT_LE(engine.kv_bytes(), lim.kv_budget_bytes);
}

// Regression for the unlocked read in eviction (MakeRoom read another session's last_used
// before taking its lock). Two devices each make a call on their own session from their own
// threads and then stay idle, their threads alive: nothing orders their last writes (the end of
// their calls touches last_used) before what this thread does next, except the sessions' own
// locks. A third call needs room and looks at both idle sessions; each may be read only under
// its lock. Under ThreadSanitizer (make tsan-test) the old code is a reported race on every run
// (the second session looked at was read before its try_lock).
TEST_F(EngineTest, EvictionLooksAtIdleSessionsOnlyUnderTheirLocks) {
  EngineLimits lim;
  LlmEngine probe(*llm_, nullptr, lim, nullptr);
  lim.kv_budget_bytes = probe.kv_bytes_per_token() * 60;  // two contexts of 24, not three
  lim.prompt_cache_slots = 0;
  LlmEngine engine(*llm_, nullptr, lim, nullptr);
  SessionInfo a, b, c;
  ASSERT_TRUE(engine.CreateSession(&a).ok() && engine.CreateSession(&b).ok() && engine.CreateSession(&c).ok());
  // Relaxed: they tell this thread the calls are over without ordering anything (only the
  // sessions' locks may do that, as between the calls of a real server).
  std::atomic<int> done{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> devices;
  for (const std::string& id : {a.id, b.id}) {
    devices.emplace_back([&, id] {
      EXPECT_TRUE(engine.Next(Call(id, {}, std::vector<int32_t>(24, 9), 1, "")).ok());
      done.fetch_add(1, std::memory_order_relaxed);
      while (!release.load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  while (done.load(std::memory_order_relaxed) < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::vector<int32_t> ctx(30, 11);
  EngineResult r = engine.Next(Call(c.id, {}, ctx, 1, ""));
  release.store(true, std::memory_order_relaxed);
  for (auto& t : devices) t.join();
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.reply.tokens, Reference(ctx, 1));
  EXPECT_LE(engine.kv_bytes(), lim.kv_budget_bytes);  // one of the idle two was evicted
}

TEST_F(EngineTest, IdleSessionsExpireAndTheSessionLimitHolds) {
  EngineLimits lim;
  lim.session_ttl_s = 0.5;  // a host stalled for less than this between a and c does not expire a
  lim.max_sessions = 2;
  LlmEngine engine(*llm_, nullptr, lim, nullptr);
  SessionInfo a, b, c;
  ASSERT_TRUE(engine.CreateSession(&a).ok());
  ASSERT_TRUE(engine.CreateSession(&b).ok());
  EXPECT_EQ(engine.CreateSession(&c).code, EngineCode::kOverloaded);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_TRUE(engine.CreateSession(&c).ok());  // the expired two are swept first
  EXPECT_EQ(engine.session_count(), 1);
  EXPECT_EQ(engine.Next(Call(a.id, {}, {1, 2}, 1, "")).code, EngineCode::kNotFound);
}

TEST_F(EngineTest, ConcurrentSessionsShareForwardPassesAndGetTheirOwnAnswers) {
  Metrics metrics;
  ThreadPool pool(1);
  LlmEngine engine(*llm_, &pool, EngineLimits{}, &metrics);
  constexpr int kDevices = 8, kCalls = 6;
  std::vector<std::vector<int32_t>> prompts;
  for (int d = 0; d < kDevices; ++d) {
    prompts.push_back(Question("Where would you find a thing number " + std::to_string(d) + "?"));
  }
  std::vector<std::string> errors;
  const auto answers = RunDevices(engine, prompts, kCalls, /*retry=*/false, &errors);
  for (int d = 0; d < kDevices; ++d) {
    ASSERT_TRUE(errors[d].empty()) << errors[d];
    // Greedy from scratch over the same context gives the same continuation.
    EXPECT_EQ(Reference(prompts[d], kCalls), answers[d]) << "device " << d;
  }
  const Metrics::HistogramSnapshot h = metrics.Histogram("tlr_batch_sequences");
  uint64_t multi = 0;
  for (size_t b = 1; b < h.counts.size(); ++b) multi += h.counts[b];  // passes with > 1 sequence
  EXPECT_GT(multi, 0u) << "no forward pass ever served two sessions";
  EXPECT_LT(h.count, static_cast<uint64_t>(kDevices * kCalls));
}

TEST_F(EngineTest, CallsThatCannotBeAnsweredInTimeAreRefusedAtOnce) {
  // Passes of 16 tokens, each at least 0.1 s (measured at start: admission knows it).
  Metrics metrics;
  EngineLimits lim;
  lim.max_batch_tokens = 16;
  lim.test_pass_delay_s = 0.1;
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  std::vector<SessionInfo> warm(5);
  for (SessionInfo& w : warm) ASSERT_TRUE(engine.CreateSession(&w).ok());
  SessionInfo b;
  ASSERT_TRUE(engine.CreateSession(&b).ok());
  ASSERT_TRUE(engine.Next(Call(b.id, {}, {1, 2, 3, 4}, 1, "b0")).ok());
  const double prefilled = metrics.Value("tlr_prefill_tokens_total");
  // Five routed tokens of 30 new tokens each (warm: they go first): 10 passes, about 1 s.
  std::vector<std::thread> threads;
  for (size_t i = 0; i < warm.size(); ++i) {
    threads.emplace_back([&, i] {
      NextRequest r = Call(warm[i].id, {}, std::vector<int32_t>(30, static_cast<int32_t>(10 + i)), 1, "w");
      r.timeout_s = 30;
      EXPECT_TRUE(engine.Next(r).ok());
    });
  }
  while (metrics.Histogram("tlr_queue_seconds").count < 5) std::this_thread::yield();
  // A new conversation from base 2 (it would cut the session to 2 tokens) that may wait half of
  // its 1 s: it would wait about 1 s behind them.
  NextRequest cold = Call(b.id, {1, 2}, std::vector<int32_t>(40, 5), 1, "q");
  cold.timeout_s = 1.0;
  EngineResult r = engine.Next(cold);
  for (auto& t : threads) t.join();
  EXPECT_EQ(r.code, EngineCode::kBusy) << r.message;
  EXPECT_EQ(HttpStatusOf(r.code), 429);
  EXPECT_GT(r.retry_after_s, 0);
  EXPECT_NE(r.message.find("overloaded"), std::string::npos) << r.message;
  EXPECT_EQ(metrics.Value("tlr_calls_refused_total", {{"class", "cold"}}), 1);
  EXPECT_EQ(metrics.Value("tlr_calls_expired_total") + metrics.Value("tlr_calls_abandoned_total"), 0);
  // Nothing was computed for it, and its session still holds what it held: a call from base 4
  // is a plain delta.
  EXPECT_EQ(metrics.Value("tlr_prefill_tokens_total"), prefilled + 150);
  EngineResult again = engine.Next(Call(b.id, {1, 2, 3, 4}, {1, 2, 3, 4, 9}, 1, "q2"));
  ASSERT_TRUE(again.ok()) << again.message;
  EXPECT_EQ(again.reply.prefilled, 1);
  EXPECT_EQ(again.reply.tokens, Reference({1, 2, 3, 4, 9}, 1));
  // A call that would not fit its time even on an idle server is told so (400: waiting cannot
  // help): 5 tokens to generate take 5 passes, 0.5 s.
  NextRequest slow = Call(b.id, {}, {1, 2, 3}, 5, "s");
  slow.timeout_s = 0.3;
  EngineResult never = engine.Next(slow);
  EXPECT_EQ(never.code, EngineCode::kBadRequest) << never.message;
  EXPECT_NE(never.message.find("even when idle"), std::string::npos) << never.message;
  // A 400 is not a refusal (429): tlr_calls_refused_total counts refusals only.
  EXPECT_EQ(metrics.Value("tlr_calls_refused_total", {{"class", "warm"}}), 0);
  EXPECT_EQ(metrics.Value("tlr_calls_refused_total", {{"class", "cold"}}), 1);
}

TEST_F(EngineTest, AdmittedCallsPastTheirDeadlineAreDroppedBeforeTheyRun) {
  // Before a pass has been timed admission lets everything in (no calibration here, and the
  // first pass is slowed down): a call that then waits past its deadline is dropped unrun.
  Metrics metrics;
  EngineLimits lim;
  lim.calibrate = false;
  lim.test_pass_delay_s = 0.3;
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  SessionInfo a, b;
  ASSERT_TRUE(engine.CreateSession(&a).ok());
  ASSERT_TRUE(engine.CreateSession(&b).ok());
  std::thread long_call([&] { EXPECT_TRUE(engine.Next(Call(a.id, {}, {7, 7, 7}, 1, "")).ok()); });
  // The first pass is under way (waited for, not assumed after a sleep).
  while (metrics.Histogram("tlr_queue_seconds").count < 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  NextRequest quick = Call(b.id, {}, {1, 2, 3}, 1, "q");
  quick.timeout_s = 0.001;
  EngineResult r = engine.Next(quick);
  long_call.join();
  EXPECT_EQ(r.code, EngineCode::kOverloaded) << r.message;
  EXPECT_EQ(metrics.Value("tlr_calls_expired_total"), 1);
  EXPECT_EQ(engine.prefill_tokens(), 3);
  EngineResult again = engine.Next(Call(b.id, {}, {1, 2, 3}, 1, "q2"));
  ASSERT_TRUE(again.ok()) << again.message;
  EXPECT_EQ(again.reply.tokens, Reference({1, 2, 3}, 1));
}

// A call is stopped only between passes: one whose last pass ends after its deadline is answered
// late, and counted so (tlr_calls_late_total), not as dropped.
TEST_F(EngineTest, CallsAnsweredAfterTheirDeadlineAreCountedLate) {
  Metrics metrics;
  EngineLimits lim;
  lim.calibrate = false;          // no pass timed: admission lets it in
  lim.test_pass_delay_s = 0.5;    // its one pass takes longer than its time
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  SessionInfo a;
  ASSERT_TRUE(engine.CreateSession(&a).ok());
  NextRequest call = Call(a.id, {}, {1, 2, 3}, 1, "late");
  call.timeout_s = 0.25;  // its pass starts well within it (or it would be dropped unrun)
  EngineResult r = engine.Next(call);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.reply.tokens, Reference({1, 2, 3}, 1));
  EXPECT_EQ(metrics.Value("tlr_calls_late_total"), 1);
  EXPECT_EQ(metrics.Value("tlr_calls_abandoned_total") + metrics.Value("tlr_calls_expired_total"), 0);
  // In time: not late.
  EngineResult ok = engine.Next(Call(a.id, {1, 2, 3}, {1, 2, 3, 4}, 1, "in time"));
  ASSERT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(metrics.Value("tlr_calls_late_total"), 1);
}

TEST_F(EngineTest, StartedCallsPastTheirDeadlineStopBetweenPassesAndKeepWhatTheyComputed) {
  // A call still running when its device stops waiting computes for nobody: it gets no further
  // pass. What it computed stays in its session (tokens and cache agree), so the device's next
  // call is a delta, not a resync of the whole context.
  EngineLimits lim;
  lim.max_batch_tokens = 16;  // 3000 prompt tokens take ~190 passes
  // Every pass takes at least 10 ms more: the whole call at least 1.9 s on any host, and at most
  // 50 passes (800 tokens) fit in its 0.5 s. (The timeout was a quarter of a first run's measured
  // time: a host that sped up between the two runs, a neighbour test ending, finished the call.)
  lim.test_pass_delay_s = 0.01;
  // A server that has timed no pass yet admits the call (admission would refuse it otherwise).
  Metrics metrics;
  lim.calibrate = false;
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  SessionInfo a, b;
  ASSERT_TRUE(engine.CreateSession(&a).ok());
  ASSERT_TRUE(engine.CreateSession(&b).ok());
  NextRequest slow = Call(a.id, {}, std::vector<int32_t>(3000, 7), 1, "slow");
  slow.timeout_s = 0.5;
  EngineResult r = engine.Next(slow);
  EXPECT_EQ(r.code, EngineCode::kOverloaded) << r.message;
  EXPECT_NE(r.message.find("past its timeout"), std::string::npos) << r.message;
  EXPECT_EQ(metrics.Value("tlr_calls_abandoned_total"), 1);
  EXPECT_EQ(metrics.Value("tlr_calls_expired_total"), 0);
  const int64_t computed = engine.prefill_tokens();
  EXPECT_GT(computed, 16);
  EXPECT_LT(computed, 3000) << "the abandoned call ran to the end";
  // The session holds the computed tokens: a call building on 16 of them is a plain delta...
  EngineResult kept = engine.Next(Call(a.id, std::vector<int32_t>(16, 7), std::vector<int32_t>(20, 7), 1, "s"));
  ASSERT_TRUE(kept.ok()) << kept.message;
  EXPECT_EQ(kept.reply.tokens, Reference(std::vector<int32_t>(20, 7), 1));
  EXPECT_EQ(metrics.Value("tlr_resyncs_total"), 0);
  EXPECT_EQ(engine.prefill_tokens(), computed + 1);  // only the last token is fed again
  // ...and both sessions answer correctly afterwards.
  EngineResult again = engine.Next(Call(a.id, {}, {4, 5, 6}, 2, "a2"));
  ASSERT_TRUE(again.ok()) << again.message;
  EXPECT_EQ(again.reply.tokens, Reference({4, 5, 6}, 2));
  EngineResult other = engine.Next(Call(b.id, {}, {1, 2, 3}, 1, "b"));
  ASSERT_TRUE(other.ok()) << other.message;
  EXPECT_EQ(other.reply.tokens, Reference({1, 2, 3}, 1));
}

// Lookahead is low priority: while one session's call makes its lookahead, another session's
// call arrives; the lookahead is cut where it stands (the reply carries what was made), and
// both answers are right.
TEST_F(EngineTest, LookaheadGivesWayToOtherCalls) {
  Metrics metrics;
  EngineLimits lim;
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  SessionInfo a, b;
  ASSERT_TRUE(engine.CreateSession(&a).ok());
  ASSERT_TRUE(engine.CreateSession(&b).ok());
  const std::vector<int32_t> pa = Question("where do people keep books?");
  NextRequest long_call = Call(a.id, {}, pa, 1, "a");
  long_call.lookahead = lim.max_tokens_per_call - 1;
  EngineResult ra;
  const int64_t decoded_before = engine.decode_tokens();
  std::thread t([&] { ra = engine.Next(long_call); });
  // Once the lookahead is being made (decode steps counted), another device calls.
  while (engine.decode_tokens() - decoded_before < 3 && !(ra.ok() && !ra.reply.tokens.empty())) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const std::vector<int32_t> pb = Question("what do cats eat?");
  EngineResult rb = engine.Next(Call(b.id, {}, pb, 1, "b"));
  t.join();
  ASSERT_TRUE(ra.ok()) << ra.message;
  ASSERT_TRUE(rb.ok()) << rb.message;
  EXPECT_EQ(rb.reply.tokens, Reference(pb, 1));
  ASSERT_EQ(ra.reply.tokens.size(), 1u);
  std::vector<int32_t> got = ra.reply.tokens;
  got.insert(got.end(), ra.reply.lookahead.begin(), ra.reply.lookahead.end());
  EXPECT_EQ(got, Reference(pa, static_cast<int>(got.size())));  // what was made is the LLM's text
  EXPECT_LT(static_cast<int>(ra.reply.lookahead.size()), long_call.lookahead) << "the lookahead was not cut";
  EXPECT_GT(metrics.Value("tlr_lookahead_cut_total"), 0);
  // The session holds what the reply says: the next call on it builds on that.
  EXPECT_EQ(ra.reply.position, static_cast<int64_t>(pa.size() + got.size() - 1));
}

// The OpenAI endpoints' prompt cache: by default one slot per client context (bounded by the
// KV budget, not a small count), so clients resending growing contexts each prefill only their
// new tokens; a prompt that shares a prefix with another slot (a regenerated answer) starts
// from a copy of it. With --prompt-cache 1 two clients take the one slot from each other.
TEST_F(EngineTest, PromptCacheKeepsEachClientsContext) {
  for (int slots : {0, 1}) {
    Metrics metrics;
    EngineLimits lim;
    lim.prompt_cache_slots = slots;
    LlmEngine engine(*llm_, nullptr, lim, &metrics);
    // More clients than the old fixed count of 4 slots.
    std::vector<std::vector<int32_t>> ctx;
    for (const char* q : {"where do people keep books?", "what do cats eat?", "why is the sky blue?",
                          "who wrote letters?", "how do birds fly?", "when does it snow?"}) {
      ctx.push_back(Prompt(std::string("Question: ") + q));
    }
    int64_t prefilled_later = 0, new_tokens_later = 0;
    for (int round = 0; round < 4; ++round) {
      for (size_t c = 0; c < ctx.size(); ++c) {
        EngineResult r = engine.Complete(ctx[c], 1, SamplerParams{}, 0, nullptr);
        ASSERT_TRUE(r.ok()) << r.message;
        EXPECT_EQ(r.reply.tokens, Reference(ctx[c], 1));
        if (round > 0) {
          prefilled_later += r.reply.prefilled;
          new_tokens_later += 4;  // the answer (not fed back when it was made) and 3 new tokens
        }
        ctx[c].push_back(r.reply.tokens[0]);
        for (int32_t t : {11, 12, 13}) ctx[c].push_back(t);
      }
    }
    if (slots == 0) {
      // Each call reads the answer it was given (not fed back) and the 3 new tokens.
      EXPECT_EQ(prefilled_later, new_tokens_later) << "clients' contexts were prefilled again";
      // A conversation branching off another's (an edited last message): a new slot that
      // starts from a copy of the shared prefix, and the original keeps its own.
      std::vector<int32_t> edit = ctx[0];
      edit.resize(edit.size() - 4 - 2);  // the slot holds the last prompt: part from it inside
      edit.push_back(21);
      const double copied = metrics.Value("tlr_prompt_cache_copied_tokens_total");
      EngineResult r = engine.Complete(edit, 1, SamplerParams{}, 0, nullptr);
      ASSERT_TRUE(r.ok()) << r.message;
      EXPECT_EQ(r.reply.tokens, Reference(edit, 1));
      EXPECT_EQ(r.reply.prefilled, 1);
      EXPECT_EQ(metrics.Value("tlr_prompt_cache_copied_tokens_total") - copied, static_cast<double>(edit.size() - 1));
      EngineResult own = engine.Complete(ctx[0], 1, SamplerParams{}, 0, nullptr);
      ASSERT_TRUE(own.ok()) << own.message;
      EXPECT_EQ(own.reply.prefilled, 4) << "the original conversation's slot was cut";
    } else {
      EXPECT_GT(prefilled_later, 2 * new_tokens_later) << "one slot cannot hold two contexts";
    }
  }
}

// Teacher-forced scoring (router labels): the argmax after every prefix equals the in-process
// LLM's, whether the sequences are scored together (sharing passes, from concurrent callers)
// or alone; the prompt's logprobs come with each next token's rank; bad input is refused.
TEST_F(EngineTest, ScoringMatchesTheModelTeacherForced) {
  EngineLimits lim;
  lim.max_batch_tokens = 16;  // sequences split into chunks across passes
  Metrics metrics;
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  const std::vector<std::vector<int32_t>> seqs = {Prompt("Question: Where does a tharko live?\nA. marsh\nB. cave\n"),
                                                  Prompt("Answer: A fexko is used for"), Prompt("The")};
  ThreadPool pool(1);
  InProcessLabelLlm ref(*llm_, &pool);
  auto want = ref.Predict(seqs);
  ASSERT_TRUE(want.ok()) << want.status().message();
  std::vector<std::vector<PromptPosition>> got;
  EngineResult r = engine.Score(seqs, 3, &got);
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_EQ(got.size(), seqs.size());
  int64_t prefilled = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_EQ(got[i].size(), seqs[i].size());
    prefilled += static_cast<int64_t>(seqs[i].size());
    for (size_t p = 0; p < seqs[i].size(); ++p) {
      EXPECT_EQ(got[i][p].argmax, (*want)[i][p]) << i << "/" << p;
      ASSERT_EQ(got[i][p].top.size(), 3u);
      EXPECT_EQ(got[i][p].top[0].id, got[i][p].argmax);
      if (p + 1 < seqs[i].size()) {
        EXPECT_GE(got[i][p].rank, 1);
        EXPECT_EQ(got[i][p].rank == 1, seqs[i][p + 1] == got[i][p].argmax);
        EXPECT_LE(got[i][p].logprob, 0.0f);
      }
    }
  }
  EXPECT_EQ(r.reply.prefilled, prefilled);
  // From several threads at once: the same answers.
  std::vector<std::thread> threads;
  std::atomic<int> same{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<PromptPosition>> one;
      if (engine.Score({seqs[t % 3]}, 0, &one).ok() && one.size() == 1) {
        bool eq = true;
        for (size_t p = 0; p < one[0].size(); ++p) eq = eq && one[0][p].argmax == (*want)[t % 3][p];
        same += eq;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(same.load(), 4);
  EXPECT_EQ(engine.session_count(), 0);  // scoring leaves no session behind
  // Bad input.
  EXPECT_EQ(engine.Score({}, 0, &got).code, EngineCode::kBadRequest);
  EXPECT_EQ(engine.Score({{}}, 0, &got).code, EngineCode::kBadRequest);
  EXPECT_EQ(engine.Score({{1, static_cast<int32_t>(llm_->config().n_vocab)}}, 0, &got).code, EngineCode::kBadRequest);
  EXPECT_EQ(engine.Score({std::vector<int32_t>(static_cast<size_t>(lim.max_context) + 1, 1)}, 0, &got).code,
            EngineCode::kBadRequest);
}

// Scoring is bounded like any call: a client that leaves stops its sequences between passes (a
// request of 64 x --ctx tokens ran to the end for nobody before).
TEST_F(EngineTest, ScoringStopsWhenItsClientHasGone) {
  EngineLimits lim;
  lim.max_batch_tokens = 16;
  lim.calibrate = false;
  lim.test_pass_delay_s = 0.01;  // 64 passes take 0.64 s at least; the client is seen gone after 0.05 s
  Metrics metrics;
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  const std::vector<std::vector<int32_t>> seqs(4, std::vector<int32_t>(256, 7));
  CallControl control;
  control.client_gone = [] { return true; };
  std::vector<std::vector<PromptPosition>> got;
  EngineResult r = engine.Score(seqs, 0, &got, control);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(engine.prefill_tokens(), 4 * 256) << "every sequence was scored for a client that had gone";
  EXPECT_EQ(engine.session_count(), 0);
  // So does one whose timeout (the client's X-TLR-Timeout-Ms) has passed: not refused up front
  // as a conversation would be, dropped once the time is over.
  const int64_t before = engine.prefill_tokens();
  CallControl timed;
  timed.timeout_s = 0.1;
  r = engine.Score(seqs, 0, &got, timed);
  EXPECT_EQ(r.code, EngineCode::kOverloaded) << r.message;
  EXPECT_NE(r.message.find("ran past its timeout"), std::string::npos) << r.message;
  EXPECT_GT(engine.prefill_tokens(), before) << "refused before it ran";
  EXPECT_LT(engine.prefill_tokens() - before, 4 * 256);
  // The engine serves the next call as before.
  std::vector<std::vector<PromptPosition>> one;
  ASSERT_TRUE(engine.Score({Prompt("The")}, 0, &one).ok());
}

}  // namespace
}  // namespace tlr