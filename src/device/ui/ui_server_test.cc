// The web UI's HTTP service on a loopback port (label server): the DNS-rebinding guard accepts
// exactly the loopback names (not "127.attacker.example"), slow clients do not take the page
// away, and a generation streams its events.
#include "device/ui/device_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "device/decode/token_json.h"
#include "net/http_front.h"
#include "ops/thread_pool.h"
#include "device/ui/ui_test_support.h"
#include "routing/router.h"
#include "util/test_support.h"

namespace tlr {
namespace {

class UiServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    slm_ = Model::Load(kDemo + "slm.gguf")->release();
    llm_ = new LlmTarget;
    llm_->model = std::move(Model::Load(kDemo + "llm.gguf")).value();
    router_ = new Router(std::move(Router::Load(kDemo + "router.gguf")).value());
  }
  static void TearDownTestSuite() {
    delete slm_;
    delete llm_;
    delete router_;
  }
  void SetUp() override {
    DeviceServerModels m;
    m.slm = slm_;
    m.llm = llm_;
    m.routers.push_back({"citer", "citer (test)", router_});
    m.pool = &pool_;
    m.n_ctx = 512;
    DeviceServerOptions o;
    o.port = 0;
    o.assets = kTestAssets;
    ui_ = std::make_unique<DeviceServer>(std::move(m), std::move(o));
    Status s = ui_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
  }
  void TearDown() override { ui_->Stop(); }
  // GET path with the given Host header; the status, or -1 when nothing came back.
  int GetWithHost(const std::string& path, const std::string& host) {
    httplib::Client c("127.0.0.1", ui_->port());
    c.set_connection_timeout(10);
    c.set_read_timeout(10);
    auto res = c.Get(path.c_str(), {{"Host", host}});
    return res ? res->status : -1;
  }
  static Model* slm_;
  static LlmTarget* llm_;
  static Router* router_;
  ThreadPool pool_{1};
  std::unique_ptr<DeviceServer> ui_;
};
Model* UiServerTest::slm_ = nullptr;
LlmTarget* UiServerTest::llm_ = nullptr;
Router* UiServerTest::router_ = nullptr;

TEST_F(UiServerTest, HostCheckIsExact) {
  std::string port(":");
  port += std::to_string(ui_->port());
  for (const std::string& ok : std::vector<std::string>{"127.0.0.1" + port, "localhost" + port, "LocalHost", "[::1]" + port, "127.1.2.3"}) {
    EXPECT_EQ(GetWithHost("/api/info", ok), 200) << ok;
  }
  for (const std::string& bad : std::vector<std::string>{"127.attacker.example" + port, "127.0.0.1.attacker.example", "localhost.attacker.example",
                                 "127.0.0.1x", "attacker.example" + port, "[::1].evil"}) {
    EXPECT_EQ(GetWithHost("/api/info", bad), 403) << bad;
    EXPECT_EQ(GetWithHost("/", bad), 403) << bad;
  }
  EXPECT_EQ(GetWithHost("/", "127.0.0.1" + port), 200);
}

TEST(LoopbackHostTest, IsExact) {
  for (const char* yes : {"127.0.0.1", "127.255.0.9", "localhost", "LOCALHOST", "::1"}) EXPECT_TRUE(IsLoopbackHost(yes)) << yes;
  for (const char* no : {"127.attacker.example", "127.0.0.1.nip.io", "localhost.example", "0.0.0.0", "::", "10.0.0.1",
                         "127.0.0.256", ""}) {
    EXPECT_FALSE(IsLoopbackHost(no)) << no;
  }
}

TEST_F(UiServerTest, SlowClientsDoNotTakeThePageAway) {
  std::vector<int> slow;
  for (int i = 0; i < 64; ++i) {  // the UI used to serve 16 connections at once
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(ui_->port()));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string partial = "GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    ASSERT_EQ(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL), static_cast<ssize_t>(partial.size()));
    slow.push_back(fd);
  }
  EXPECT_EQ(GetWithHost("/api/info", "127.0.0.1"), 200);
  for (int fd : slow) ::close(fd);
}

TEST_F(UiServerTest, GenerationStreamsTokensAndStats) {
  httplib::Client c("127.0.0.1", ui_->port());
  c.set_read_timeout(60);
  auto res = c.Post("/api/generate", R"({"prompt": "Question: what is a cat?", "max_tokens": 4, "pipeline": false})",
                    "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("event: start"), std::string::npos);
  EXPECT_NE(res->body.find("event: token"), std::string::npos);
  const size_t at = res->body.find("event: stats\ndata: ");
  ASSERT_NE(at, std::string::npos) << res->body;
  const size_t from = at + 19, to = res->body.find('\n', from);
  const nlohmann::json stats = nlohmann::json::parse(res->body.substr(from, to - from));
  // The one statistics schema (DecodeStatsJson) plus the page's own fields.
  const nlohmann::json schema = DecodeStatsJson(DecodeStats{});
  for (const auto& [k, v] : schema.items()) EXPECT_TRUE(stats.contains(k)) << k;
  EXPECT_EQ(stats["generated"], 4) << stats.dump();
  EXPECT_TRUE(stats.contains("network_ms") && stats.contains("pipeline")) << stats.dump();
}

}  // namespace
}  // namespace tlr
