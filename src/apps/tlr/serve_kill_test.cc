// The real `tlr serve` binary killed with SIGKILL in the middle of a pipelined generation: the
// device finishes the request with FALLBACK tokens and does not crash; after a restart on the
// same port the backend resyncs (a new session) and the output is exactly what a blocking run
// in process gives when the LLM calls at the same positions fail.
#include <gtest/gtest.h>

#include "apps/tlr/child_process.h"
#include "apps/tlr/device_run.h"
#include "device/remote/remote_llm.h"
#include "routing/qa.h"

namespace tlr {
namespace {

// `tlr serve` as a child process; Start waits for its "listening on URL" line.
class ServerProcess : public ChildProcess {
 public:
  bool Start(int port, std::string* url) {
    return ChildProcess::Start(kTlrBinary, {"serve", "-m", kDemo + "llm.gguf", "--port", std::to_string(port), "-t", "1"}, url);
  }
};

TEST(ServeKillTest, DeviceFallsBackAndResyncsAfterRestart) {
  auto slm = Model::Load(kDemo + "slm.gguf");
  auto llm = Model::Load(kDemo + "llm.gguf");
  ASSERT_TRUE(slm.ok() && llm.ok());
  auto rows = LoadQaJsonl(kDemo + "test.jsonl");
  ASSERT_TRUE(rows.ok());
  const std::vector<int32_t> prompt = (*slm)->tokenizer().Encode(QaPrompt((*rows)[5]));

  ServerProcess server;
  std::string url;
  ASSERT_TRUE(server.Start(0, &url)) << "tlr serve did not start";
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  RemoteOptions o;
  o.http.url = url;
  o.http.timeout_s = 2;
  o.http.retries = 1;
  o.http.backoff_s = 0.01;
  o.retry_after_s = 0;  // every call after the restart reaches the new server: a fail-fast window
                        // (doubling on each failed probe) could outlast the rest of the request
  o.http.sim_rtt_s = 0.02;  // calls are still on the way when the server dies
  auto remote = RemoteLlm::Connect(o, (*slm)->tokenizer());
  ASSERT_TRUE(remote.ok()) << remote.status().message();

  DecodeOptions d;
  d.threshold = 0.8f;  // a random router: about 80% of the tokens go to the LLM
  d.pipeline.depth = 4;
  d.pipeline.lookahead = 2;
  d.max_tokens = 48;
  bool killed = false, restarted = false;
  size_t restart_at = 0;
  DeviceRun got = RunDevice(**slm, remote->get(), prompt, d, [&](const DeviceRun& run) {
    if (!killed && run.count(TokenSource::kLlm) == 3) {
      server.Kill();  // SIGKILL: no goodbye, sockets reset
      killed = true;
    } else if (killed && !restarted && run.failed.size() == 3) {
      std::string again;
      EXPECT_TRUE(server.Start(port, &again)) << "restart on port " << port;
      restarted = true;
      restart_at = run.ids.size();
    }
  });
  ASSERT_TRUE(killed && restarted);
  EXPECT_EQ(got.stats.fallbacks, static_cast<int64_t>(got.failed.size()));
  EXPECT_GE(got.failed.size(), 3u);
  // After the restart the LLM answered again, through a new session (the resync).
  EXPECT_GT(got.count(TokenSource::kLlm, restart_at), 0)
      << "no LLM token after the restart at " << restart_at << " of " << got.ids.size() << " tokens";
  EXPECT_GE((*remote)->stats().resyncs, 1);
  EXPECT_EQ((*remote)->stats().sessions_created, 2);

  // The same request in process, blocking, with the LLM calls at the same positions failing,
  // gives the same tokens.
  DeviceRun want = ReplayInProcess(**slm, **llm, prompt, d, got.failed);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.src, want.src);
}

}  // namespace
}  // namespace tlr
