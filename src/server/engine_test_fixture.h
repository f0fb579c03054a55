// The LlmEngine tests' fixture (server layer tests): the demo LLM, prompts, the greedy reference
// from a fresh in-process backend, native-protocol calls and devices on threads. Shared by
// llm_engine_test.cc and prefix_sharing_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "device/llm/llm_backend.h"
#include "net/protocol.h"
#include "server/llm_engine.h"
#include "util/test_support.h"

namespace tlr {

inline const std::string kLlm = kDemo + "llm.gguf";

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { llm_ = Model::Load(kLlm)->release(); }
  static void TearDownTestSuite() { delete llm_; }

  std::vector<int32_t> Prompt(const std::string& text) const { return llm_->tokenizer().Encode(text, true); }
  // A question with its five choices, as the demo LLM was trained to answer: it goes on with
  // "Answer: ..." for many tokens (a bare question may end the turn at once, the end token
  // stopping the reference early).
  std::vector<int32_t> Question(const std::string& q) const {
    return Prompt("Question: " + q + "\nA. marsh\nB. stone\nC. cooking\nD. forest\nE. glass\n");
  }
  // Greedy next tokens from scratch (a fresh in-process backend).
  std::vector<int32_t> Reference(const std::vector<int32_t>& ctx, int n) const {
    InProcessLlm ref(*llm_, 1, 1024);
    return ref.Next(ctx, n, SamplerParams{})->tokens;
  }
  static NextRequest Call(const std::string& session, const std::vector<int32_t>& held, const std::vector<int32_t>& ctx,
                          int n, const std::string& rid) {
    NextRequest r;
    r.session = session;
    r.request_id = rid;
    r.base = static_cast<int64_t>(held.size());
    r.prefix_hash = TokenPrefixHash(held);
    r.append.assign(ctx.begin() + static_cast<std::ptrdiff_t>(held.size()), ctx.end());
    r.n = n;
    return r;
  }
  // One thread per prompt, each with its own session, making n_calls one-token calls and
  // keeping each answer (the device takes every LLM token). With `retry`, as a device under a
  // tight KV budget: a conflict (evicted) resends everything, an overload waits 1 ms and
  // retries. Returns the answers; a failed device leaves its message in (*errors)[d].
  std::vector<std::vector<int32_t>> RunDevices(LlmEngine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                               int n_calls, bool retry, std::vector<std::string>* errors) const {
    const size_t n = prompts.size();
    std::vector<std::vector<int32_t>> answers(n);
    errors->assign(n, "");
    std::vector<std::thread> devices;
    for (size_t d = 0; d < n; ++d) {
      devices.emplace_back([&, d] {
        SessionInfo info;
        if (!engine.CreateSession(&info).ok()) {
          (*errors)[d] = "no session";
          return;
        }
        std::vector<int32_t> ctx = prompts[d], held;
        for (int k = 0, tries = 0; k < n_calls; ++tries) {
          EngineResult r = engine.Next(Call(info.id, held, ctx, 1, std::to_string(k)));
          if (retry && tries < 100000 && r.code == EngineCode::kConflict) {
            held.clear();
            continue;
          }
          if (retry && tries < 100000 && r.code == EngineCode::kOverloaded) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            continue;
          }
          if (!r.ok()) {
            (*errors)[d] = r.message;
            return;
          }
          held = ctx;
          ctx.push_back(r.reply.tokens[0]);
          answers[d].push_back(r.reply.tokens[0]);
          ++k;
        }
      });
    }
    for (auto& t : devices) t.join();
    return answers;
  }
  inline static Model* llm_ = nullptr;
};

}  // namespace tlr
