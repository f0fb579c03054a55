// The decoder's asynchronous pipeline on random-weight models with an in-process LLM behind a
// simulated network (jittered, so replies arrive out of order): outputs and sources equal the
// blocking loop's for greedy and sampled decoding, spans, branches, lookahead and failing calls;
// speculation is really used (hits, misses, drafts, cancelled calls); the caller can cancel;
// and waiting for replies does not keep a core busy.
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "device/decode/decoder.h"
#include "model/random_pair_fixture.h"
#include "ops/thread_pool.h"
#include "util/temp_dir.h"
#include "device/decode/decode_test_support.h"

namespace tlr {
namespace {

class PipelineTest : public RandomPairTest<11, 12> {
 protected:

  using Out = DecodedTokens;
  // One generation with a fresh LLM backend (`llm_model` in process, behind a simulated
  // network of rtt +- jitter ms).
  Out Run(const Model& llm_model, const DecodeOptions& d, double rtt_ms, double jitter_ms, uint64_t net_seed = 1,
          LlmBackend* backend = nullptr) {
    auto router = Router::Builtin(RouterKind::kRandom, 5);
    EXPECT_TRUE(router.ok());
    InProcessLlm local(llm_model, 1, 512);
    DelayedLlm net(&local, rtt_ms / 1e3, jitter_ms / 1e3, net_seed);
    CollabDecoder dec(*slm_, &*router, backend ? backend : &net, &pool_);
    return DecodeAll(dec, prompt_, d);
  }

