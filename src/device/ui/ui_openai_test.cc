// The device's routed OpenAI-compatible API (label server): a real DeviceServer on a loopback port
// with the bundled demo pair in process. A conversation's next turn reuses its cached prefix and
// gives the tokens a fresh server gives; bad input is a 4xx and the next request is served; the
// queue is bounded (429 with Retry-After) and a client that goes away leaves it; two clients
// streaming at once get what each gets alone; keys guard the API; headless serves no page.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "device/decode/token_json.h"
#include "device/ui/device_server.h"
#include "ops/thread_pool.h"
#include "device/ui/ui_test_support.h"
#include "routing/router.h"
#include "util/test_support.h"

namespace tlr {
namespace {

using nlohmann::json;

struct Reply {
  int status = -1;  // -1: no reply
  std::string body, retry_after;
  json j;
};

class UiOpenAiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    slm_ = Model::Load(kDemo + "slm.gguf")->release();
    llm_ = new LlmTarget;
    llm_->model = std::move(Model::Load(kDemo + "llm.gguf")).value();
    slow_llm_ = new LlmTarget;
    slow_llm_->model = llm_->model;
    slow_llm_->config.sim_rtt_s = 0.15;  // every LLM call takes 150 ms more
  }
  static void TearDownTestSuite() {
    delete slm_;
    delete llm_;
    delete slow_llm_;
  }
  std::unique_ptr<DeviceServer> Start(DeviceServerOptions o, const LlmTarget* llm = nullptr, int kv_slots = 4) {
    DeviceServerModels m;
    m.slm = slm_;
    m.llm = llm ? llm : llm_;
    // A router per server: its scratch buffers serve one generation at a time.
    routers_.push_back(std::make_unique<Router>(std::move(Router::Load(kDemo + "router.gguf")).value()));
    m.routers.push_back({"citer", "citer (test)", routers_.back().get()});
    m.pool = &pool_;
    m.n_ctx = 512;
    m.sampling.temperature = 0;
    m.prompt_cache.max_slots = kv_slots;
    m.prompt_cache.n_ctx = 512;
    o.port = 0;
    o.assets = kTestAssets;
    auto ui = std::make_unique<DeviceServer>(std::move(m), std::move(o));
    Status s = ui->Start();
    EXPECT_TRUE(s.ok()) << s.message();
    return ui;
  }
  static Reply Post(int port, const std::string& path, const std::string& body, const std::string& key = "",
                    const std::string& type = "application/json") {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120);
    c.set_write_timeout(60);
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    Reply r;
    auto res = c.Post(path.c_str(), h, body, type.c_str());
    if (!res) return r;
    r.status = res->status;
    r.body = res->body;
    r.retry_after = res->get_header_value("Retry-After");
    r.j = json::parse(res->body, nullptr, false);
    return r;
  }
  static json Chat(const json& messages, int max_tokens, const json& extra = json::object()) {
    json b = {{"model", "tlr"}, {"messages", messages}, {"max_tokens", max_tokens}};
    b.update(extra);
    return b;
  }
  // The (id, source) pairs of a non-streamed reply's tokens.
  static std::vector<std::pair<int, std::string>> Tokens(const json& reply) {
    std::vector<std::pair<int, std::string>> out;
    for (const json& t : reply["choices"][0]["tlr"]["tokens"]) out.emplace_back(t["id"].get<int>(), t["source"].get<std::string>());
    return out;
  }
  // Streamed: the concatenated content, the tokens and the usage chunk.
  struct Streamed {
    std::string content;
    std::vector<std::pair<int, std::string>> tokens;
    json usage;
    bool done = false;
  };
  static Streamed ParseStream(const std::string& body) {
    Streamed s;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
      const size_t end = body.find("\n\n", at);
      const std::string data = body.substr(at + 6, end - at - 6);
      at = end;
      if (data == "[DONE]") {
        s.done = true;
        continue;
      }
      const json c = json::parse(data);
      if (c.contains("usage")) s.usage = c["usage"];
      if (c["choices"].empty()) continue;
      const json& ch = c["choices"][0];
      if (ch["delta"].contains("content")) s.content += ch["delta"]["content"].get<std::string>();
      if (ch.contains("tlr")) {
        for (const json& t : ch["tlr"]["tokens"]) s.tokens.emplace_back(t["id"].get<int>(), t["source"].get<std::string>());
      }
    }
    return s;
  }

  static Model* slm_;
  static LlmTarget *llm_, *slow_llm_;
  std::vector<std::unique_ptr<Router>> routers_;  // before the servers: destroyed after them
  ThreadPool pool_{1};
};
Model* UiOpenAiTest::slm_ = nullptr;
LlmTarget* UiOpenAiTest::llm_ = nullptr;
LlmTarget* UiOpenAiTest::slow_llm_ = nullptr;

