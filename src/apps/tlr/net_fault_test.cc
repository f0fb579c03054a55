// Network faults between real processes (label net): `tlr serve` runs in its own network
// namespace, the device (this test) in another, joined by a veth pair; iptables in the
// server's namespace drops packets (the kernel here has no netem qdisc), the device's simulated
// round trip (with jitter) adds the delay.
// - 5% loss both ways for a small evaluation (several questions, pipelined calls): every
//   request completes, and each answer equals the in-process answer in which the calls that
//   fell back fail (so loss may cost FALLBACK tokens, never a wrong or lost token).
// - A partition (every packet dropped, TLR_NET_PARTITION_S seconds, default 8: longer than the
//   server's session TTL of 1 s plus its 5 s expiry sweep) starting in the middle of an answer,
//   the device answering question after question: the routed tokens during it are FALLBACK,
//   after it heals the device finds its session gone (404), creates a new one and resends the
//   context (resync), the LLM answers again, and every answer equals the in-process run with
//   the same calls failing.
// Skips, saying why, where namespaces cannot be made (not root, no ip or iptables).
// Everything happens inside namespaces named after this process; they are deleted at the end
// of the test, even when it fails, and stale ones of dead runs are deleted at the start.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "apps/tlr/child_process.h"
#include "apps/tlr/device_run.h"
#include "device/remote/remote_llm.h"
#include "routing/qa.h"

namespace tlr {
namespace {

constexpr const char* kPrefix = "tlrnet-";
constexpr const char* kServerAddr = "10.77.0.2";
constexpr const char* kApiKey = "net-fault-test-key";

// Runs a shell command quietly; true when it exits 0.
bool Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::string ShOut(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  pclose(f);
  return out;
}

// Two namespaces, "device" (10.77.0.1) and "server" (10.77.0.2), joined by a veth pair.
class NetnsPair {
 public:
  // Empty on success, else why the namespaces cannot be made here.
  std::string Create() {
    if (geteuid() != 0) return "network namespaces need root (run the test as root)";
    ip_ = FindTool("ip");
    iptables_ = FindTool("iptables");
    if (ip_.empty()) return "no 'ip' (Debian package iproute2)";
    if (iptables_.empty()) return "no 'iptables' (Debian package iptables)";
    DeleteStale();
    const std::string pid = std::to_string(getpid());
    device_ = kPrefix + pid + "-d";
    server_ = kPrefix + pid + "-s";
    const std::string vd = "tlrv" + pid + "d", vs = "tlrv" + pid + "s";
    if (!Sh(ip_ + " netns add " + device_)) return "'ip netns add' failed (no namespace support here)";
    made_ = true;
    if (!Sh(ip_ + " netns add " + server_)) return "'ip netns add' failed for a second namespace";
    const bool ok = Sh(ip_ + " link add " + vd + " netns " + device_ + " type veth peer name " + vs + " netns " + server_) &&
                    Sh(In(device_, ip_ + " addr add 10.77.0.1/24 dev " + vd)) &&
                    Sh(In(server_, ip_ + std::string(" addr add ") + kServerAddr + "/24 dev " + vs)) &&
                    Sh(In(device_, ip_ + " link set " + vd + " up")) && Sh(In(server_, ip_ + " link set " + vs + " up")) &&
                    Sh(In(device_, ip_ + " link set lo up")) && Sh(In(server_, ip_ + " link set lo up"));
    if (!ok) return "could not join the namespaces with a veth pair";
    server_if_ = vs;
    if (!Iptables("-L -n")) return "iptables does not work inside a network namespace here";
    return "";
  }
  ~NetnsPair() {
    LeaveDevice();
    if (!made_) return;
    Sh(ip_ + " netns del " + device_);  // the veth pair goes with its namespaces
    Sh(ip_ + " netns del " + server_);
  }

  // A command run inside a namespace.
  std::string In(const std::string& ns, const std::string& cmd) const { return ip_ + " netns exec " + ns + " " + cmd; }
  bool Iptables(const std::string& args) const { return Sh(In(server_, iptables_ + " -w " + args)); }

  // Packet loss on the server's veth end, both ways (probability 0 removes it).
  bool SetLoss(double p) {
    Iptables("-F");
    if (p <= 0) return true;
    const std::string rule = "-m statistic --mode random --probability " + std::to_string(p) + " -j DROP";
    return Iptables("-A INPUT -i " + server_if_ + " " + rule) && Iptables("-A OUTPUT -o " + server_if_ + " " + rule);
  }
  bool Partition(bool on) {
    Iptables("-F");
    return !on || (Iptables("-A INPUT -i " + server_if_ + " -j DROP") && Iptables("-A OUTPUT -o " + server_if_ + " -j DROP"));
  }
  // Packets the current rules dropped.
  int64_t Dropped() const {
    int64_t n = 0;
    const std::string out = ShOut(In(server_, iptables_ + " -w -L -v -x -n 2>/dev/null"));
    size_t at = 0;
    while ((at = out.find("DROP", at)) != std::string::npos) {
      const size_t line = out.rfind('\n', at) + 1;
      n += std::atoll(out.c_str() + line);
      ++at;
    }
    return n;
  }

