// Scale-out behind a real load balancer (label net): two `tlr serve` replicas behind HAProxy
// (Debian package haproxy) with the configuration deployments use, tools/deploy/haproxy.cfg
// (session affinity on the session id; docs/deploy.md). Four devices answer three questions
// each at once, two sessions on each replica; in the middle of the first device's first answer
// the replica holding its session is killed (SIGKILL). Checked:
// - affinity: until the kill no device had to resync (every call found its session), and the
//   replicas held two sessions each;
// - failover: the killed replica's devices continue on the other one through the 404 resync
//   path (one new session each, LLM tokens after the kill), the others never notice;
// - nothing lost: no FALLBACK token anywhere, and every answer equals the fault-free answer
//   (in process).
// Skips when haproxy is not installed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <httplib.h>
#include <thread>

#include "apps/tlr/child_process.h"
#include "apps/tlr/device_run.h"
#include "device/remote/remote_llm.h"
#include "routing/qa.h"
#include "tools/load_generator.h"

namespace tlr {
namespace {

constexpr int kDevices = 4, kQuestions = 3;

// A loopback port nobody listens on at the moment.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// A replica's open sessions (its tlr_sessions gauge); -1 when it does not answer.
int Sessions(const std::string& url) {
  httplib::Client c(url);
  c.set_connection_timeout(2);
  auto res = c.Get("/metrics");
  if (!res || res->status != 200) return -1;
  const MetricsScrape m = ParseMetricsText(res->body);
  auto it = m.find("tlr_sessions");
  return it == m.end() ? -1 : static_cast<int>(it->second);
}

TEST(FailoverTest, ReplicaKilledMidGenerationSessionsContinueOnTheOther) {
  const std::string haproxy = FindTool("haproxy");
  if (haproxy.empty()) GTEST_SKIP() << "no haproxy (Debian package haproxy): the load-balancer test needs it";
  auto slm = Model::Load(kDemo + "slm.gguf");
  auto llm = Model::Load(kDemo + "llm.gguf");
  ASSERT_TRUE(slm.ok() && llm.ok());
  auto rows = LoadQaJsonl(kDemo + "test.jsonl");
  ASSERT_TRUE(rows.ok());
  auto Prompt = [&](int device, int q) { return (*slm)->tokenizer().Encode(QaPrompt((*rows)[device * kQuestions + q])); };

  ChildProcess replica[2];
  std::string url[2];
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(replica[r].Start(kTlrBinary, {"serve", "-m", kDemo + "llm.gguf", "--port", "0", "-t", "1"}, &url[r]))
        << "replica " << r + 1 << " did not start";
  }
  const int lb_port = FreePort();
  ASSERT_GT(lb_port, 0);
  const std::string lb_url = "http://127.0.0.1:" + std::to_string(lb_port);
  setenv("TLR_LB_BIND", ("127.0.0.1:" + std::to_string(lb_port)).c_str(), 1);
  setenv("TLR_REPLICA1", url[0].substr(url[0].rfind('/') + 1).c_str(), 1);
  setenv("TLR_REPLICA2", url[1].substr(url[1].rfind('/') + 1).c_str(), 1);
  ChildProcess lb;
  ASSERT_TRUE(lb.Spawn(haproxy, {"-db", "-f", std::string(TLR_SOURCE_DIR) + "/tools/deploy/haproxy.cfg"}));
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    httplib::Client c(lb_url);
    auto res = c.Get("/health");
    up = res && res->status == 200;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(up) << "haproxy did not answer /health on " << lb_url;

  // The devices connect one after the other (each creates its session at once); round robin
  // puts them on alternate replicas. Which one each is on, from the replicas' own counts.
  std::unique_ptr<RemoteLlm> remote[kDevices];
  int on[kDevices];
  int held0 = 0;  // sessions on replica 1 so far
  for (int i = 0; i < kDevices; ++i) {
    RemoteOptions o;
    o.http.url = lb_url;
    o.http.timeout_s = 10;
    o.http.retries = 3;
    o.http.backoff_s = 0.05;
    o.http.sim_rtt_s = 0.02;
    o.http.sim_jitter_s = 0.01;
    auto r = RemoteLlm::Connect(o, (*slm)->tokenizer());
    ASSERT_TRUE(r.ok()) << r.status().message();
    remote[i] = std::move(r).value();
    ASSERT_EQ(remote[i]->stats().sessions_created, 1);
    const int s0 = Sessions(url[0]), s1 = Sessions(url[1]);
    ASSERT_EQ(s0 + s1, i + 1);
    on[i] = s0 > held0 ? 0 : 1;
    held0 = s0;
  }
  ASSERT_EQ(Sessions(url[0]), 2);
  ASSERT_EQ(Sessions(url[1]), 2);
  const int victim = on[0];