const json kTurn1 = json::array({{{"role", "user"}, {"content", "What would you use a tharko for?"}}});

TEST_F(UiOpenAiTest, NextTurnReusesTheConversationAndGivesTheSameTokens) {
  auto ui = Start({});
  Reply a = Post(ui->port(), "/v1/chat/completions", Chat(kTurn1, 12).dump());
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j["object"], "chat.completion");
  const json& u1 = a.j["usage"];
  EXPECT_EQ(u1["completion_tokens"].get<size_t>(), Tokens(a.j).size());
  EXPECT_EQ(u1["prompt_tokens_details"]["cached_tokens"], 0);
  // usage.tlr: the one statistics schema (DecodeStatsJson), agreeing with the reply's tokens.
  const nlohmann::json schema = DecodeStatsJson(DecodeStats{});
  for (const auto& [k, v] : schema.items()) EXPECT_TRUE(u1["tlr"].contains(k)) << k;
  EXPECT_EQ(u1["tlr"]["generated"], u1["completion_tokens"]);
  int64_t from_llm = 0;
  for (const auto& [id, source] : Tokens(a.j)) from_llm += source == "LLM";
  EXPECT_EQ(u1["tlr"]["routed"].get<int64_t>(), from_llm);
  json turn2 = kTurn1;
  turn2.push_back({{"role", "assistant"}, {"content", a.j["choices"][0]["message"]["content"]}});
  turn2.push_back({{"role", "user"}, {"content", "Where do you keep a tharko?"}});
  Reply b = Post(ui->port(), "/v1/chat/completions", Chat(turn2, 12, {{"stream", true}, {"stream_options", {{"include_usage", true}}}}).dump());
  ASSERT_EQ(b.status, 200) << b.body;
  const Streamed s = ParseStream(b.body);
  ASSERT_TRUE(s.done && s.usage.is_object()) << b.body;
  const int64_t previous = u1["prompt_tokens"].get<int64_t>() + u1["completion_tokens"].get<int64_t>();
  EXPECT_GE(s.usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), previous - 4) << s.usage.dump();
  EXPECT_EQ(s.usage["completion_tokens"].get<size_t>(), s.tokens.size());
  // The same turn on a server that keeps nothing: the same tokens from the same sources.
  auto fresh = Start({}, nullptr, /*kv_slots=*/0);
  Reply c = Post(fresh->port(), "/v1/chat/completions", Chat(turn2, 12).dump());
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(Tokens(c.j), s.tokens);
  EXPECT_EQ(c.j["choices"][0]["message"]["content"], s.content);
}

// Sampling above temperature 0 without a seed in the request: each request draws its own (a
// client's "regenerate" gets another answer); the same seed gives the same answer.
TEST_F(UiOpenAiTest, EachRequestWithoutASeedSamplesAfresh) {
  auto ui = Start({});
  const json hot = {{"temperature", 2.0}, {"routing", {{"mode", "small_only"}}}};
  std::set<std::string> answers;
  for (int i = 0; i < 3; ++i) {
    Reply r = Post(ui->port(), "/v1/chat/completions", Chat(kTurn1, 16, hot).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    answers.insert(r.j["choices"][0]["message"]["content"].get<std::string>());
  }
  EXPECT_GT(answers.size(), 1u) << "three unseeded samples at temperature 2 gave one answer";
  json seeded = hot;
  seeded["seed"] = 5;
  Reply a = Post(ui->port(), "/v1/chat/completions", Chat(kTurn1, 16, seeded).dump());
  Reply b = Post(ui->port(), "/v1/chat/completions", Chat(kTurn1, 16, seeded).dump());
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.j["choices"][0]["message"]["content"], b.j["choices"][0]["message"]["content"]);
}