  // Moves this thread (and the threads it starts from now on) into the device's namespace.
  bool EnterDevice() {
    own_ns_ = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const int fd = open(("/var/run/netns/" + device_).c_str(), O_RDONLY | O_CLOEXEC);
    const bool ok = own_ns_ >= 0 && fd >= 0 && setns(fd, CLONE_NEWNET) == 0;
    if (fd >= 0) close(fd);
    return ok;
  }
  void LeaveDevice() {
    if (own_ns_ < 0) return;
    setns(own_ns_, CLONE_NEWNET);
    close(own_ns_);
    own_ns_ = -1;
  }

  const std::string& ip() const { return ip_; }
  const std::string& server_ns() const { return server_; }

 private:
  // Namespaces of runs that died without cleaning up (their process is gone).
  void DeleteStale() {
    const std::string list = ShOut(ip_ + " netns list 2>/dev/null");
    size_t at = 0;
    while ((at = list.find(kPrefix, at)) != std::string::npos) {
      const size_t end = list.find_first_of(" \n", at);
      const std::string name = list.substr(at, end - at);
      at = end;
      const pid_t owner = std::atoi(name.c_str() + std::strlen(kPrefix));
      if (owner > 0 && kill(owner, 0) != 0) Sh(ip_ + " netns del " + name);
    }
  }

  std::string ip_, iptables_, device_, server_, server_if_;
  bool made_ = false;
  int own_ns_ = -1;
};

class NetFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = net_.Create();
    if (!why.empty()) GTEST_SKIP() << "network namespaces unavailable: " << why;
    auto slm = Model::Load(kDemo + "slm.gguf");
    auto llm = Model::Load(kDemo + "llm.gguf");
    ASSERT_TRUE(slm.ok() && llm.ok());
    slm_ = std::move(slm).value();
    llm_ = std::move(llm).value();
    auto rows = LoadQaJsonl(kDemo + "test.jsonl");
    ASSERT_TRUE(rows.ok());
    rows_ = std::move(rows).value();
    // The server in its namespace, with a short session TTL (a partition outlives the session).
    ASSERT_TRUE(server_.Start(net_.ip(), {"netns", "exec", net_.server_ns(), kTlrBinary, "serve", "-m",
                                          kDemo + "llm.gguf", "--host", kServerAddr, "--port", "0", "-t", "1",
                                          "--session-ttl", "1", "--accept-key", kApiKey},
                              &url_))
        << "tlr serve did not start in " << net_.server_ns();
    ASSERT_TRUE(net_.EnterDevice()) << "setns into the device's namespace failed";
  }

  std::unique_ptr<RemoteLlm> Connect(double timeout_s, double retry_after_s) {
    RemoteOptions o;
    o.http.url = url_;
    o.http.api_key = kApiKey;
    o.http.timeout_s = timeout_s;
    o.http.retries = 2;
    o.http.backoff_s = 0.05;
    o.http.sim_rtt_s = 0.02;
    o.http.sim_jitter_s = 0.01;
    o.retry_after_s = retry_after_s;
    auto remote = RemoteLlm::Connect(o, slm_->tokenizer());
    EXPECT_TRUE(remote.ok()) << remote.status().message();
    return remote.ok() ? std::move(remote).value() : nullptr;
  }

  std::vector<int32_t> Prompt(size_t row) const { return slm_->tokenizer().Encode(QaPrompt(rows_[row])); }

  NetnsPair net_;  // first: deleted last, after the server and the device's connections
  ChildProcess server_;
  std::string url_;
  std::unique_ptr<Model> slm_, llm_;
  std::vector<QaRow> rows_;
};

