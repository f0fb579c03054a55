// The real `tlr serve` binary killed with SIGKILL in the middle of a pipelined generation: the
// device finishes the request with FALLBACK tokens and does not crash; after a restart on the
// same port the backend resyncs (a new session) and the output is exactly what a blocking run
// in process gives when the LLM calls at the same positions fail.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "apps/tlr/child_process.h"
#include "ops/thread_pool.h"
#include "routing/qa.h"
#include "routing/router.h"
#include "system/decoder.h"
#include "system/remote_llm.h"

namespace tlr {
namespace {

const std::string kDemo = std::string(TLR_SOURCE_DIR) + "/models/demo/";
const std::string kTlr = std::string(TLR_BIN_DIR) + "/tlr";

// `tlr serve` as a child process; Start waits for its "listening on URL" line.
class ServerProcess : public ChildProcess {
 public:
  bool Start(int port, std::string* url) {
    return ChildProcess::Start(kTlr, {"serve", "-m", kDemo + "llm.gguf", "--port", std::to_string(port), "-t", "1"}, url);
  }
};

// The in-process LLM with the calls for the given positions (generated tokens before them)
// failing, as when the server was down.
class FailingPositions : public LlmBackend {
 public:
  FailingPositions(LlmBackend* inner, size_t prompt_len, std::set<size_t> fail)
      : inner_(inner), prompt_len_(prompt_len), fail_(std::move(fail)) {}
  std::shared_ptr<LlmCall> Submit(LlmRequest req, std::function<void()> on_done) override {
    if (fail_.count(req.context.size() - prompt_len_)) {
      auto c = std::make_shared<LlmCall>(std::move(on_done));
      c->Complete(Status::Error("down"));
      return c;
    }
    return inner_->Submit(std::move(req), std::move(on_done));
  }
  void Reset() override { inner_->Reset(); }
  uint64_t vocab_fingerprint() const override { return inner_->vocab_fingerprint(); }
  std::string name() const override { return "failing"; }

 private:
  LlmBackend* inner_;
  size_t prompt_len_;
  std::set<size_t> fail_;
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
  o.retry_after_s = 0.01;
  o.http.sim_rtt_s = 0.02;  // calls are still on the way when the server dies
  auto remote = RemoteLlm::Connect(o, (*slm)->tokenizer());
  ASSERT_TRUE(remote.ok()) << remote.status().message();

  DecodeOptions d;
  d.threshold = 0.8f;  // a random router: about 80% of the tokens go to the LLM
  d.pipeline.depth = 4;
  d.pipeline.lookahead = 2;
  d.max_tokens = 48;
  ThreadPool pool(1);
  auto router = Router::Builtin(RouterKind::kRandom, 5);
  ASSERT_TRUE(router.ok());
  std::vector<int32_t> ids;
  std::vector<TokenSource> src;
  int routed_ok = 0, fallbacks = 0;
  bool killed = false, restarted = false;
  size_t restart_at = 0;
  std::set<size_t> failed_positions;
  CollabDecoder dec(**slm, &*router, remote->get(), &pool);
  auto st = dec.Generate(prompt, d, [&](const TokenEvent& ev) {
    if (ev.source == TokenSource::kFallback) {
      failed_positions.insert(ids.size());
      ++fallbacks;
    } else if (ev.source == TokenSource::kLlm) {
      ++routed_ok;
    }
    ids.push_back(ev.id);
    src.push_back(ev.source);
    if (!killed && routed_ok == 3) {
      server.Kill();  // SIGKILL: no goodbye, sockets reset
      killed = true;
    } else if (killed && !restarted && fallbacks == 3) {
      std::string again;
      EXPECT_TRUE(server.Start(port, &again)) << "restart on port " << port;
      restarted = true;
      restart_at = ids.size();
    }
    return true;
  });
  ASSERT_TRUE(st.ok()) << st.status().message();
  ASSERT_TRUE(killed && restarted);
  EXPECT_EQ(st->fallbacks, fallbacks);
  EXPECT_GE(fallbacks, 3);
  // After the restart the LLM answered again, through a new session (the resync).
  int llm_after = 0;
  for (size_t i = restart_at; i < src.size(); ++i) llm_after += src[i] == TokenSource::kLlm;
  EXPECT_GT(llm_after, 0) << "no LLM token after the restart";
  EXPECT_GE((*remote)->stats().resyncs, 1);
  EXPECT_EQ((*remote)->stats().sessions_created, 2);

  // The same request in process, blocking, with the LLM calls at the same positions failing,
  // gives the same tokens.
  InProcessLlm local(**llm, 1, 1024);
  FailingPositions failing(&local, prompt.size(), failed_positions);
  auto router2 = Router::Builtin(RouterKind::kRandom, 5);
  CollabDecoder ref(**slm, &*router2, &failing, &pool);
  d.pipeline.enabled = false;
  std::vector<int32_t> want_ids;
  std::vector<TokenSource> want_src;
  auto st2 = ref.Generate(prompt, d, [&](const TokenEvent& ev) {
    want_ids.push_back(ev.id);
    want_src.push_back(ev.source);
    return true;
  });
  ASSERT_TRUE(st2.ok());
  EXPECT_EQ(ids, want_ids);
  EXPECT_EQ(src, want_src);
}

}  // namespace
}  // namespace tlr