TEST_F(UiOpenAiTest, BadInputIsA4xxAndTheNextRequestIsServed) {
  auto ui = Start({});
  json many = json::array();
  for (int i = 0; i < 10000; ++i) many.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "hi"}});
  const json user = {{"role", "user"}, {"content", "hi"}};
  struct Case {
    std::string what, body, type = "application/json";
    int status;
  };
  const std::vector<Case> cases = {
      {"missing role", Chat(json::array({{{"content", "hi"}}}), 4).dump(), "application/json", 400},
      {"unknown role", Chat(json::array({{{"role", "robot"}, {"content", "hi"}}}), 4).dump(), "application/json", 400},
      {"non-string content", Chat(json::array({{{"role", "user"}, {"content", 7}}}), 4).dump(), "application/json", 400},
      {"messages not an array", Chat("hi", 4).dump(), "application/json", 400},
      {"10,000 messages", Chat(many, 4).dump(), "application/json", 400},
      {"unknown routing.mode", Chat(json::array({user}), 4, {{"routing", {{"mode", "bogus"}}}}).dump(), "application/json", 400},
      {"threshold 2", Chat(json::array({user}), 4, {{"routing", {{"threshold", 2}}}}).dump(), "application/json", 400},
      {"unknown routing.policy", Chat(json::array({user}), 4, {{"routing", {{"policy", "cheap"}}}}).dump(), "application/json", 400},
      {"negative cost_budget", Chat(json::array({user}), 4, {{"routing", {{"cost_budget", -1}}}}).dump(), "application/json", 400},
      {"routing not an object", Chat(json::array({user}), 4, {{"routing", "joint"}}).dump(), "application/json", 400},
      {"unknown routing field", Chat(json::array({user}), 4, {{"routing", {{"mdoe", "joint"}}}}).dump(), "application/json", 400},
      {"threshold with small_only", Chat(json::array({user}), 4, {{"routing", {{"mode", "small_only"}, {"threshold", 0.9}}}}).dump(), "application/json", 400},
      {"policy with large_only", Chat(json::array({user}), 4, {{"routing", {{"mode", "large_only"}, {"policy", "cost"}}}}).dump(), "application/json", 400},
      {"logprobs", Chat(json::array({user}), 4, {{"logprobs", true}}).dump(), "application/json", 400},
      {"prompt_logprobs", Chat(json::array({user}), 4, {{"prompt_logprobs", 2}}).dump(), "application/json", 400},
      {"response_format json", Chat(json::array({user}), 4, {{"response_format", {{"type", "json_object"}}}}).dump(), "application/json", 400},
      {"n = 2", Chat(json::array({user}), 4, {{"n", 2}}).dump(), "application/json", 400},
      {"context exceeded", Chat(json::array({user}), 600).dump(), "application/json", 400},
      {"not JSON", "{\"messages\": [", "application/json", 400},
      {"form body", "messages=hi", "application/x-www-form-urlencoded", 415},
      {"50 MB body", std::string(50 << 20, ' '), "application/json", 413},
  };
  for (const Case& c : cases) {
    Reply r = Post(ui->port(), "/v1/chat/completions", c.body, "", c.type);
    EXPECT_EQ(r.status, c.status) << c.what << ": " << r.body.substr(0, 300);
    if (r.status > 0) {
      ASSERT_TRUE(r.j.contains("error")) << c.what << ": " << r.body.substr(0, 300);
      EXPECT_FALSE(r.j["error"]["message"].get<std::string>().empty()) << c.what;
    }
    Reply ok = Post(ui->port(), "/v1/chat/completions", Chat(json::array({user}), 2).dump());
    EXPECT_EQ(ok.status, 200) << "after " << c.what << ": " << ok.body.substr(0, 300);
  }
  Reply r = Post(ui->port(), "/v1/chat/completions", Chat(json::array({user}), 600).dump());
  EXPECT_EQ(r.j["error"]["code"], "context_length_exceeded") << r.body;
}

// Starts a streamed request on its own thread; the reply lands in *out.
std::thread StreamInBackground(int port, json body, Reply* out) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  return std::thread([port, body, out] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120);
    auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
    if (!res) return;
    out->status = res->status;
    out->body = res->body;
  });
}