TEST_F(NetFaultTest, FivePercentLossForAnEvaluation) {
  auto remote = Connect(/*timeout_s=*/2, /*retry_after_s=*/0.2);
  ASSERT_TRUE(remote);
  ASSERT_TRUE(net_.SetLoss(0.05));
  DecodeOptions d;
  d.threshold = 0.8f;  // about 80% of the tokens go to the LLM
  d.pipeline.depth = 4;
  d.max_tokens = 40;
  int64_t fallbacks = 0, llm_tokens = 0;
  for (size_t row = 0; row < 8; ++row) {
    SCOPED_TRACE("question " + std::to_string(row));
    const std::vector<int32_t> prompt = Prompt(row);
    DeviceRun got = RunDevice(*slm_, remote.get(), prompt, d);
    remote->Reset();
    ASSERT_FALSE(got.ids.empty());
    DeviceRun want = ReplayInProcess(*slm_, *llm_, prompt, d, got.failed);
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.src, want.src);
    fallbacks += static_cast<int64_t>(got.failed.size());
    llm_tokens += got.count(TokenSource::kLlm);
  }
  const int64_t dropped = net_.Dropped();
  const RemoteStats rs = remote->stats();
  std::printf("5%% loss: %lld packets dropped; %lld LLM tokens, %lld fallbacks; %lld calls (%lld failed), "
              "%lld HTTP requests, %lld retries, %lld resyncs\n",
              static_cast<long long>(dropped), static_cast<long long>(llm_tokens), static_cast<long long>(fallbacks),
              static_cast<long long>(rs.calls), static_cast<long long>(rs.failed_calls),
              static_cast<long long>(rs.http_requests), static_cast<long long>(rs.retries),
              static_cast<long long>(rs.resyncs));
  EXPECT_GT(dropped, 0) << "the loss rules dropped nothing";
  EXPECT_GT(llm_tokens, 0) << "the LLM never answered through the loss";
}

TEST_F(NetFaultTest, PartitionInTheMiddleOfAGeneration) {
  using Clock = DeviceRun::Clock;
  const char* env = std::getenv("TLR_NET_PARTITION_S");
  const double partition_s = env ? std::atof(env) : 8.0;
  // No fail-fast window: during the partition every routed call tries the network and fails at
  // its 1.5 s deadline.
  auto remote = Connect(/*timeout_s=*/1.5, /*retry_after_s=*/0);
  ASSERT_TRUE(remote);
  DecodeOptions d;
  d.threshold = 0.8f;
  d.pipeline.enabled = false;  // a token's source is decided when its one call ends
  d.max_tokens = 48;
  // Questions one after the other (the demo's answers are short): the partition starts in the
  // middle of the first answer; the run goes on until an answer started after the heal is done.
  std::atomic<bool> partitioned{false}, healed{false};
  Clock::time_point part_at, heal_at;
  std::thread healer;
  std::vector<DeviceRun> runs;
  std::vector<size_t> questions;
  for (size_t row = 0; row < rows_.size() && runs.size() < 40; ++row) {
    const bool after_heal = healed.load();
    SCOPED_TRACE("question " + std::to_string(row));
    runs.push_back(RunDevice(*slm_, remote.get(), Prompt(row), d, [&](const DeviceRun& run) {
      if (partitioned || run.count(TokenSource::kLlm) < 6) return;
      ASSERT_TRUE(net_.Partition(true));
      part_at = Clock::now();
      partitioned = true;
      healer = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::duration<double>(partition_s));
        net_.Partition(false);
        heal_at = Clock::now();
        healed = true;
      });
    }));
    questions.push_back(row);
    remote->Reset();
    if (after_heal) break;
  }
  if (healer.joinable()) healer.join();
  ASSERT_TRUE(partitioned) << "the first answer ended before the partition";
  ASSERT_TRUE(healed);
  // Tokens during the partition (after a moment for a reply already received): no LLM token,
  // and the routed ones fell back. After the heal the LLM answers again, through a new session
  // (the old one expired while the device could not reach it: 404, resync).
  const Clock::time_point during_from = part_at + std::chrono::milliseconds(250);
  int llm_during = 0, fallback_during = 0, llm_after = 0, tokens = 0, fallbacks = 0;
  for (const DeviceRun& run : runs) {
    llm_during += run.count_between(TokenSource::kLlm, during_from, heal_at);
    fallback_during += run.count_between(TokenSource::kFallback, during_from, heal_at);
    llm_after += run.count_between(TokenSource::kLlm, heal_at, Clock::time_point::max());
    tokens += static_cast<int>(run.ids.size());
    fallbacks += static_cast<int>(run.failed.size());
  }
  EXPECT_EQ(llm_during, 0);
  EXPECT_GT(fallback_during, 0);
  EXPECT_GT(llm_after, 0) << "no LLM token after the partition healed";
  const RemoteStats rs = remote->stats();
  EXPECT_GE(rs.resyncs, 1);
  EXPECT_GE(rs.sessions_created, 2);  // (a third only if a starved device idled past the TTL)
  std::printf("partition %.1f s over %zu answers (%d tokens): %d fallbacks (%d during it), %d LLM tokens after it; "
              "%lld resyncs, %lld sessions\n",
              std::chrono::duration<double>(heal_at - part_at).count(), runs.size(), tokens, fallbacks, fallback_during,
              llm_after, static_cast<long long>(rs.resyncs), static_cast<long long>(rs.sessions_created));
  for (size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE("question " + std::to_string(questions[i]));
    DeviceRun want = ReplayInProcess(*slm_, *llm_, Prompt(questions[i]), d, runs[i].failed);
    EXPECT_EQ(runs[i].ids, want.ids);
    EXPECT_EQ(runs[i].src, want.src);
  }
}

}  // namespace
}  // namespace tlr