  ThreadPool pool_{2};
  std::vector<int32_t> prompt_ = {5, 17, 42, 99, 7, 3};
};

DecodeOptions Options(float threshold, bool pipeline, int branches = 2, int lookahead = 8, int depth = 32,
                      double llm_budget = 0) {
  DecodeOptions d;
  d.pipeline.llm_budget = llm_budget;
  d.threshold = threshold;
  d.max_tokens = 40;
  d.pipeline.enabled = pipeline;
  d.pipeline.branches = branches;
  d.pipeline.lookahead = lookahead;
  d.pipeline.depth = depth;
  return d;
}

// The LLM budget (tokens asked of the LLM per routed token) holds whatever the speculation does:
// lookahead comes out of what is left, speculative calls wait while they would pass it. The
// output stays the blocking loop's.
TEST_F(PipelineTest, LlmBudgetBoundsWhatIsAskedOfTheLlm) {
  for (const Model* m : {slm_, llm_}) {
    const Out off = Run(*m, Options(0.5f, false), 10, 3);
    ASSERT_GT(off.st.routed, 0);
    for (double budget : {1.0, 2.0}) {
      const Out on = Run(*m, Options(0.5f, true, 3, 16, 32, budget), 10, 3, 7);
      SCOPED_TRACE(testing::Message() << "budget " << budget << (m == slm_ ? " LLM = SLM" : ""));
      EXPECT_EQ(on.ids, off.ids);
      EXPECT_EQ(on.src, off.src);
      // Asked (and so generated, in process) per routed token within the budget, where calls
      // whose answers did not stand (cancelled, or answered and then discarded with the
      // speculation they were in) were counted as routed-to-be when they were sent.
      const int64_t not_standing = on.st.llm_calls - on.st.spec_resolved;
      EXPECT_LE(static_cast<double>(on.st.llm_work.generated),
                budget * static_cast<double>(on.st.routed + not_standing) + 1);
      if (budget == 1.0) {
        // No room for any lookahead: at most one token per call (a call cancelled before it
        // ran costs nothing).
        EXPECT_LE(on.st.llm_work.generated, on.st.llm_calls);
        EXPECT_EQ(on.st.lookahead_used, 0);
      }
    }
  }
  // With no limit and an LLM that agrees with the SLM, lookahead grows and drafts are used. Long
  // enough that replies come back while the line is still being decoded: in 40 tokens the SLM
  // of a random pair can send every call before the first reply is back (on a fast host: CI saw
  // 0 drafts used), so whether any draft was used was timing. The network is 10 and 100 ms.
  for (double rtt : {10.0, 100.0}) {
    DecodeOptions o = Options(0.5f, true, 1, 16, 32, 0);
    o.max_tokens = 160;
    const Out fast = Run(*slm_, o, rtt, 3, 7);
    SCOPED_TRACE(testing::Message() << "rtt " << rtt << " ms");
    EXPECT_GT(fast.st.lookahead_used, 10);
  }
}

TEST_F(PipelineTest, GreedyOutputEqualsTheBlockingLoop) {
  for (float threshold : {0.2f, 0.5f, 0.9f}) {
    const Out off = Run(*llm_, Options(threshold, false), 4, 3);
    ASSERT_GT(off.st.routed, 0);
    for (int branches : {1, 3}) {
      for (int lookahead : {0, 8}) {
        for (int depth : {0, 4, 32}) {
          const Out on = Run(*llm_, Options(threshold, true, branches, lookahead, depth), 4, 3, branches * 7 + depth);
          SCOPED_TRACE(testing::Message() << "threshold " << threshold << " branches " << branches << " lookahead "
                                          << lookahead << " depth " << depth);
          EXPECT_EQ(on.ids, off.ids);
          EXPECT_EQ(on.src, off.src);
          EXPECT_EQ(on.st.routed, off.st.routed);
          EXPECT_EQ(on.st.fallbacks, 0);
        }
      }
    }
  }
}

// What each generation cost the LLM (LlmWork, exact in process): blocking, one token generated
// per routed token and no context token read twice; pipelined, every reply's lookahead counts
// whether the decoder read it or not.
TEST_F(PipelineTest, LlmWorkCountsEveryTokenTheLlmComputed) {
  const Out off = Run(*llm_, Options(0.5f, false), 2, 1);
  ASSERT_GT(off.st.routed, 0);
  EXPECT_EQ(off.st.llm_work.generated, off.st.routed);
  EXPECT_LE(off.st.llm_work.prefilled, static_cast<int64_t>(prompt_.size()) + off.st.generated);
  EXPECT_GE(off.st.llm_work.prefilled, static_cast<int64_t>(prompt_.size()));
  EXPECT_GT(off.st.llm_work.forward_s, 0);
  EXPECT_DOUBLE_EQ(off.st.llm_generated_per_routed(), 1.0);
  const Out on = Run(*llm_, Options(0.5f, true, 1, 4), 2, 1);
  ASSERT_EQ(on.ids, off.ids);
  ASSERT_GT(on.st.llm_calls, 0);
  // Every routed token was generated by some call; each call generated at most 1 + 4.
  EXPECT_GE(on.st.llm_work.generated, on.st.routed);
  EXPECT_LE(on.st.llm_work.generated, 5 * on.st.llm_calls);
  EXPECT_GT(on.st.llm_work.generated, on.st.routed - on.st.lookahead_used);
}

// A conversation through one SlmContext: each turn gives the tokens a fresh generation gives,
// and prefills only what the context does not hold (the new turn, and the last token of the
// previous answer, which was never fed to the SLM).
TEST_F(PipelineTest, SlmContextCarriesAConversation) {
  auto router = Router::Builtin(RouterKind::kRandom, 5);
  ASSERT_TRUE(router.ok());
  for (bool pipeline : {false, true}) {
    for (float temperature : {0.0f, 0.8f}) {
      SCOPED_TRACE(testing::Message() << "pipeline " << pipeline << " temperature " << temperature);
      DecodeOptions d = Options(0.5f, pipeline);
      d.max_tokens = 12;
      d.sampling.temperature = temperature;
      d.sampling.top_k = 0;
      d.sampling.seed = 3;
      SlmContext context;
      std::vector<int32_t> conv = prompt_;
      int64_t held = 0;  // what the context should hold of conv at least
      for (int turn = 0; turn < 3; ++turn) {
        std::vector<int32_t> with, without;
        InProcessLlm a(*llm_, 1, 512), b(*llm_, 1, 512);
        CollabDecoder dec_a(*slm_, &*router, &a, &pool_), dec_b(*slm_, &*router, &b, &pool_);
        auto sa = dec_a.Generate(conv, d, [&](const TokenEvent& ev) { with.push_back(ev.id); return true; }, &context);
        auto sb = dec_b.Generate(conv, d, [&](const TokenEvent& ev) { without.push_back(ev.id); return true; });
        ASSERT_TRUE(sa.ok()) << sa.status().message();
        ASSERT_TRUE(sb.ok()) << sb.status().message();
        EXPECT_EQ(with, without) << "turn " << turn;
        EXPECT_EQ(sb->prompt_reused, 0);
        EXPECT_GE(sa->prompt_reused, held) << "turn " << turn;
        EXPECT_LT(sa->prompt_reused, static_cast<int64_t>(conv.size()));
        EXPECT_EQ(sa->routed, sb->routed);
        conv.insert(conv.end(), with.begin(), with.end());
        held = static_cast<int64_t>(conv.size()) - 1;
        EXPECT_GE(static_cast<int64_t>(context.tokens.size()), held);
        EXPECT_TRUE(std::equal(context.tokens.begin(), context.tokens.end(), conv.begin()));
        for (int32_t t : {21, 22, 23 + turn}) conv.push_back(t);  // the next user message
      }
      // A prompt that parts from the context early reuses only the shared prefix.
      std::vector<int32_t> other = prompt_;
      other[2] = 77;
      std::vector<int32_t> got, want;
      InProcessLlm a(*llm_, 1, 512), b(*llm_, 1, 512);
      CollabDecoder dec_a(*slm_, &*router, &a, &pool_), dec_b(*slm_, &*router, &b, &pool_);
      auto sa = dec_a.Generate(other, d, [&](const TokenEvent& ev) { got.push_back(ev.id); return true; }, &context);
      ASSERT_TRUE(sa.ok());
      ASSERT_TRUE(dec_b.Generate(other, d, [&](const TokenEvent& ev) { want.push_back(ev.id); return true; }).ok());
      EXPECT_EQ(got, want);
      EXPECT_EQ(sa->prompt_reused, 2);
    }
  }
}

// The cost policy (route_policy.h): every token is routed exactly when its confidence is under
// the bar priced from the context the LLM holds (nothing of the prompt at first, then all before
// the last routed position), pipelined or not; a cold first call needs a lower confidence than a
// warm one, so some tokens the threshold rule would route stay with the SLM; an LLM that already
// holds the prompt is priced warm from the first token. A cost budget stops routing where the
// next call would pass it, at the same token pipelined or not.
TEST_F(PipelineTest, CostPolicyPricesEachCallByWhatTheLlmHolds) {
  const double kRatio = 4;
  // Replays the policy over a generation's tokens; returns how many tokens it disagrees with.
  auto broken = [&](const Out& o, int64_t held, RoutePolicy policy, double budget, double* spent = nullptr) {
    int bad = 0;
    CallAccount a;
    a.held = held;
    int64_t at = static_cast<int64_t>(prompt_.size());
    for (size_t i = 0; i < o.ids.size(); ++i, ++at) {
      const bool routed = o.src[i] != TokenSource::kSlm;
      bad += routed != a.Routes(policy, 0.8f, kRatio, budget, o.conf[i], at, 1);
      if (routed) a.Call(kRatio, at, 1);
    }
    if (spent) *spent = a.spent;
    return bad;
  };
  DecodeOptions cost = Options(0.8f, false);
  cost.policy = RoutePolicy::kCost;
  cost.price_ratio = kRatio;
  const Out off = Run(*llm_, cost, 3, 2);
  ASSERT_GT(off.st.routed, 0);
  EXPECT_EQ(broken(off, 0, RoutePolicy::kCost, 0), 0);
  // Some token under the threshold stayed with the SLM: a call there cost more than it was worth.
  bool kept = false;
  for (size_t i = 0; i < off.ids.size(); ++i) kept |= off.conf[i] < 0.8f && off.src[i] == TokenSource::kSlm;
  EXPECT_TRUE(kept);
  // A cold call here (6 prompt tokens, 1 written at 4) is priced twice the cheapest one.
  EXPECT_NEAR(RouteBar(RoutePolicy::kCost, 0.9f, kRatio, 6, 0, 1), 0.8f, 1e-6);
  EXPECT_NEAR(RouteBar(RoutePolicy::kCost, 0.9f, kRatio, 6, 5, 1), 0.9f, 1e-6);
  EXPECT_EQ(RouteBar(RoutePolicy::kThreshold, 0.9f, kRatio, 600, 0, 1), 0.9f);
  for (RoutePolicy policy : {RoutePolicy::kCost, RoutePolicy::kThreshold}) {
    for (double budget : {0.0, 40.0}) {
      DecodeOptions base = cost;
      base.policy = policy;
      base.cost_budget = budget;
      const Out blocking = Run(*llm_, base, 3, 2);
      double spent = 0;
      EXPECT_EQ(broken(blocking, 0, policy, budget, &spent), 0);
      if (budget > 0) {
        EXPECT_LE(spent, budget);
        EXPECT_GT(spent, budget - 20);  // it stopped for the budget, not for want of low confidences
      }
      for (int branches : {1, 3}) {
        for (int lookahead : {0, 8}) {
          DecodeOptions on = base;
          on.pipeline.enabled = true;
          on.pipeline.branches = branches;
          on.pipeline.lookahead = lookahead;
          const Out got = Run(*llm_, on, 3, 2, 5 + branches + lookahead);
          SCOPED_TRACE(testing::Message() << RoutePolicyName(policy) << " budget " << budget << " branches "
                                          << branches << " lookahead " << lookahead);
          EXPECT_EQ(got.ids, blocking.ids);
          EXPECT_EQ(got.src, blocking.src);
        }
      }
    }
  }
  // The same backend again: it holds the prompt (and more), so the first call is priced warm.
  auto router = Router::Builtin(RouterKind::kRandom, 5);
  ASSERT_TRUE(router.ok());
  InProcessLlm local(*llm_, 1, 512);
  CollabDecoder dec(*slm_, &*router, &local, &pool_);
  const Out first = DecodeAll(dec, prompt_, cost);
  ASSERT_EQ(first.ids, off.ids);
  EXPECT_GE(local.HeldPrefix(prompt_), static_cast<int64_t>(prompt_.size()));
  const Out again = DecodeAll(dec, prompt_, cost);
  EXPECT_EQ(broken(again, static_cast<int64_t>(prompt_.size()), RoutePolicy::kCost, 0), 0);
}

TEST_F(PipelineTest, SampledOutputEqualsTheBlockingLoop) {
  // Draws are keyed by (seed, position): speculative and cancelled work cannot shift them.
  for (float temperature : {0.8f, 1.5f}) {
    DecodeOptions off_opts = Options(0.5f, false);
    off_opts.sampling.temperature = temperature;
    off_opts.sampling.seed = 3;
    off_opts.sampling.top_k = 0;
    const Out off = Run(*llm_, off_opts, 3, 2);
    DecodeOptions on_opts = off_opts;
    on_opts.pipeline.enabled = true;
    on_opts.pipeline.branches = 2;
    const Out on = Run(*llm_, on_opts, 3, 2, 9);
    EXPECT_EQ(on.ids, off.ids) << "temperature " << temperature;
    EXPECT_EQ(on.src, off.src);
    // The same with the LLM equal to the SLM (the speculation mostly stands).
    const Out off_same = Run(*slm_, off_opts, 3, 2);
    const Out on_same = Run(*slm_, on_opts, 3, 2, 4);
    EXPECT_EQ(on_same.ids, off_same.ids);
    EXPECT_EQ(on_same.src, off_same.src);
  }
}

TEST_F(PipelineTest, SpansEqualTheBlockingLoop) {
  for (int span : {2, 3}) {
    DecodeOptions off_opts = Options(0.4f, false);
    off_opts.route_span = span;
    DecodeOptions on_opts = off_opts;
    on_opts.pipeline.enabled = true;
    for (const Model* m : {llm_, slm_}) {
      const Out off = Run(*m, off_opts, 3, 2);
      const Out on = Run(*m, on_opts, 3, 2, 5);
      EXPECT_EQ(on.ids, off.ids) << "span " << span;
      EXPECT_EQ(on.src, off.src) << "span " << span;
    }
  }
}

TEST_F(PipelineTest, SpeculationIsUsedHitsMissesAndDrafts) {
  // A 60 ms round trip: many SLM steps fit in one, even when a loaded machine slows the SLM
  // (at 20 ms, calls sometimes came back before the next routed token and nothing overlapped).
  constexpr int kRtt = 60;
  // LLM = SLM: the SLM's own guess is the LLM's token, the speculation stands.
  const Out same = Run(*slm_, Options(0.5f, true, 1, 0), kRtt, 0);
  EXPECT_GT(same.st.spec_resolved, 0);
  EXPECT_EQ(same.st.spec_hits, same.st.spec_resolved);
  EXPECT_EQ(same.st.wasted_slm_steps, 0);
  EXPECT_GT(same.st.max_in_flight, 1);  // several routed tokens were on the network at once
  // A different LLM: misses discard work and cancel the calls made inside it.
  const Out other = Run(*llm_, Options(0.5f, true, 1, 0), kRtt, 0);
  EXPECT_LT(other.st.spec_hits, other.st.spec_resolved);
  EXPECT_GT(other.st.wasted_slm_steps, 0);
  EXPECT_GT(other.st.cancelled_calls, 0);
  bool saw_miss = false;
  for (SpecOutcome o : other.spec) saw_miss |= o == SpecOutcome::kMiss;
  EXPECT_TRUE(saw_miss);
  // Lookahead: later routed tokens inside the LLM's draft need no call, and the output is the
  // same. (Not compared: the number of calls against `other`'s. Drafts make each call longer,
  // so on a loaded machine more speculation is discarded and more calls are made: 91 vs 56
  // was seen at a load average of 10.)
  const Out drafts = Run(*llm_, Options(0.5f, true, 1, 16), kRtt, 0);
  EXPECT_GT(drafts.st.lookahead_used, 0);
  EXPECT_EQ(drafts.ids, other.ids);
  // Blocking: one call per routed token, every routed token waited for.
  const Out off = Run(*llm_, Options(0.5f, false), 20, 0);
  EXPECT_EQ(off.st.llm_calls, off.st.routed);
  EXPECT_GT(off.st.stall_s, 0.02 * static_cast<double>(off.st.routed) * 0.9);
  for (size_t i = 0; i < off.spec.size(); ++i) {
    EXPECT_EQ(off.spec[i] == SpecOutcome::kBlocking, off.src[i] == TokenSource::kLlm);
  }
}

// Every call fails (the server is down, DownLlm): the pipeline's speculation already holds the
// SLM's tokens, which become FALLBACK, exactly as in the blocking loop.
TEST_F(PipelineTest, FailedCallsAreFallbackAsInTheBlockingLoop) {
  DownLlm down(slm_->tokenizer().Fingerprint());
  const Out off = Run(*llm_, Options(0.5f, false), 0, 0, 1, &down);
  const Out on = Run(*llm_, Options(0.5f, true, 3, 8), 0, 0, 1, &down);
  EXPECT_EQ(on.ids, off.ids);
  EXPECT_EQ(on.src, off.src);
  EXPECT_GT(on.st.fallbacks, 0);
  EXPECT_EQ(on.st.fallbacks, off.st.fallbacks);
}

TEST_F(PipelineTest, CancelStopsWhileWaitingAndWaitingIsNotBusy) {
  // A 2 s round trip: the decoder sits waiting for the first routed token.
  auto router = Router::Builtin(RouterKind::kRandom, 5);
  InProcessLlm local(*llm_, 1, 512);
  DelayedLlm net(&local, 2.0, 0, 1);
  CollabDecoder dec(*slm_, &*router, &net, &pool_);
  DecodeOptions d = Options(0.99f, true, 1, 0, 8);
  std::atomic<bool> cancel{false};
  d.cancel = &cancel;
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    cancel = true;
  });
  auto st = dec.Generate(prompt_, d, nullptr);
  stopper.join();
  getrusage(RUSAGE_THREAD, &after);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->stop, "stopped");
  EXPECT_LT(wall, 1.9);  // it did not wait for the reply
  auto cpu = [](const rusage& r) {
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };
  // The decoding thread slept while it waited (a busy poll would burn the whole wall time).
  EXPECT_LT(cpu(after) - cpu(before), 0.5 * wall);
}

}  // namespace
}  // namespace tlr
