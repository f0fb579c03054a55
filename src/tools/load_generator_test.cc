// The load generator: its metrics arithmetic on fixed Prometheus text, and a short run of two
// simulated devices against a real server on a loopback port (label server).
#include "tools/load_generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "net/metrics.h"
#include "server/llm_engine.h"
#include "server/llm_server.h"
#include "util/test_support.h"

namespace tlr {
namespace {


TEST(LoadGeneratorTest, ParsesMetricsAndDiffsHistograms) {
  const MetricsScrape before = ParseMetricsText(
      "# HELP x y\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"4\"} 3\nh_bucket{le=\"+Inf\"} 3\n"
      "garbage\nc_total 5\n");
  const MetricsScrape after = ParseMetricsText(
      "h_bucket{le=\"1\"} 4\nh_bucket{le=\"4\"} 8\nh_bucket{le=\"+Inf\"} 9\nc_total 7.5\n");
  EXPECT_EQ(before.size(), 4u);  // comments and the line without a value skipped
  EXPECT_DOUBLE_EQ(after.at("c_total"), 7.5);
  const std::vector<LoadBucket> b = HistogramDelta(before, after, "h");
  ASSERT_EQ(b.size(), 3u);
  EXPECT_DOUBLE_EQ(b[0].count, 2);  // (0, 1]
  EXPECT_DOUBLE_EQ(b[1].count, 3);  // (1, 4]: 8-3 minus the 2 below
  EXPECT_DOUBLE_EQ(b[2].count, 1);  // (4, inf)
  EXPECT_TRUE(std::isinf(b[2].hi));
  EXPECT_EQ(BucketLabel(b[0]), "1");
  EXPECT_EQ(BucketLabel(b[1]), "2-4");
  EXPECT_EQ(BucketLabel(b[2]), "5+");
  // A declared counter without a sample yet is 0, not absent (labelled samples are kept apart).
  const MetricsScrape declared = ParseMetricsText(
      "# HELP p_total paced\n# TYPE p_total counter\n# TYPE g gauge\n# TYPE r_total counter\nr_total{a=\"b\"} 2\n");
  ASSERT_EQ(declared.count("p_total"), 1u);
  EXPECT_DOUBLE_EQ(declared.at("p_total"), 0);
  EXPECT_EQ(declared.count("g"), 0u);
  EXPECT_DOUBLE_EQ(declared.at("r_total{a=\"b\"}"), 2);
}

TEST(LoadGeneratorTest, PercentileIsNearestRank) {
  EXPECT_EQ(Percentile({}, 50), 0.0f);
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(Percentile(v, 50), 5.0f);
  EXPECT_EQ(Percentile(v, 90), 9.0f);
  EXPECT_EQ(Percentile(v, 99), 10.0f);
  EXPECT_EQ(Percentile(v, 0), 1.0f);
}

TEST(LoadGeneratorTest, MissingVocabularyIsAnError) {
  EXPECT_FALSE(LoadVocabulary("/nonexistent/model.gguf").ok());
}

class LoadGeneratorServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(EngineLimits{}); }
  void Start(const EngineLimits& lim) {
    server_.reset();
    engine_.reset();
    auto m = Model::Load(kDemo + "llm.gguf");
    ASSERT_TRUE(m.ok()) << m.status().message();
    llm_ = std::move(m).value();
    engine_ = std::make_unique<LlmEngine>(*llm_, nullptr, lim, &metrics_);
    ServerOptions so;
    so.port = 0;
    server_ = std::make_unique<LlmServer>(engine_.get(), &metrics_, so);
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
  }
  std::unique_ptr<Model> llm_;
  Metrics metrics_;
  std::unique_ptr<LlmEngine> engine_;
  std::unique_ptr<LlmServer> server_;
};

TEST_F(LoadGeneratorServerTest, TwoDevicesMakeCallsWithoutErrors) {
  LoadOptions o;
  o.server = "http://127.0.0.1:" + std::to_string(server_->port());
  o.duration_s = 0.5;
  o.prompt_tokens = 8;
  o.gen_tokens = 2;
  o.max_context = 24;  // several conversations per device
  auto r = RunLoad(o, llm_->tokenizer(), 2, 7);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->sessions, 2);
  EXPECT_GT(r->calls, 0);
  EXPECT_EQ(r->errors, 0) << (r->error_samples.empty() ? "" : r->error_samples[0]);
  EXPECT_EQ(static_cast<int64_t>(r->latency_ms.size()), r->calls);
  EXPECT_TRUE(std::is_sorted(r->latency_ms.begin(), r->latency_ms.end()));
  EXPECT_GE(r->conversations, 2);
  ASSERT_TRUE(r->have_metrics);
  EXPECT_GT(r->passes, 0);
  EXPECT_GT(r->generated, 0);
  EXPECT_NE(FormatLoadRun(*r, o).find("goodput"), std::string::npos);
  const nlohmann::json j = LoadRunJson(*r);
  EXPECT_EQ(j["calls"].get<int64_t>(), r->calls);
  EXPECT_TRUE(j.contains("server"));
  EXPECT_EQ(engine_->session_count(), 0);  // the devices closed their sessions
}