  DecodeOptions d;
  d.threshold = 0.8f;  // a random router: about 80% of the tokens go to the LLM
  d.pipeline.depth = 4;
  d.pipeline.lookahead = 2;
  d.max_tokens = 40;
  d.sim_slm_s = 0.01;
  // Each device answers kQuestions questions in its session (the demo's answers are short);
  // the replica dies in the middle of device 0's first answer.
  using Clock = DeviceRun::Clock;
  std::atomic<bool> killed{false};
  Clock::time_point kill_at;
  int64_t resyncs_at_kill[kDevices] = {};
  std::vector<DeviceRun> got[kDevices];
  std::vector<std::thread> devices;
  for (int i = 0; i < kDevices; ++i) {
    devices.emplace_back([&, i] {
      for (int q = 0; q < kQuestions; ++q) {
        got[i].push_back(RunDevice(**slm, remote[i].get(), Prompt(i, q), d, [&, i](const DeviceRun& run) {
          if (i != 0 || killed || run.count(TokenSource::kLlm) < 8) return;
          // Read before the kill: a device on the victim can resync (rightly) while Kill() waits
          // for the process to end, and that is not a call that missed its session before it.
          for (int j = 0; j < kDevices; ++j) resyncs_at_kill[j] = remote[j]->stats().resyncs;
          replica[victim].Kill();
          kill_at = Clock::now();
          killed = true;
        }));
        remote[i]->Reset();
      }
    });
  }
  for (auto& t : devices) t.join();
  ASSERT_TRUE(killed) << "device 0's first answer ended before the kill";
  const int survivor = 1 - victim;
  EXPECT_EQ(Sessions(url[survivor]), kDevices) << "every session now lives on the surviving replica";
  {  // What the survivor went through (read when a device resynced where it should not have).
    httplib::Client c(url[survivor]);
    auto res = c.Get("/metrics");
    if (res && res->status == 200) {
      const MetricsScrape m = ParseMetricsText(res->body);
      std::printf("survivor:");
      for (const auto& [k, v] : m) {
        if (v != 0 && (k.find("resync") != std::string::npos || k.find("evict") != std::string::npos ||
                       k.find("calls_") != std::string::npos || k.find("rewound") != std::string::npos)) {
          std::printf(" %s=%g", k.c_str(), v);
        }
      }
      std::printf("\n");
    }
  }

  for (int i = 0; i < kDevices; ++i) {
    SCOPED_TRACE("device " + std::to_string(i) + (on[i] == victim ? " (on the killed replica)" : ""));
    const RemoteStats rs = remote[i]->stats();
    EXPECT_EQ(resyncs_at_kill[i], 0) << "a call missed its session before the kill (affinity)";
    int tokens = 0, llm_tokens = 0, llm_after = 0;
    for (int q = 0; q < kQuestions; ++q) {
      const DeviceRun& run = got[i][static_cast<size_t>(q)];
      EXPECT_TRUE(run.failed.empty()) << run.failed.size() << " FALLBACK tokens in answer " << q << ": "
                                      << rs.FailureSummary();
      tokens += static_cast<int>(run.ids.size());
      llm_tokens += run.count(TokenSource::kLlm);
      llm_after += run.count_between(TokenSource::kLlm, kill_at, Clock::time_point::max());
      DeviceRun want = ReplayInProcess(**slm, **llm, Prompt(i, q), d, {});
      EXPECT_EQ(run.ids, want.ids) << "answer " << q;
      EXPECT_EQ(run.src, want.src) << "answer " << q;
    }
    if (on[i] == victim) {
      EXPECT_GT(llm_after, 0) << "no LLM token after the kill";
      EXPECT_GE(rs.resyncs, 1);
      EXPECT_EQ(rs.sessions_created, 2);
    } else {
      EXPECT_EQ(rs.resyncs, 0);
      EXPECT_EQ(rs.sessions_created, 1);
    }
    std::printf("device %d (replica %d%s): %d tokens, %d from the LLM (%d after the kill); %lld calls, %lld HTTP "
                "requests, %lld retries, %lld resyncs, %lld sessions\n",
                i, on[i] + 1, on[i] == victim ? ", killed" : "", tokens, llm_tokens, llm_after,
                static_cast<long long>(rs.calls), static_cast<long long>(rs.http_requests),
                static_cast<long long>(rs.retries), static_cast<long long>(rs.resyncs),
                static_cast<long long>(rs.sessions_created));
  }
}

}  // namespace
}  // namespace tlr