TEST_F(UiOpenAiTest, TwoClientsStreamingAtOnceGetWhatTheyGetAlone) {
  auto ui = Start({});
  const json q1 = Chat(kTurn1, 16), q2 = Chat(json::array({{{"role", "user"}, {"content", "Where is a cat kept?"}}}), 16);
  Reply alone1, alone2, both1, both2;
  StreamInBackground(ui->port(), q1, &alone1).join();
  StreamInBackground(ui->port(), q2, &alone2).join();
  std::thread t1 = StreamInBackground(ui->port(), q1, &both1), t2 = StreamInBackground(ui->port(), q2, &both2);
  t1.join();
  t2.join();
  for (Reply* r : {&alone1, &alone2, &both1, &both2}) ASSERT_EQ(r->status, 200) << r->body;
  const Streamed a1 = ParseStream(alone1.body), a2 = ParseStream(alone2.body);
  const Streamed b1 = ParseStream(both1.body), b2 = ParseStream(both2.body);
  ASSERT_FALSE(a1.tokens.empty());
  EXPECT_EQ(b1.tokens, a1.tokens);
  EXPECT_EQ(b1.content, a1.content);
  EXPECT_EQ(b2.tokens, a2.tokens);
  EXPECT_EQ(b2.content, a2.content);
  EXPECT_TRUE(b1.done && b2.done);
  // max_tokens 0 streamed: the assistant's role still comes first, then the finish and [DONE].
  Reply none;
  StreamInBackground(ui->port(), Chat(kTurn1, 0), &none).join();
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_NE(none.body.find(R"("role":"assistant")"), std::string::npos) << none.body;
  EXPECT_TRUE(ParseStream(none.body).done) << none.body;
}

TEST_F(UiOpenAiTest, QueueIsBoundedAndAClientThatLeavesFreesItsPlace) {
  DeviceServerOptions o;
  o.max_queue = 2;
  auto ui = Start(o, slow_llm_);
  // Every token routed, each LLM call 150 ms: 12 tokens take about 2 s.
  const json slow = Chat(kTurn1, 12, {{"routing", {{"threshold", 1.0}, {"pipeline", false}}}});
  Reply running;
  std::thread first = StreamInBackground(ui->port(), slow, &running);
  // Waited for, not assumed after a sleep (the same below): each step is seen by the server.
  const auto until = [&](const std::function<bool(int)>& holds) {
    for (int i = 0; i < 5000 && !holds(ui->api_requests()); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return holds(ui->api_requests());
  };
  ASSERT_TRUE(until([](int n) { return n >= 1; }));
  // A second client sends a non-streamed request (it waits in the queue) and goes away.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(ui->port()));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string body = Chat(kTurn1, 4).dump();
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  ASSERT_TRUE(until([](int n) { return n >= 2; }));
  // The queue is full now (one running, one waiting): the next one is told to come back.
  Reply full = Post(ui->port(), "/v1/chat/completions", Chat(kTurn1, 4).dump());
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_FALSE(full.retry_after.empty());
  EXPECT_GE(std::atoi(full.retry_after.c_str()), 1);
  ::close(fd);  // the waiting client goes away: its place is free again
  ASSERT_TRUE(until([](int n) { return n <= 1; }));
  Reply after = Post(ui->port(), "/v1/chat/completions", Chat(kTurn1, 4, {{"routing", {{"mode", "small_only"}}}}).dump());
  EXPECT_EQ(after.status, 200) << after.body;
  first.join();
  EXPECT_EQ(running.status, 200);
  EXPECT_TRUE(ParseStream(running.body).done) << running.body;
}

TEST_F(UiOpenAiTest, KeysGuardTheApiAndHeadlessServesNoPage) {
  DeviceServerOptions o;
  o.page = false;
  o.api_keys = {"k1", "k2"};
  auto ui = Start(o);
  const std::string body = Chat(kTurn1, 2).dump();
  Reply none = Post(ui->port(), "/v1/chat/completions", body);
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_EQ(Post(ui->port(), "/v1/chat/completions", body, "wrong").status, 401);
  EXPECT_EQ(Post(ui->port(), "/v1/chat/completions", body, "k2").status, 200);
  EXPECT_EQ(Post(ui->port(), "/v1/completions", json{{"prompt", "Question:"}, {"max_tokens", 2}}.dump(), "k1").status, 200);
  EXPECT_EQ(Post(ui->port(), "/api/generate", R"({"prompt": "hi"})", "k1").status, 404);
  httplib::Client c("127.0.0.1", ui->port());
  auto page = c.Get("/", {{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 404);
  auto models = c.Get("/v1/models", {{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tlr");
}

}  // namespace
}  // namespace tlr