TEST_F(LoadGeneratorServerTest, RampUpStartsDevicesLateAndRatesOnlyTheCallsAfterIt) {
  LoadOptions o;
  o.server = "http://127.0.0.1:" + std::to_string(server_->port());
  o.duration_s = 1.2;
  o.ramp_s = 50;  // capped at half the run
  o.prompt_tokens = 8;
  o.gen_tokens = 2;
  o.max_context = 24;
  const int kDevices = 4;
  auto r = RunLoad(o, llm_->tokenizer(), kDevices, 3);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->ramp_s, 0.6);
  EXPECT_EQ(r->errors, 0) << (r->error_samples.empty() ? "" : r->error_samples[0]);
  EXPECT_GT(r->steady_calls, 0);
  // Calls of the ramp-up are made (and in the latencies) but not in the rate.
  EXPECT_LT(r->steady_calls, r->calls);
  EXPECT_DOUBLE_EQ(r->calls_per_s(), r->steady_calls / (r->wall_s - 0.6));
  EXPECT_GE(r->conversations, kDevices);  // every device ran, the late ones too
  EXPECT_NE(FormatLoadRun(*r, o).find("after the 0.6 s ramp-up"), std::string::npos);
  EXPECT_EQ(LoadRunJson(*r)["steady_calls"].get<int64_t>(), r->steady_calls);
}

// A server slower than its devices' timeout allows: it refuses what it cannot answer in time;
// the devices count each refused call once and wait out its Retry-After (no failing fast in a
// loop), and nothing the server admitted times out.
TEST_F(LoadGeneratorServerTest, RefusedCallsAreCountedOnceAndWaitedOut) {
  EngineLimits lim;
  lim.test_pass_delay_s = 0.05;
  lim.max_batch_tokens = 16;
  Start(lim);
  LoadOptions o;
  o.server = "http://127.0.0.1:" + std::to_string(server_->port());
  o.duration_s = 1.5;
  o.timeout_s = 1.0;
  o.prompt_tokens = 40;  // 8 new conversations need 22 passes, 1.1 s; one may wait 0.5 s
  o.gen_tokens = 4;
  o.max_context = 80;
  auto r = RunLoad(o, llm_->tokenizer(), 8, 5);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->calls, 0);
  EXPECT_GT(r->refused, 0);
  EXPECT_EQ(r->timed_out, 0) << (r->error_samples.empty() ? "" : r->error_samples[0]);
  EXPECT_EQ(r->failed, 0) << (r->error_samples.empty() ? "" : r->error_samples[0]);
  EXPECT_EQ(r->errors, r->refused + r->partial);
  EXPECT_EQ(static_cast<int64_t>(r->refused_ms.size()), r->refused);
  EXPECT_GT(r->waited_s, 0);
  EXPECT_DOUBLE_EQ(r->server_refused, static_cast<double>(r->refused));  // one request per refused call
  EXPECT_EQ(r->server_dropped, 0);
  EXPECT_NE(r->refusal_sample.find("overloaded"), std::string::npos) << r->refusal_sample;
  const nlohmann::json j = LoadRunJson(*r);
  EXPECT_EQ(j["refused"].get<int64_t>(), r->refused);
  EXPECT_EQ(j["timed_out"].get<int64_t>(), 0);
  // Each device's first answered call started its conversation: a 40-token prefill or more.
  ASSERT_TRUE(r->have_pacer);
  EXPECT_GE(r->new_tokens, 40);
  EXPECT_LE(r->new_tokens, r->prefill);
  EXPECT_LE(r->server_paced, r->server_refused);  // paced calls are among the refused
  EXPECT_EQ(j["server"]["new_conversation_tokens"].get<double>(), r->new_tokens);
  EXPECT_EQ(j["server"]["new_conversations_paced"].get<double>(), r->server_paced);
  EXPECT_NE(FormatLoadRun(*r, o).find("new conversations paced"), std::string::npos);
}

TEST_F(LoadGeneratorServerTest, SessionQuotaRefusalsAreCountedApartFromOverload) {
  ServerOptions so;
  so.port = 0;
  so.session_quota = 1;  // one session per client: all devices here are one client (127.0.0.1)
  LlmServer quota_server(engine_.get(), &metrics_, so);
  ASSERT_TRUE(quota_server.Start().ok());
  LoadOptions o;
  o.server = "http://127.0.0.1:" + std::to_string(quota_server.port());
  o.duration_s = 0.5;
  o.prompt_tokens = 8;
  o.gen_tokens = 2;
  o.max_context = 24;
  auto r = RunLoad(o, llm_->tokenizer(), 3, 5);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->calls, 0);
  EXPECT_GT(r->quota_refused, 0);
  EXPECT_EQ(r->refused, 0);  // not overload
  EXPECT_NE(FormatLoadRun(*r, o).find("quota refused"), std::string::npos);
  EXPECT_EQ(LoadRunJson(*r)["quota_refused"].get<int64_t>(), r->quota_refused);
}

TEST_F(LoadGeneratorServerTest, UnreachableServerIsAnError) {
  LoadOptions o;
  o.server = "http://127.0.0.1:1";
  o.duration_s = 0.1;
  o.timeout_s = 1;
  auto r = RunLoad(o, llm_->tokenizer(), 1, 1);
  ASSERT_FALSE(r.ok());
  // It says why: nothing listens on that port.
  EXPECT_NE(r.status().message().find("cannot reach the LLM server at http://127.0.0.1:1: connection refused"),
            std::string::npos) << r.status().message();
  o.server = "http://127.0.0.1:" + std::to_string(server_->port());
  o.server_pid = 1 << 29;  // no such process
  r = RunLoad(o, llm_->tokenizer(), 1, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--server-pid 536870912: no such process"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace tlr
