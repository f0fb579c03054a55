// A device against real `tlr serve` processes, for the tests that break the network or the
// servers under it (serve_kill_test, net_fault_test, failover_test; apps layer, tests only).
// RunDevice runs one request through the collaborative decoder and records every token's source
// and time; ReplayInProcess runs the same request in this process, blocking, with the LLM calls
// at the positions where the device fell back failing: what the device must have produced.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "device/decode/decoder.h"
#include "device/llm/llm_backend.h"
#include "ops/thread_pool.h"
#include "routing/router.h"
#include "util/test_support.h"

namespace tlr {

inline const std::string kTlrBinary = std::string(TLR_BIN_DIR) + "/tlr";

// Another backend with the calls for the given positions (generated tokens before them)
// failing, as when the server was unreachable for them.
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
  LlmWork work() const override { return inner_->work(); }
  std::string name() const override { return "failing"; }

 private:
  LlmBackend* inner_;
  size_t prompt_len_;
  std::set<size_t> fail_;
};

// One request's tokens as the device emitted them.
struct DeviceRun {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;    // of the request
  std::vector<int32_t> ids;
  std::vector<TokenSource> src;
  std::vector<double> at_s;   // when each token was emitted, since the start
  std::set<size_t> failed;    // positions that fell back (FALLBACK tokens)
  DecodeStats stats;
  int count(TokenSource s, size_t from = 0, size_t to = SIZE_MAX) const {
    int n = 0;
    for (size_t i = from; i < src.size() && i < to; ++i) n += src[i] == s;
    return n;
  }
  // Tokens of source `s` emitted in the time interval [from, to).
  int count_between(TokenSource s, Clock::time_point from, Clock::time_point to) const {
    int n = 0;
    for (size_t i = 0; i < src.size(); ++i) {
      const Clock::time_point t = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at_s[i]));
      n += src[i] == s && t >= from && t < to;
    }
    return n;
  }
};

// The random router every run uses (seeded: the same decisions for the same positions).
inline constexpr uint64_t kRouterSeed = 5;

// Runs `prompt` through the decoder over `llm`; `on_token` (may be empty) sees the run after
// each token. Fails the calling test when the decoder returns an error.
inline DeviceRun RunDevice(const Model& slm, LlmBackend* llm, const std::vector<int32_t>& prompt,
                           const DecodeOptions& d, const std::function<void(const DeviceRun&)>& on_token = {}) {
  ThreadPool pool(1);
  auto router = Router::Builtin(RouterKind::kRandom, kRouterSeed);
  DeviceRun run;
  if (!router.ok()) {
    ADD_FAILURE() << router.status().message();
    return run;
  }
  CollabDecoder dec(slm, &*router, llm, &pool);
  const auto start = run.start = DeviceRun::Clock::now();
  auto st = dec.Generate(prompt, d, [&](const TokenEvent& ev) {
    if (ev.source == TokenSource::kFallback) run.failed.insert(run.ids.size());
    run.ids.push_back(ev.id);
    run.src.push_back(ev.source);
    run.at_s.push_back(std::chrono::duration<double>(DeviceRun::Clock::now() - start).count());
    if (on_token) on_token(run);
    return true;
  });
  if (!st.ok()) {
    ADD_FAILURE() << "the request did not complete: " << st.status().message();
  } else {
    run.stats = *st;
  }
  return run;
}

// The same request in process, blocking, with the calls at `failed` failing.
inline DeviceRun ReplayInProcess(const Model& slm, const Model& llm, const std::vector<int32_t>& prompt,
                                 DecodeOptions d, const std::set<size_t>& failed) {
  InProcessLlm local(llm, 1, static_cast<int64_t>(prompt.size()) + d.max_tokens + 64);
  FailingPositions failing(&local, prompt.size(), failed);
  d.pipeline.enabled = false;
  d.sim_slm_s = 0;
  return RunDevice(slm, &failing, prompt, d);
}

}  // namespace tlr
