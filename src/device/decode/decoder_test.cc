// The collaborative decoder against a from-scratch reference (the seed system's approach:
// re-run both models over the whole sequence for every token), the baselines, KV reuse,
// fallback, route spans and stopping.
#include "device/decode/decoder.h"

#include <gtest/gtest.h>

#include "model/random_pair_fixture.h"
#include "ops/thread_pool.h"
#include "util/temp_dir.h"
#include "device/decode/decode_test_support.h"

namespace tlr {
namespace {

template <const char* kPreset>
class DecoderTestT : public RandomPairTest<11, 12, kPreset> {
 protected:
  using Base = RandomPairTest<11, 12, kPreset>;

  using Out = DecodedTokens;
  Out Run(Router* router, LlmBackend* llm, const DecodeOptions& d) {
    CollabDecoder dec(*Base::slm_, router, llm, &pool_);
    return DecodeAll(dec, prompt_, d);
  }

  // Logits (and hidden) of the last position of `seq`, computed from scratch.
  static void Scratch(const Model& m, const std::vector<int32_t>& seq, std::vector<float>* logits,
                      std::vector<float>* hidden) {
    auto cache = m.NewCache(static_cast<int64_t>(seq.size()));
    ForwardContext ctx(nullptr);
    logits->resize(m.config().n_vocab);
    hidden->resize(m.config().n_embd);
    SequenceInput in{&*cache, seq, OutputRows::kLast, logits->data(), hidden->data()};
    ASSERT_TRUE(m.Forward({&in, 1}, &ctx).ok());
  }

  void JointEqualsTheFromScratchReference();

