// Prefix sharing between conversations (LlmEngine, session store): a new conversation starts
// from a copy of the prefix another idle cache of the same client holds.
#include <gtest/gtest.h>

#include "server/engine_test_fixture.h"

namespace tlr {
namespace {

// Its own suite name: CTest registers each file's suites (tlr_test), so a TEST_F(PrefixSharingTest, ...)
// here would register llm_engine_test.cc's tests twice.
class PrefixSharingTest : public EngineTest {};

// How many first tokens two contexts share.
int64_t Common(const std::vector<int32_t>& x, const std::vector<int32_t>& y) {
  size_t c = 0;
  while (c < x.size() && c < y.size() && x[c] == y[c]) ++c;
  return static_cast<int64_t>(c);
}

// Conversations that begin alike (the system prompt every device of an app sends): a new
// session starts from a copy of the prefix another idle session holds and prefills only the
// rest, with the same answers and logprobs, bit for bit, as a prefill from scratch; so does a
// new prompt-cache slot of the OpenAI endpoints. A context sharing fewer than 16 tokens with
// every cache prefills all. With share_prefixes off (--no-prefix-sharing) each prefills all.
TEST_F(PrefixSharingTest, NewConversationsCopyAPrefixAnotherSessionHolds) {
  const std::string system =
      "You answer questions about the world of the tharko and the fexko. Pick one of the choices.\n";
  const std::vector<int32_t> ctx_a = Prompt(system + "Question: Where would you find a zinthar?\nA. marsh\nB. stone\n");
  const std::vector<int32_t> ctx_b = Prompt(system + "Question: What is a fexko used for?\nA. cooking\nB. glass\n");
  const std::vector<int32_t> ctx_c = Prompt(system + "Question: Who keeps a tharko?\nA. farmers\nB. kings\n");
  const std::vector<int32_t> ctx_d = Question("What is a vorn?");  // shares only "Question:" with them
  const int64_t ab = Common(ctx_a, ctx_b), ac = Common(ctx_a, ctx_c);
  ASSERT_GE(ab, 20) << "the system prompt is too short for the test";
  std::vector<float> logprobs[2];
  for (bool share : {true, false}) {
    Metrics metrics;
    EngineLimits lim;
    lim.share_prefixes = share;
    LlmEngine engine(*llm_, nullptr, lim, &metrics);
    SessionInfo a, b, d;
    ASSERT_TRUE(engine.CreateSession(&a).ok() && engine.CreateSession(&b).ok() && engine.CreateSession(&d).ok());
    EngineResult ra = engine.Next(Call(a.id, {}, ctx_a, 2, "1"));
    ASSERT_TRUE(ra.ok()) << ra.message;
    EXPECT_EQ(ra.reply.prefilled, static_cast<int64_t>(ctx_a.size()));
    EngineResult rb = engine.Next(Call(b.id, {}, ctx_b, 2, "1"));
    ASSERT_TRUE(rb.ok()) << rb.message;
    EXPECT_EQ(rb.reply.tokens, Reference(ctx_b, 2));
    EXPECT_EQ(rb.reply.prefilled, static_cast<int64_t>(ctx_b.size()) - (share ? ab : 0));
    EXPECT_EQ(metrics.Value("tlr_session_copied_tokens_total"), share ? static_cast<double>(ab) : 0.0);
    EXPECT_EQ(rb.reply.position, static_cast<int64_t>(ctx_b.size()) + 1);
    logprobs[share ? 0 : 1] = rb.reply.logprobs;
    // The copy is the session's own: its conversation goes on warm.
    std::vector<int32_t> held = ctx_b;
    held.push_back(rb.reply.tokens[0]);
    std::vector<int32_t> next = held;
    next.push_back(11);
    next.push_back(12);
    EngineResult rb2 = engine.Next(Call(b.id, held, next, 1, "2"));
    ASSERT_TRUE(rb2.ok()) << rb2.message;
    EXPECT_EQ(rb2.reply.tokens, Reference(next, 1));
    EXPECT_EQ(rb2.reply.prefilled, 2);
    // A short common start is not worth a copy.
    EngineResult rd = engine.Next(Call(d.id, {}, ctx_d, 1, "1"));
    ASSERT_TRUE(rd.ok()) << rd.message;
    EXPECT_EQ(rd.reply.prefilled, static_cast<int64_t>(ctx_d.size()));
    EXPECT_EQ(metrics.Value("tlr_session_copied_tokens_total"), share ? static_cast<double>(ab) : 0.0);
    // The OpenAI endpoints: a new slot starts from a session's prefix too.
    EngineResult rc = engine.Complete(ctx_c, 1, SamplerParams{}, 0, nullptr);
    ASSERT_TRUE(rc.ok()) << rc.message;
    EXPECT_EQ(rc.reply.tokens, Reference(ctx_c, 1));
    const int64_t copied = share ? std::max(ac, Common(ctx_b, ctx_c)) : 0;
    EXPECT_EQ(rc.reply.prefilled, static_cast<int64_t>(ctx_c.size()) - copied);
    EXPECT_EQ(metrics.Value("tlr_prompt_cache_copied_tokens_total"), static_cast<double>(copied));
  }
  EXPECT_EQ(logprobs[0], logprobs[1]) << "a copied prefix must give the logprobs of a prefill";
}

// Devices whose contexts share a system prompt, side by side under a KV budget that holds
// about three of six: sessions copy the prefix from idle ones while others are evicted, run or
// resync, and every answer is still the greedy reference (make tsan-test runs it threaded).
TEST_F(PrefixSharingTest, ConcurrentSessionsCopyingASharedPrefixKeepEveryAnswerRight) {
  Metrics metrics;
  EngineLimits lim;
  LlmEngine probe(*llm_, nullptr, lim, nullptr);
  const std::string system = "You answer questions about the world of the tharko and the fexko. Pick one.\n";
  constexpr int kDevices = 6, kCalls = 5;
  std::vector<std::vector<int32_t>> prompts;
  size_t longest = 0;
  for (const char* thing : {"zinthar", "fexko", "tharko", "vorn", "plith", "amber"}) {
    prompts.push_back(Prompt(system + "Question: Where would you find a " + thing + "?\nA. marsh\nB. stone\n"));
    longest = std::max(longest, prompts.back().size());
  }
  lim.kv_budget_bytes = probe.kv_bytes_per_token() * 3 * (longest + kCalls);
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  std::vector<std::string> errors;
  const auto answers = RunDevices(engine, prompts, kCalls, /*retry=*/true, &errors);
  for (int d = 0; d < kDevices; ++d) {
    ASSERT_TRUE(errors[d].empty()) << "device " << d << ": " << errors[d];
    EXPECT_EQ(Reference(prompts[d], kCalls), answers[d]) << "device " << d;
  }
  EXPECT_GT(metrics.Value("tlr_session_copied_tokens_total"), 0);
  EXPECT_GT(metrics.Value("tlr_evictions_total"), 0);
  EXPECT_LE(engine.kv_bytes(), lim.kv_budget_bytes);
}

// Prefixes are shared only within one client (API key, or address without keys): a reply's
// `prefilled` would otherwise tell a client how much of its prompt someone else had sent. A
// session of another owner copies nothing, one of the same owner copies; the OpenAI endpoints'
// slots likewise, and another owner's slot is emptied, not reused, when taken.
TEST_F(PrefixSharingTest, PrefixesAreSharedOnlyWithinOneClient) {
  const std::string system =
      "You answer questions about the world of the tharko and the fexko. Pick one of the choices.\n";
  const auto a = Prompt(system + "Question: Where would you find a zinthar?\nA. marsh\nB. stone\n");
  const auto b = Prompt(system + "Question: What is a fexko used for?\nA. cooking\nB. glass\n");
  const auto c = Prompt(system + "Question: Who keeps a tharko?\nA. farmers\nB. kings\n");
  const auto d = Prompt(system + "Question: When does a vorn sleep?\nA. night\nB. noon\n");
  const int64_t ac = Common(a, c), bd = Common(b, d);
  ASSERT_GE(ac, 20);
  Metrics metrics;
  EngineLimits lim;
  lim.prompt_cache_slots = 1;  // one slot: the second client must take the first's
  LlmEngine engine(*llm_, nullptr, lim, &metrics);
  SessionInfo s1, s2, s3;
  ASSERT_TRUE(engine.CreateSession(&s1, "API key #1").ok());
  ASSERT_TRUE(engine.CreateSession(&s2, "API key #2").ok());
  ASSERT_TRUE(engine.CreateSession(&s3, "API key #1").ok());
  ASSERT_TRUE(engine.Next(Call(s1.id, {}, a, 1, "1")).ok());
  EngineResult r2 = engine.Next(Call(s2.id, {}, b, 1, "1"));
  ASSERT_TRUE(r2.ok()) << r2.message;
  EXPECT_EQ(r2.reply.prefilled, static_cast<int64_t>(b.size())) << "copied another client's prefix";
  EngineResult r3 = engine.Next(Call(s3.id, {}, c, 1, "1"));
  ASSERT_TRUE(r3.ok()) << r3.message;
  EXPECT_EQ(r3.reply.prefilled, static_cast<int64_t>(c.size()) - ac) << "the same client's prefix was not copied";
  EXPECT_EQ(r3.reply.tokens, Reference(c, 1));
  // OpenAI endpoints: a new slot of API key #2 copies from #2's session only.
  CallControl as2;
  as2.owner = "API key #2";
  EngineResult c2 = engine.Complete(d, 1, SamplerParams{}, 0, nullptr, nullptr, 0, as2);
  ASSERT_TRUE(c2.ok()) << c2.message;
  EXPECT_EQ(c2.reply.prefilled, static_cast<int64_t>(d.size()) - bd);
  EXPECT_EQ(c2.reply.tokens, Reference(d, 1));
  // The one slot is #2's: #3 takes it emptied, sharing nothing with it.
  CallControl as3;
  as3.owner = "API key #3";
  EngineResult c3 = engine.Complete(d, 1, SamplerParams{}, 0, nullptr, nullptr, 0, as3);
  ASSERT_TRUE(c3.ok()) << c3.message;
  EXPECT_EQ(c3.reply.prefilled, static_cast<int64_t>(d.size())) << "reused another client's prompt cache";
  EXPECT_EQ(c3.reply.tokens, Reference(d, 1));
}

}  // namespace
}  // namespace tlr
