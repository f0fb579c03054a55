// The real server on a loopback port with every forward pass slowed down (a test-only delay),
// under more calls than it can answer in time: it refuses at once what would miss its
// deadline (429 overloaded, Retry-After), answers everything it admitted, drops a request whose
// client closed its connection before any pass ran for it, and keeps the sessions of refused
// calls as they were (their next call is a plain delta, not a resync).
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "net/protocol.h"
#include "server/llm_server.h"
#include "util/test_support.h"

namespace tlr {
namespace {

using nlohmann::json;

class OverloadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { llm_ = Model::Load(kDemo + "llm.gguf")->release(); }
  static void TearDownTestSuite() { delete llm_; }

  void Start(double pass_delay_s, int64_t batch_tokens, double new_share = 0.1) {
    EngineLimits lim;
    lim.new_share = new_share;
    lim.test_pass_delay_s = pass_delay_s;
    lim.max_batch_tokens = batch_tokens;
    engine_ = std::make_unique<LlmEngine>(*llm_, nullptr, lim, &metrics_);
    ServerOptions so;
    so.port = 0;
    server_ = std::make_unique<LlmServer>(engine_.get(), &metrics_, so);
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->port();
  }
  std::unique_ptr<httplib::Client> Client() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    // Longer than any call's deadline here (the long call's 60 s): under ASan on a loaded 2-core
    // machine its 57 passes took more than 30 s, and the client gave up on a call still running.
    c->set_read_timeout(std::chrono::seconds(90));
    return c;
  }
  std::string NewSession() {
    auto r = Client()->Post("/tlr/v1/sessions", "{}", "application/json");
    EXPECT_TRUE(r && r->status == 201);
    return r ? json::parse(r->body).value("session", "") : "";
  }
  // A prompt of `n` ordinary tokens, different per `salt`.
  std::vector<int32_t> Tokens(int n, int salt) const {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(10 + (salt * 31 + i * 7) % 200);
    return t;
  }
  // A call from `base` (the first `base` tokens of `held`, which the session holds).
  static std::string NextBody(const std::string& session, const std::vector<int32_t>& append, int64_t timeout_ms,
                              int n = 1, const std::vector<int32_t>& held = {}, int64_t base = 0) {
    return json{{"session", session},
                {"base", base},
                {"prefix_hash", HashHex(TokenPrefixHash(std::span<const int32_t>(held.data(), static_cast<size_t>(base))))},
                {"append", append},
                {"n", n},
                {"timeout_ms", timeout_ms}}
        .dump();
  }
  double Metric(const std::string& name, const Metrics::Labels& labels = {}) const { return metrics_.Value(name, labels); }
  // Posts every body to /tlr/v1/next at once (each client ready first, then all released: on a
  // busy machine threads that post as they start are too far apart to queue behind each other),
  // runs `meanwhile` on this thread, and returns the replies in order.
  struct Reply {
    int status = 0;  // 0: no reply
    std::string body;
    httplib::Headers headers;  // names compared without case
    std::string header(const std::string& name) const {
      auto it = headers.find(name);
      return it == headers.end() ? "" : it->second;
    }
  };
  static Reply Of(const httplib::Result& r) { return r ? Reply{r->status, r->body, r->headers} : Reply{}; }
  std::vector<Reply> Wave(const std::vector<std::string>& bodies, const std::function<void()>& meanwhile = {}) {
    std::vector<Reply> replies(bodies.size());
    std::vector<std::thread> threads;
    std::atomic<size_t> ready{0};
    std::atomic<bool> go{false};
    for (size_t i = 0; i < bodies.size(); ++i) {
      threads.emplace_back([&, i] {
        auto client = Client();
        ++ready;
        while (!go) std::this_thread::yield();
        replies[i] = Of(client->Post("/tlr/v1/next", bodies[i], "application/json"));
      });
    }
    while (ready < bodies.size()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    go = true;
    if (meanwhile) meanwhile();
    for (auto& t : threads) t.join();
    return replies;
  }

  static Model* llm_;
  Metrics metrics_;
  std::unique_ptr<LlmEngine> engine_;
  std::unique_ptr<LlmServer> server_;
  int port_ = 0;
};
Model* OverloadTest::llm_ = nullptr;

TEST_F(OverloadTest, RefusesAtOnceWhatItCannotAnswerInTimeAndAnswersWhatItAdmits) {
  // Each pass takes at least 100 ms and holds 64 tokens: a burst of 16 new conversations of 60
  // tokens needs 16 passes, 1.6 s, and each device waits 1 s, of which a new conversation may
  // use half.
  Start(0.1, 64);
  constexpr int kCalls = 16;
  std::vector<std::string> sessions;
  // Each session first holds 8 tokens (the answer is the 9th, not fed back); the burst's calls
  // keep 4 of them, so an admitted call cuts the session there and a refused one must not.
  const std::vector<int32_t> held = Tokens(8, 100);
  for (int i = 0; i < kCalls; ++i) {
    sessions.push_back(NewSession());
    auto r = Client()->Post("/tlr/v1/next", NextBody(sessions.back(), held, 30000), "application/json");
    ASSERT_TRUE(r && r->status == 200);
  }
  std::vector<std::string> bodies;
  for (int i = 0; i < kCalls; ++i) bodies.push_back(NextBody(sessions[i], Tokens(60, i), 1000, 1, held, 4));
  const std::vector<Reply> wave = Wave(bodies);
  std::vector<int> status(kCalls, 0);
  std::vector<json> replies(kCalls);
  std::vector<std::string> retry_after(kCalls), retry_after_ms(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    const Reply& r = wave[i];
    if (r.status == 0) continue;
    status[i] = r.status;
    replies[i] = json::parse(r.body, nullptr, false);
    retry_after[i] = r.header("Retry-After");
    retry_after_ms[i] = r.header("retry-after-ms");
  }
  int ok = 0, refused = 0;
  for (int i = 0; i < kCalls; ++i) {
    if (status[i] == 200) {
      ++ok;
      EXPECT_EQ(replies[i]["tokens"].size(), 1u);
    } else {
      ASSERT_EQ(status[i], 429) << replies[i].dump();
      ++refused;
      EXPECT_EQ(replies[i]["error"]["code"], "overloaded");
      EXPECT_GT(replies[i]["error"]["retry_after_ms"].get<double>(), 0);
      EXPECT_GE(std::stoi(retry_after[i]), 1);
      EXPECT_GT(std::stoi(retry_after_ms[i]), 0);
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1);
  EXPECT_EQ(Metric("tlr_calls_expired_total") + Metric("tlr_calls_abandoned_total"), 0)
      << "an admitted call was dropped past its deadline";
  EXPECT_EQ(metrics_.Value("tlr_calls_refused_total", {{"class", "cold"}}), refused);
  // A refused call left its session as it was: a call from base 8 is a plain delta (it would get
  // a 409 had the refused call cut the session to 4 tokens).
  for (int i = 0; i < kCalls; ++i) {
    if (status[i] != 429) continue;
    auto r = Client()->Post("/tlr/v1/next", NextBody(sessions[i], {7}, 30000, 1, held, 8), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["timing"]["prefilled"], 1);
  }
  EXPECT_EQ(Metric("tlr_resyncs_total"), 0);
}

TEST_F(OverloadTest, WarmCallsGetInWhereNewConversationsAreRefused) {
  Start(0.1, 64);
  // A session that holds its context.
  const std::string warm = NewSession();
  auto first = Client()->Post("/tlr/v1/next", NextBody(warm, Tokens(40, 0), 30000), "application/json");
  ASSERT_TRUE(first && first->status == 200);
  const std::vector<int32_t> context = Tokens(40, 0);
  // Keep the server busy with new conversations that take most of their share, then ask for one
  // routed token on the warm session (8 new tokens) while they run.
  // 16 of them are ~1.6 s of passes against their 1 s deadline: some are refused however far
  // apart a busy machine lets them arrive (6 were 0.6 s, and spread out all fitted: a flake).
  constexpr int kCold = 16;
  std::vector<std::string> sessions;
  for (int i = 0; i < kCold; ++i) sessions.push_back(NewSession());
  std::vector<int> status(kCold, 0);
  std::vector<std::thread> threads;
  // A wave: every client connected first, then all released at once (on a busy machine, threads
  // that connect as they start send their calls too far apart to queue behind each other).
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  for (int i = 0; i < kCold; ++i) {
    threads.emplace_back([&, i] {
      auto c = Client();
      c->set_keep_alive(true);
      auto warmup = c->Get("/health");
      ++ready;
      while (!go) std::this_thread::yield();
      if (!warmup) {
        status[i] = -1;
        return;
      }
      auto r = c->Post("/tlr/v1/next", NextBody(sessions[i], Tokens(60, i + 1), 1000), "application/json");
      status[i] = r ? r->status : -1;
    });
  }
  while (ready < kCold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  go = true;
  // The wave is in when the server has refused one of it (a fixed sleep was too short on a
  // busy machine, where the threads had not all sent their calls yet).
  for (int i = 0; i < 500 && Metric("tlr_calls_refused_total", {{"class", "cold"}}) < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<int32_t> append = Tokens(8, 99);
  std::vector<int32_t> full = context;
  full.push_back(json::parse(first->body)["tokens"][0].get<int32_t>());
  const int64_t base = static_cast<int64_t>(full.size());
  full.insert(full.end(), append.begin(), append.end());
  json body = {{"session", warm}, {"base", base - 1}, {"prefix_hash", HashHex(TokenPrefixHash(std::span<const int32_t>(full.data(), base - 1)))},
               {"append", std::vector<int32_t>(full.begin() + (base - 1), full.end())}, {"n", 1}, {"timeout_ms", 1000}};
  auto r = Client()->Post("/tlr/v1/next", body.dump(), "application/json");
  for (auto& t : threads) t.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  int cold_refused = 0;
  for (int s : status) cold_refused += s == 429;
  EXPECT_GE(cold_refused, 1);
  EXPECT_EQ(Metric("tlr_calls_expired_total") + Metric("tlr_calls_abandoned_total"), 0);
}

TEST_F(OverloadTest, NewConversationsArePacedWhileTheBusyServerRefusesCalls) {
  // Passes of 64 tokens and at least 0.1 s; new conversations get no share while paced (0), so a
  // paced one is refused whatever the pacer's credit.
  Start(0.1, 64, 0.0);
  constexpr int kWave = 16;
  std::vector<std::string> bodies;
  for (int i = 0; i < kWave; ++i) bodies.push_back(NextBody(NewSession(), Tokens(60, 10 + i), 1000));
  const std::string fresh = NewSession(), busy = NewSession();
  // A long prompt with a minute to go keeps the server busy without a gap: 3600 tokens, 57
  // passes, 5.7 s or more (the calls below have earlier deadlines and go before it).
  std::thread long_call([&] {
    auto r = Client()->Post("/tlr/v1/next", NextBody(busy, Tokens(3600, 1), 60000), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no reply");
  });
  while (metrics_.Histogram("tlr_queue_seconds").count < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // busy for more than a second
  // A wave of 16 new conversations with 1 s each: more than the server can answer in time, so
  // admission refuses some (as in the first test of this file).
  Reply paced;
  double paced_before = 0;
  Wave(bodies, [&] {
    for (int i = 0; i < 2000 && Metric("tlr_calls_refused_total", {{"class", "cold"}}) < 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    // A new conversation with 30 s would fit behind the queue, but the busy server is refusing
    // calls: it is paced (so may the wave's last ones be).
    paced_before = Metric("tlr_new_conversations_paced_total");
    paced = Of(Client()->Post("/tlr/v1/next", NextBody(fresh, Tokens(60, 2), 30000), "application/json"));
  });
  long_call.join();
  EXPECT_GE(Metric("tlr_calls_refused_total", {{"class", "cold"}}), 1);
  ASSERT_EQ(paced.status, 429) << paced.body;
  EXPECT_NE(paced.body.find("new conversations get 0% of its time"), std::string::npos) << paced.body;
  EXPECT_EQ(json::parse(paced.body)["error"]["code"], "overloaded");
  // Share 0 has no credit to wait for: the pacer asks for at most a second (stretched at most
  // 8x while refusals outnumber admissions), since pacing may end sooner.
  EXPECT_LE(json::parse(paced.body)["error"]["retry_after_ms"].get<double>(), 8000);
  EXPECT_GE(Metric("tlr_new_conversations_paced_total"), paced_before + 1);
  // With the refusals over (none for more than a second) the same conversation is admitted.
  const double new_tokens = Metric("tlr_new_conversation_tokens_total");
  auto ok = Client()->Post("/tlr/v1/next", NextBody(fresh, Tokens(60, 2), 30000), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(Metric("tlr_new_conversation_tokens_total"), new_tokens + 60);
  EXPECT_EQ(Metric("tlr_calls_expired_total") + Metric("tlr_calls_abandoned_total"), 0);
}

TEST_F(OverloadTest, APrefillLongerThanItsTimeIsIngestedInPartsAcrossCalls) {
  // Passes of 16 tokens, 0.1 s each: 200 new tokens take 1.3 s, and each call gets 0.6 s.
  Start(0.1, 16);
  const std::string s = NewSession();
  const std::vector<int32_t> prompt = Tokens(200, 3);
  int calls = 0, partial = 0;
  for (; calls < 12; ++calls) {
    auto r = Client()->Post("/tlr/v1/next", NextBody(s, prompt, 600), "application/json");
    ASSERT_TRUE(r);
    if (r->status == 200) break;
    ASSERT_EQ(r->status, 503) << r->body;
    ++partial;
    EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("call again to go on"), std::string::npos) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "prefill_partial");
    EXPECT_FALSE(r->get_header_value("retry-after-ms").empty());
  }
  EXPECT_LT(calls, 12) << "the prompt never got in";
  EXPECT_GE(partial, 1);
  EXPECT_EQ(Metric("tlr_calls_partial_total"), partial);
  // Each part was ingested once: the session went on from what it held.
  EXPECT_EQ(Metric("tlr_prefill_tokens_total"), 200);
  EXPECT_EQ(Metric("tlr_calls_expired_total") + Metric("tlr_calls_abandoned_total"), 0);
}

TEST_F(OverloadTest, OpenAiRequestsTakeTheirDeadlineFromHeadersAndAreAnsweredBeforeAStreamStarts) {
  Start(0.1, 64);  // every pass at least 0.1 s
  json body = {{"prompt", Tokens(8, 5)}, {"max_tokens", 5}};
  auto c = Client();
  // Five tokens take five passes: not within 300 ms, and waiting cannot help (400).
  auto r = c->Post("/v1/completions", {{"X-TLR-Timeout-Ms", "300"}}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("even when idle"), std::string::npos) << r->body;
  // The OpenAI SDKs' own header (seconds) is honoured; a malformed one is ignored, ours is not.
  r = c->Post("/v1/completions", {{"X-Stainless-Timeout", "0.3"}}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  r = c->Post("/v1/completions", {{"X-Stainless-Timeout", "soon"}}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  r = c->Post("/v1/completions", {{"X-TLR-Timeout-Ms", "soon"}}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("X-TLR-Timeout-Ms"), std::string::npos) << r->body;
  // Streamed, the deadline bounds the first token: 300 ms are enough...
  body["stream"] = true;
  r = c->Post("/v1/completions", {{"X-TLR-Timeout-Ms", "300"}}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
  // ...50 ms are not: the answer is a status and a JSON error, not a stream.
  r = c->Post("/v1/completions", {{"X-TLR-Timeout-Ms", "50"}}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
}

TEST_F(OverloadTest, ARequestWhoseClientClosedIsDroppedBeforeItRuns) {
  // Passes of 0.5 s: a long generation keeps the model busy while a second request arrives and
  // its client goes away.
  Start(0.5, 512);
  const std::string busy = NewSession(), gone = NewSession();
  std::thread long_call([&] {
    auto r = Client()->Post("/tlr/v1/next", NextBody(busy, Tokens(8, 1), 30000, 8), "application/json");
    EXPECT_TRUE(r && r->status == 200);
  });
  // Its first pass is under way (8 passes of 0.5 s in all).
  while (metrics_.Histogram("tlr_queue_seconds").count < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(std::chrono::milliseconds(100));  // gives up and closes the connection
    auto r = c.Post("/tlr/v1/next", NextBody(gone, Tokens(9, 2), 30000), "application/json");
    EXPECT_FALSE(r);
  }
  long_call.join();
  for (int i = 0; i < 100 && Metric("tlr_calls_cancelled_total") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Metric("tlr_calls_cancelled_total"), 1);
  // Its 9 tokens were never prefilled: only the long call's 8 were.
  EXPECT_EQ(Metric("tlr_prefill_tokens_total"), 8);
}

}  // namespace
}  // namespace tlr