  ThreadPool pool_{2};
  std::vector<int32_t> prompt_ = {5, 17, 42, 99, 7, 3};
};
using DecoderTest = DecoderTestT<kTinyPreset>;
using DecoderQwen3Test = DecoderTestT<kTinyQwen3>;
using DecoderGemma3Test = DecoderTestT<kTinyGemma3>;

// The joint decode (blocking and pipelined) against re-running both models from scratch for
// every token, and that neither model reads a token twice.
template <const char* kPreset>
void DecoderTestT<kPreset>::JointEqualsTheFromScratchReference() {
  Model* slm_ = Base::slm_;
  Model* llm_ = Base::llm_;
  for (bool pipeline : {false, true}) {
  SCOPED_TRACE(pipeline ? "pipeline on" : "pipeline off");
  // The seeded random router routes about half the tokens; the reference draws the same numbers.
  auto router = Router::Builtin(RouterKind::kRandom, 5);
  auto ref_router = Router::Builtin(RouterKind::kRandom, 5);
  ASSERT_TRUE(router.ok() && ref_router.ok());
  DecodeOptions d;
  d.max_tokens = 40;
  d.threshold = 0.5f;
  d.pipeline.enabled = pipeline;
  InProcessLlm llm(*llm_, 1, 256);
  Out got = Run(&*router, &llm, d);
  ASSERT_GT(got.st.routed, 0);
  ASSERT_LT(got.st.routed, got.st.generated);

  // Reference: re-run both models from scratch for every token.
  std::vector<int32_t> seq = prompt_;
  std::vector<float> logits, hidden, llogits, lhidden;
  for (size_t i = 0; i < got.ids.size(); ++i) {
    Scratch(*slm_, seq, &logits, &hidden);
    const float conf = ref_router->Confidence(hidden.data(), logits.data(), slm_->config().n_vocab, nullptr);
    int32_t want = ArgMax(logits.data(), slm_->config().n_vocab);
    TokenSource src = TokenSource::kSlm;
    if (conf < d.threshold) {
      Scratch(*llm_, seq, &llogits, &lhidden);
      want = ArgMax(llogits.data(), llm_->config().n_vocab);
      src = TokenSource::kLlm;
    }
    ASSERT_EQ(got.ids[i], want) << "token " << i;
    ASSERT_EQ(got.src[i], src) << "token " << i;
    ASSERT_NEAR(got.conf[i], conf, 1e-4);
    seq.push_back(want);
  }
  EXPECT_EQ(got.st.fallbacks, 0);
  if (pipeline) continue;
  // The SLM stepped once per token after the prefill; the LLM read every token at most once.
  EXPECT_EQ(got.st.slm_steps, got.st.generated - 1);
  EXPECT_LE(llm.total_ingested(), static_cast<int64_t>(seq.size()));
  EXPECT_EQ(got.st.llm_calls, got.st.routed);
  }
}

TEST_F(DecoderTest, JointEqualsTheFromScratchReferenceAndNeverRereads) { JointEqualsTheFromScratchReference(); }

// The newer families above the engine: a random qwen3 pair and a random gemma3 pair (sliding
// window 5, so the 40 generated tokens run past it) decode jointly exactly like the reference.
TEST_F(DecoderQwen3Test, JointEqualsTheFromScratchReference) { JointEqualsTheFromScratchReference(); }
TEST_F(DecoderGemma3Test, JointEqualsTheFromScratchReference) { JointEqualsTheFromScratchReference(); }

TEST_F(DecoderTest, BaselinesAndExtremeThresholds) {
  auto router = Router::Builtin(RouterKind::kEntropy);
  InProcessLlm llm(*llm_, 1, 256);
  DecodeOptions d;
  d.max_tokens = 24;
  d.mode = DecodeMode::kSmallOnly;
  Out small = Run(&*router, nullptr, d);
  d.mode = DecodeMode::kLargeOnly;
  Out large = Run(nullptr, &llm, d);
  d.mode = DecodeMode::kJoint;
  d.threshold = 0.0f;  // never routes
  Out never = Run(&*router, &llm, d);
  d.threshold = 1.01f;  // always routes
  Out always = Run(&*router, &llm, d);
  EXPECT_EQ(never.ids, small.ids);
  EXPECT_EQ(never.st.routed, 0);
  EXPECT_EQ(always.ids, large.ids);
  EXPECT_EQ(always.st.routed, always.st.generated);
  EXPECT_EQ(large.st.routed, large.st.generated);
  EXPECT_EQ(large.st.slm_steps, 0);
  EXPECT_EQ(small.st.llm_calls, 0);
  EXPECT_NE(small.ids, large.ids);  // two different random models
}

TEST_F(DecoderTest, RouteSpanTakesSeveralLlmTokensPerCall) {
  auto router = Router::Builtin(RouterKind::kEntropy);
  InProcessLlm llm(*llm_, 1, 256);
  DecodeOptions d;
  d.max_tokens = 24;
  d.mode = DecodeMode::kLargeOnly;
  Out large = Run(nullptr, &llm, d);
  d.mode = DecodeMode::kJoint;
  d.threshold = 1.01f;
  d.route_span = 4;
  d.pipeline.enabled = false;  // the blocking loop: one call per span
  Out span = Run(&*router, &llm, d);
  EXPECT_EQ(span.ids, large.ids);  // greedy LLM tokens, 4 per call
  EXPECT_EQ(span.st.llm_calls, (span.st.generated + 3) / 4);
  EXPECT_EQ(span.st.slm_steps, span.st.llm_calls - 1);
}

TEST_F(DecoderTest, FallsBackToTheSlmWhenTheLlmFails) {
  auto router = Router::Builtin(RouterKind::kEntropy);
  DownLlm down(slm_->tokenizer().Fingerprint());
  DecodeOptions d;
  d.max_tokens = 20;
  d.mode = DecodeMode::kSmallOnly;
  Out small = Run(&*router, nullptr, d);
  d.mode = DecodeMode::kJoint;
  d.threshold = 1.01f;
  d.pipeline.enabled = false;
  Out got = Run(&*router, &down, d);
  EXPECT_EQ(got.ids, small.ids);  // the request completes with the SLM's own tokens
  EXPECT_EQ(got.st.fallbacks, got.st.generated);
  EXPECT_EQ(down.calls, got.st.generated);
  d.pipeline.enabled = true;
  Out piped = Run(&*router, &down, d);
  EXPECT_EQ(piped.ids, small.ids);
  EXPECT_EQ(piped.src, got.src);
  for (TokenSource s : got.src) EXPECT_EQ(s, TokenSource::kFallback);
  // large_only has nothing to fall back to: an error, not a crash.
  CollabDecoder dec(*slm_, nullptr, &down, &pool_);
  d.mode = DecodeMode::kLargeOnly;
  EXPECT_FALSE(dec.Generate(prompt_, d, nullptr).ok());
}

TEST_F(DecoderTest, StopsWhenAskedAndChecksItsInputs) {
  auto router = Router::Builtin(RouterKind::kMaxProb);
  InProcessLlm llm(*llm_, 1, 256);
  CollabDecoder dec(*slm_, &*router, &llm, &pool_);
  DecodeOptions d;
  d.max_tokens = 50;
  int seen = 0;
  auto st = dec.Generate(prompt_, d, [&](const TokenEvent&) { return ++seen < 5; });
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(st->stop, "stopped");
  EXPECT_FALSE(dec.Generate({}, d, nullptr).ok());
  const std::vector<int32_t> bad = {1, 1 << 30};
  EXPECT_FALSE(dec.Generate(bad, d, nullptr).ok());
  d.route_span = 0;
  EXPECT_FALSE(dec.Generate(prompt_, d, nullptr).ok());
  CollabDecoder no_router(*slm_, nullptr, &llm, &pool_);
  EXPECT_FALSE(no_router.Generate(prompt_, DecodeOptions{}, nullptr).ok());
  // A learned router trained for another model is refused.
  RouterInfo info;
  info.kind = RouterKind::kColm;
  info.slm_fingerprint = "ffffffffffffffff";
  DenseLayer l{slm_->config().n_embd, 1, std::vector<float>(slm_->config().n_embd, 0.0f), {0.0f}};
  auto other = Router::FromLayers(info, {l});
  ASSERT_TRUE(other.ok());
  CollabDecoder wrong(*slm_, &*other, &llm, &pool_);
  auto w = wrong.Generate(prompt_, DecodeOptions{}, nullptr);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("trained for SLM"), std::string::npos);
}

}  // namespace
}  // namespace tlr
