// The device's remote backends against a hostile LLM server: a real HTTP server on loopback
// (cpp-httplib) answers with each malformed or abusive reply shape. Every one must be a failed
// call with a message (the decoder then uses FALLBACK and generation goes on), never an abort;
// replies naming ids outside the vocabulary are refused; a trickled, endless or huge reply
// fails at the deadline or the size cap. Connect-time replies (model list, info) that are
// malformed make Connect return an error.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "device/decode/decoder.h"
#include "device/labels/remote_label_llm.h"
#include "device/remote/remote_llm.h"
#include "net/protocol.h"
#include "ops/thread_pool.h"
#include "routing/router.h"
#include "util/test_support.h"

namespace tlr {
namespace {

using nlohmann::json;


// The answer the fake server gives to one endpoint.
struct Answer {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

class FakeServer {
 public:
  FakeServer() {
    http_.new_task_queue = [] { return new httplib::ThreadPool(8); };
    auto route = [this](const httplib::Request& req, httplib::Response& res) {
      std::function<void(httplib::Response&)> special;
      Answer a;
      {
        std::lock_guard<std::mutex> l(mu_);
        last_body_[req.path] = req.body;
        auto it = answers_.find(req.path);
        if (it == answers_.end()) {
          res.status = 404;
          return;
        }
        a = it->second;
        auto s = special_.find(req.path);
        if (s != special_.end()) special = s->second;
      }
      if (special) return special(res);
      res.status = a.status;
      res.set_content(a.body, a.content_type);
    };
    http_.Get(".*", route);
    http_.Post(".*", route);
    http_.Delete(".*", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~FakeServer() {
    stopping_ = true;
    http_.stop();
    thread_.join();
  }
  void Set(const std::string& path, Answer a) {
    std::lock_guard<std::mutex> l(mu_);
    answers_[path] = std::move(a);
    special_.erase(path);
  }
  // A response written by `fn` (chunked providers, trickles).
  void SetSpecial(const std::string& path, std::function<void(httplib::Response&)> fn) {
    std::lock_guard<std::mutex> l(mu_);
    answers_[path] = Answer{};
    special_[path] = std::move(fn);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string LastBody(const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    return last_body_[path];
  }
  std::atomic<bool> stopping_{false};

 private:
  httplib::Server http_;
  std::mutex mu_;
  std::map<std::string, Answer> answers_;
  std::map<std::string, std::function<void(httplib::Response&)>> special_;
  std::map<std::string, std::string> last_body_;  // each path's latest request
  int port_ = 0;
  std::thread thread_;
};

class RemoteHostileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { slm_ = Model::Load(kDemo + "slm.gguf")->release(); }
  static void TearDownTestSuite() { delete slm_; }
  const Tokenizer& vocab() const { return slm_->tokenizer(); }
  std::string Fp() const { return HashHex(vocab().Fingerprint()); }

  // A server that is healthy at connect time for `protocol`.
  void Healthy(const std::string& protocol) {
    if (protocol == "tlr") {
      server_.Set("/tlr/v1/info", {200, R"({"vocab_fingerprint":")" + Fp() + R"("})"});
      server_.Set("/tlr/v1/sessions", {201, R"({"session":"s1","vocab_fingerprint":")" + Fp() + R"("})"});
    } else {
      server_.Set("/v1/models", {200, R"({"data":[{"id":"m","tlr_vocab_fingerprint":")" + Fp() + R"("}]})"});
    }
  }
  Expected<std::unique_ptr<RemoteLlm>> Connect(const std::string& protocol, double timeout_s = 5,
                                               bool require_reachable = false) {
    RemoteOptions o;
    o.require_reachable = require_reachable;
    o.http.url = server_.url();
    o.http.timeout_s = timeout_s;
    o.http.retries = 0;
    o.http.max_reply_bytes = 1 << 20;
    o.retry_after_s = 0;  // every call reaches the server
    o.protocol = *ParseRemoteProtocol(protocol);
    return RemoteLlm::Connect(o, vocab());
  }
  // One call; its error message (empty when it succeeded).
  std::string CallError(RemoteLlm* llm) {
    LlmRequest req;
    req.context = vocab().Encode("The capital of France is");
    req.n = 1;
    req.lookahead = 2;
    auto call = llm->Submit(req, nullptr);
    const Expected<LlmReply>& r = call->Wait();
    return r.ok() ? "" : r.status().message();
  }
  // A routed generation over `llm`: every routed token must be FALLBACK, and it ends normally.
  void GenerationFallsBack(RemoteLlm* llm) {
    ThreadPool pool(1);
    auto router = Router::LoadOrBuiltin("maxprob");
    ASSERT_TRUE(router.ok());
    CollabDecoder dec(*slm_, &*router, llm, &pool);
    DecodeOptions d;
    d.threshold = 2.0f;  // route every token
    d.max_tokens = 4;
    std::string first_error;
    auto st = dec.Generate(vocab().Encode("Hello"), d, [&](const TokenEvent& ev) {
      EXPECT_EQ(ev.source, TokenSource::kFallback);
      if (first_error.empty()) first_error = ev.llm_error;
      return true;
    });
    ASSERT_TRUE(st.ok()) << st.status().message();
    EXPECT_EQ(st->fallbacks, st->generated);
    EXPECT_FALSE(first_error.empty());
  }

  static Model* slm_;
  FakeServer server_;
};
Model* RemoteHostileTest::slm_ = nullptr;

TEST_F(RemoteHostileTest, NativeRepliesOfEveryBadShapeFailTheCall) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<Answer> shapes = {
      {200, R"({"tokens":null})"}, {200, R"({"tokens":"abc"})"}, {200, R"({"tokens":[1.5]})"},
      {200, R"({"tokens":[99999999]})"}, {200, R"({"tokens":[-1]})"}, {200, R"({"tokens":[]})"},
      {200, R"({"tokens":[1],"lookahead":"x"})"}, {200, R"({"tokens":[1],"lookahead":[1e9]})"},
      {200, R"({"tokens":[1],"logprobs":[{}]})"}, {200, R"({"tokens":[1],"position":"x"})"},
      {200, R"({"tokens":[1],"version":1.5})"}, {200, R"([])"}, {200, R"("tokens")"}, {200, "not json"},
      {200, R"({"tokens":)" + deep + "}"}, {200, "{\"tokens\":[1],\"x\":\"\xff\"}\xff"},
      {409, R"({"held":"x"})"}, {409, R"({"held":1,"held_hash":5})"}, {409, R"([1])"}, {409, R"({"version":"v"})"},
      {500, R"({"error":"x"})"}, {400, R"({"error":{"message":5}})"}, {400, "\xff\xfe"},
  };
  Healthy("tlr");
  auto llm = Connect("tlr");
  ASSERT_TRUE(llm.ok()) << llm.status().message();
  for (const Answer& a : shapes) {
    server_.Set("/tlr/v1/next", a);
    const std::string err = CallError(llm->get());
    EXPECT_FALSE(err.empty()) << a.status << " " << a.body.substr(0, 80);
  }
  EXPECT_EQ((*llm)->stats().failed_calls, static_cast<int64_t>(shapes.size()));
  server_.Set("/tlr/v1/next", {200, R"({"tokens":[99999999]})"});
  EXPECT_NE(CallError(llm->get()).find("outside the vocabulary"), std::string::npos);
  GenerationFallsBack(llm->get());
  EXPECT_NE((*llm)->stats().FailureSummary().find("malformed replies: "), std::string::npos)
      << (*llm)->stats().FailureSummary();
}

// A call the device gives up on after sending it (the pipeline cancels a call a draft answered;
// a timeout) may still run on the server and rewind the session to its context: a load balancer
// does not pass the closed connection on, and the server may have started it. Until the server
// would have dropped it, later calls take their base within its context too, or the server
// answers 409 and the device resyncs (a round trip; failover_test saw 3 under load).
// (A proxy's 502/504 after the retries counts as no reply: the backend may be running it.)
TEST_F(RemoteHostileTest, ACallGivenUpOnBoundsLaterBasesUntilItsDeadline) {
  Healthy("tlr");
  auto llm = Connect("tlr", 1.0);
  ASSERT_TRUE(llm.ok()) << llm.status().message();
  auto call = [&](std::vector<int32_t> context) {
    LlmRequest req;
    req.context = std::move(context);
    req.n = 1;
    return (*llm)->Submit(req, nullptr);
  };
  auto base_sent = [&] { return json::parse(server_.LastBody("/tlr/v1/next")).value("base", -1); };
  // The session holds 1 2 3 4 5 6 (the reply 5, the lookahead 6 fed back).
  server_.Set("/tlr/v1/next", {200, R"({"tokens":[5],"lookahead":[6],"position":6,"version":1})"});
  ASSERT_TRUE(call({1, 2, 3, 4})->Wait().ok());
  // A call parting from it at position 4, answered late; the device gives up on it.
  server_.SetSpecial("/tlr/v1/next", [this](httplib::Response& res) {
    for (int i = 0; i < 30 && !server_.stopping_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    res.set_content(R"({"tokens":[5],"position":6,"version":2})", "application/json");
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto given_up = call({1, 2, 3, 4, 9});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  given_up->Cancel();
  EXPECT_FALSE(given_up->Wait().ok());
  server_.Set("/tlr/v1/next", {200, R"({"tokens":[8],"position":7,"version":3})"});
  ASSERT_TRUE(call({1, 2, 3, 4, 5, 6, 7})->Wait().ok());
  EXPECT_EQ(base_sent(), 4) << "the session may hold 1 2 3 4 9 by now";
  // Past its deadline (1 s), the time its last retry could still take there (its 1 s timeout)
  // and a margin, the server cannot run it any more. It may have run before that, after the
  // last reply: the next base stays within both once more, then the replies rule again.
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(3300));
  server_.Set("/tlr/v1/next", {200, R"({"tokens":[10],"position":9,"version":4})"});
  ASSERT_TRUE(call({1, 2, 3, 4, 5, 6, 7, 8, 9})->Wait().ok());
  EXPECT_EQ(base_sent(), 4);
  server_.Set("/tlr/v1/next", {200, R"({"tokens":[12],"position":11,"version":5})"});
  ASSERT_TRUE(call({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})->Wait().ok());
  EXPECT_EQ(base_sent(), 9) << "what the last reply left: 1 .. 9";
}

TEST_F(RemoteHostileTest, SessionAndInfoRepliesOfBadShapeAreErrorsOrFallBack) {
  Healthy("tlr");
  for (const std::string& body : std::vector<std::string>{R"({"session":5})", R"({"session":"s"})", R"({"session":null})", R"([1])",
                                  R"({"session":"","vocab_fingerprint":")" + Fp() + R"("})"}) {
    server_.Set("/tlr/v1/sessions", {201, body});
    auto llm = Connect("tlr");
    ASSERT_TRUE(llm.ok()) << llm.status().message();  // the session is retried by the first call
    EXPECT_FALSE(CallError(llm->get()).empty()) << body;
  }
  for (const std::string& body : std::vector<std::string>{R"({"vocab_fingerprint":5})", R"([1])", "nope", R"({"vocab_fingerprint":[]})"}) {
    server_.Set("/tlr/v1/info", {200, body});
    // The command line was asked to use this server: an error. An app (which may start offline,
    // behind a captive portal) answers with the SLM, saying why.
    EXPECT_FALSE(Connect("tlr", 5, true).ok()) << body;
    auto llm = Connect("tlr");
    ASSERT_TRUE(llm.ok()) << body;
    EXPECT_NE((*llm)->warning().find("not reachable now"), std::string::npos) << (*llm)->warning();
  }
}

TEST_F(RemoteHostileTest, OpenAiRepliesOfEveryBadShapeFailTheCall) {
  const std::vector<Answer> shapes = {
      {200, R"({"choices":[{"text":null}]})"}, {200, R"({"choices":"x"})"}, {200, R"({"choices":[]})"},
      {200, R"({"choices":[5]})"}, {200, R"({"choices":[{"text":5}]})"}, {200, R"({})"},
      {200, R"({"choices":[{"text":"a","logprobs":{"tokens":"x"}}]})"},
      {200, R"({"choices":[{"text":"a","logprobs":{"tokens":["token_id:abc"]}}]})"},
      {200, R"({"choices":[{"text":"a","logprobs":{"tokens":["token_id:99999999"]}}]})"},
      {200, R"({"choices":[{"text":"a","logprobs":{"tokens":["token_id:-3"]}}]})"},
      {200, R"({"choices":[{"text":"a","logprobs":{"tokens":[7]}}]})"},
      {200, R"({"choices":[{"text":"a","logprobs":{"token_logprobs":["x"]}}]})"},
      {200, R"({"choices":[{"text":"a","logprobs":5}]})"},
      {200, R"({"choices":[{"text":"a","finish_reason":5}]})"},
      {200, R"({"choices":[{"text":"a"}],"tlr":{"token_ids":[-5]}})"},
      {200, R"({"choices":[{"text":"a"}],"tlr":{"token_ids":"x"}})"}, {200, R"({"choices":[{"text":"a"}],"tlr":5})"},
      {200, "data: {\"choices\":[{\"text\":null}]}\n\ndata: [DONE]\n\n", "text/event-stream"},
      {200, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {oops\n\n", "text/event-stream"},
      {200, "data: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: [DONE]\n\n", "text/event-stream"},
      {200, "data: [DONE]\n\n", "text/event-stream"},
      {500, R"({"error":null})"},
  };
  Healthy("openai");
  auto llm = Connect("openai");
  ASSERT_TRUE(llm.ok()) << llm.status().message();
  for (const Answer& a : shapes) {
    server_.Set("/v1/completions", a);
    EXPECT_FALSE(CallError(llm->get()).empty()) << a.status << " " << a.body;
  }
  server_.Set("/v1/completions", {200, R"({"choices":[{"text":"a","logprobs":{"tokens":["token_id:abc"]}}]})"});
  EXPECT_NE(CallError(llm->get()).find("is not a token id"), std::string::npos);
  GenerationFallsBack(llm->get());

  // Well-formed replies still work: ids, labels, text, and a stream.
  server_.Set("/v1/completions", {200, R"({"choices":[{"text":"","logprobs":{"tokens":["token_id:5","token_id:6"]}}]})"});
  EXPECT_EQ(CallError(llm->get()), "");
  server_.Set("/v1/completions", {200, "data: {\"choices\":[{\"text\":\" Paris\"}]}\n\ndata: [DONE]\n\n",
                                  "text/event-stream"});
  EXPECT_EQ(CallError(llm->get()), "");
}

TEST_F(RemoteHostileTest, ModelListsOfBadShapeAreConnectErrorsOrFallBack) {
  for (const std::string& body : std::vector<std::string>{R"({"data":null})", R"({"data":[5]})", R"({"data":[{"id":5}]})", R"({"data":[{"id":"m","tlr_vocab_fingerprint":5}]})",
        R"([])", R"({"data":"x"})", R"({"data":[]})", "\xff"}) {
    server_.Set("/v1/models", {200, body});
    EXPECT_FALSE(Connect("openai", 5, true).ok()) << body;
    auto llm = Connect("openai");
    ASSERT_TRUE(llm.ok()) << body;
    EXPECT_NE((*llm)->warning().find("not reachable now"), std::string::npos) << (*llm)->warning();
  }
}

// --llm-timeout is a deadline for the whole call: a reply trickled a byte at a time, or a
// chunked reply that never ends, fails when it passes; a huge reply fails at the size cap
// without being held in memory.
TEST_F(RemoteHostileTest, TrickledEndlessAndHugeRepliesFailAtTheDeadlineOrCap) {
  Healthy("tlr");
  auto llm = Connect("tlr", /*timeout_s=*/1.0);
  ASSERT_TRUE(llm.ok()) << llm.status().message();
  std::atomic<bool>* stopping = &server_.stopping_;
  // One byte every 0.4 s: each read is quick, the whole reply never is.
  server_.SetSpecial("/tlr/v1/next", [stopping](httplib::Response& res) {
    res.set_chunked_content_provider("application/json", [stopping](size_t, httplib::DataSink& sink) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      return !stopping->load() && sink.write(" ", 1);
    });
  });
  std::string err = CallError(llm->get());
  EXPECT_NE(err.find("no complete reply within"), std::string::npos) << err;
  // An endless stream of chunks, fast.
  server_.SetSpecial("/tlr/v1/next", [stopping](httplib::Response& res) {
    res.set_chunked_content_provider("application/json", [stopping](size_t, httplib::DataSink& sink) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return !stopping->load() && sink.write("[[[[", 4);
    });
  });
  err = CallError(llm->get());
  EXPECT_NE(err.find("no complete reply within"), std::string::npos) << err;
  // 300 MB announced and sent as fast as possible: refused at the 1 MiB cap.
  server_.SetSpecial("/tlr/v1/next", [stopping](httplib::Response& res) {
    res.set_content_provider(size_t{300} << 20, "application/json",
                             [stopping](size_t offset, size_t length, httplib::DataSink& sink) {
                               static const std::string block(64 << 10, ' ');
                               return !stopping->load() && sink.write(block.data(), std::min(length, block.size()));
                             });
  });
  err = CallError(llm->get());
  EXPECT_NE(err.find("larger than the 1024 KiB limit"), std::string::npos) << err;
  const RemoteStats st = (*llm)->stats();
  EXPECT_EQ(st.failures[static_cast<int>(CallFailure::kTimeout)], 2);
  EXPECT_NE(st.FailureSummary().find("2 timeouts, 1 malformed reply: "), std::string::npos) << st.FailureSummary();
}

// Router training's label client (remote_label_llm.h) against the same hostile server: every
// malformed, truncated or mismatched reply to a scoring or prompt_logprobs request is an error
// naming the server and what was wrong; another vocabulary fails at connect.
TEST_F(RemoteHostileTest, LabelRepliesOfEveryBadShapeAreErrors) {
  auto connect = [&](const std::string& protocol) {
    RemoteOptions o;
    o.http.url = server_.url();
    o.http.timeout_s = 5;
    o.http.retries = 0;
    o.protocol = *ParseRemoteProtocol(protocol);
    return RemoteLabelLlm::Connect(o, vocab());
  };
  const std::vector<std::vector<int32_t>> seqs = {{5, 6, 7}};
  Healthy("tlr");
  auto native = connect("tlr");
  ASSERT_TRUE(native.ok()) << native.status().message();
  const std::vector<std::pair<std::string, std::string>> score_cases = {
      {R"({"results":[{"argmax":[1,2,3]}]})", ""},
      {R"({"results":[{"argmax":[1,2]}]})", "2 predictions for a sequence of 3 tokens"},
      {R"({"results":[{"argmax":[1,2,99999999]}]})", "outside"},
      {R"({"results":[{"argmax":[1,2,3]},{"argmax":[1]}]})", "2 results for 1 sequences"},
      {R"({"results":[{"argmax":[1,2,)", "score reply is"},
      {R"({"results":"x"})", "no 'results' array"},
      {R"(<html>oops</html>)", "score reply is"},
  };
  for (const auto& [body, want] : score_cases) {
    server_.Set("/tlr/v1/score", {200, body});
    auto r = (*native)->Predict(seqs);
    if (want.empty()) {
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ((*r)[0], (std::vector<int32_t>{1, 2, 3}));
      continue;
    }
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << body << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find(server_.url()), std::string::npos) << r.status().message();
  }
  // A refusal that says when to come back is waited out (one would end a labelling run of hours).
  std::atomic<int> refusals{0};
  server_.SetSpecial("/tlr/v1/score", [&](httplib::Response& res) {
    if (refusals++ < 2) {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_header("retry-after-ms", "50");
      res.set_content(R"({"error":{"code":"overloaded","message":"the KV budget is full"}})", "application/json");
      return;
    }
    res.set_content(R"({"results":[{"argmax":[1,2,3]}]})", "application/json");
  });
  auto waited = (*native)->Predict(seqs);
  ASSERT_TRUE(waited.ok()) << waited.status().message();
  EXPECT_EQ(refusals.load(), 3);
  server_.Set("/tlr/v1/score", {500, R"({"error":{"message":"boom"}})"});
  auto failed = (*native)->Predict(seqs);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("answered 500"), std::string::npos) << failed.status().message();

  Healthy("openai");
  auto openai = connect("openai");
  ASSERT_TRUE(openai.ok()) << openai.status().message();
  const std::string gen = R"("text":"x","logprobs":{"tokens":["token_id:9"]},"finish_reason":"length")";
  const std::vector<std::pair<std::string, std::string>> pl_cases = {
      {R"({"choices":[{)" + gen + R"(,"prompt_logprobs":[null,{"4":{"logprob":0,"rank":1}},{"8":{"logprob":0,"rank":1}}]}]})", ""},
      {R"({"choices":[{)" + gen + R"(,"prompt_logprobs":[null,{"4":{"logprob":0,"rank":1}}]}]})", "2 entries for a prompt of 3"},
      {R"({"choices":[{)" + gen + R"(,"prompt_logprobs":[null,{"4":{"logprob":0,"rank":2}},{"8":{"logprob":0,"rank":1}}]}]})", "no rank-1 entry"},
      {R"({"choices":[{)" + gen + R"(,"prompt_logprobs":[null,{"-4":{"logprob":0,"rank":1}},{"8":{"logprob":0,"rank":1}}]}]})", "not an id"},
      {R"({"choices":[{)" + gen + R"(}]})", "no 'prompt_logprobs'"},
      {R"({"choices":[{)" + gen + R"(,"prompt_logprobs":[null,{"4":{"logpr)", "completion reply is"},
  };
  for (const auto& [body, want] : pl_cases) {
    server_.Set("/v1/completions", {200, body});
    auto r = (*openai)->Predict(seqs);
    if (want.empty()) {
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ((*r)[0], (std::vector<int32_t>{4, 8, 9}));
      continue;
    }
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << body << " -> " << r.status().message();
  }
  // Another vocabulary: refused at connect.
  server_.Set("/tlr/v1/info", {200, R"({"vocab_fingerprint":"0000000000000000"})"});
  auto other = connect("tlr");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("different vocabulary"), std::string::npos) << other.status().message();
}

}  // namespace
}  // namespace tlr

namespace tlr {
namespace {

// A server shedding load: the call fails at once (FALLBACK) and the device does not call again
// before the Retry-After (retry-after-ms first), stretched by at most half and 20 ms of jitter.
// (The windows are checked against their bounds, not timed.)
TEST_F(RemoteHostileTest, RefusalsWithRetryAfterAreWaitedOut) {
  for (const std::string protocol : {"tlr", "openai"}) {
    SCOPED_TRACE(protocol);
    const std::string path = protocol == "tlr" ? "/tlr/v1/next" : "/v1/completions";
    std::atomic<int> hits{0};
    std::atomic<int> status{429};
    std::atomic<bool> with_ms{true};
    server_.SetSpecial(path, [&](httplib::Response& res) {
      ++hits;
      res.status = status.load();
      res.set_header("Retry-After", "1");
      if (with_ms) res.set_header("retry-after-ms", "1000");
      res.set_content(R"({"error":{"code":"overloaded","message":"the server is overloaded: busy"}})", "application/json");
    });
    Healthy(protocol);
    auto llm = Connect(protocol);
    ASSERT_TRUE(llm.ok()) << llm.status().message();
    RemoteLlm* r = llm->get();
    EXPECT_NE(CallError(r).find("overloaded"), std::string::npos);
    EXPECT_EQ(hits.load(), 1);
    EXPECT_EQ(r->stats().failures[static_cast<int>(CallFailure::kRefused)], 1);
    const double wait = r->deferred_s();
    EXPECT_GT(wait, 0);
    EXPECT_LE(wait, 1.0 * 1.5 + 0.02 + 1e-3);
    // Calls before the Retry-After do not reach the server: every routed token is the SLM's.
    GenerationFallsBack(r);
    EXPECT_EQ(hits.load(), 1);
    EXPECT_GE(r->stats().failures[static_cast<int>(CallFailure::kDeferred)], 1);
    EXPECT_NE(r->stats().FailureSummary().find("refused (server overloaded)"), std::string::npos)
        << r->stats().FailureSummary();
    // After it, the server is asked again.
    std::this_thread::sleep_for(std::chrono::duration<double>(r->deferred_s() + 0.01));
    EXPECT_FALSE(CallError(r).empty());
    EXPECT_EQ(hits.load(), 2);
    EXPECT_GT(r->deferred_s(), 0);
    EXPECT_LE(r->deferred_s(), 1.5 + 0.02 + 1e-3);
    // Retry-After alone (whole seconds), and a 503 with one: the same (a new device).
    with_ms = false;
    status = 503;
    auto fresh = Connect(protocol);
    ASSERT_TRUE(fresh.ok()) << fresh.status().message();
    EXPECT_FALSE(CallError(fresh->get()).empty());
    EXPECT_EQ((*fresh)->stats().failures[static_cast<int>(CallFailure::kRefused)], 1);
    EXPECT_GT((*fresh)->deferred_s(), 0);
    EXPECT_LE((*fresh)->deferred_s(), 1.52 + 1e-3);
    EXPECT_EQ((*fresh)->stats().failures[static_cast<int>(CallFailure::kServerError)], 0);
  }
}

// A new session refused by the client's quota (429 session_quota) is told apart from overload:
// its own failure kind and message, the Retry-After waited out all the same.
TEST_F(RemoteHostileTest, SessionQuotaRefusalIsNotOverload) {
  Healthy("tlr");
  server_.SetSpecial("/tlr/v1/sessions", [](httplib::Response& res) {
    res.status = 429;
    res.set_header("Retry-After", "1");
    res.set_content(R"j({"error":{"code":"session_quota","message":"this client (k) already holds 2 open sessions, )j"
                    R"j(its quota (--session-quota)"}})j",
                    "application/json");
  });
  auto llm = Connect("tlr");
  ASSERT_TRUE(llm.ok()) << llm.status().message();
  RemoteLlm* r = llm->get();
  const std::string e = CallError(r);
  EXPECT_NE(e.find("refused a new session (429 session_quota"), std::string::npos) << e;
  EXPECT_EQ(e.find("overloaded"), std::string::npos) << e;
  EXPECT_EQ(r->stats().failures[static_cast<int>(CallFailure::kQuota)], 1);
  EXPECT_EQ(r->stats().failures[static_cast<int>(CallFailure::kRefused)], 0);
  EXPECT_NE(r->stats().FailureSummary().find("refused (this client's session quota)"), std::string::npos)
      << r->stats().FailureSummary();
  EXPECT_GT(r->deferred_s(), 0);
  EXPECT_LE(r->deferred_s(), 1.5 + 0.02 + 1e-3);
}

TEST(RetryAfter, HeaderValues) {
  EXPECT_DOUBLE_EQ(ParseRetryAfter("250", "3"), 0.25);
  EXPECT_DOUBLE_EQ(ParseRetryAfter("", "3"), 3.0);
  EXPECT_DOUBLE_EQ(ParseRetryAfter("x", "2"), 2.0);
  EXPECT_DOUBLE_EQ(ParseRetryAfter("", "Wed, 21 Oct 2015 07:28:00 GMT"), -1);
  EXPECT_DOUBLE_EQ(ParseRetryAfter("", ""), -1);
  EXPECT_DOUBLE_EQ(ParseRetryAfter("-5", "-1"), -1);
}

}  // namespace
}  // namespace tlr
