// Test support for the decoder (device layer, header-only; tests only): one generation run to
// its end, token by token, as the tests of the decoder, the pipeline, the vocabulary bridge and
// the server compare them.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/decode/decoder.h"

namespace tlr {

// What a generation gave, token by token.
struct DecodedTokens {
  std::vector<int32_t> ids;
  std::vector<TokenSource> src;
  std::vector<float> conf;
  std::vector<SpecOutcome> spec;
  std::vector<std::string> errors;  // the failed LLM calls' reasons (FALLBACK tokens)
  DecodeStats st;
};

// Runs `dec` over `prompt` with `d` and collects every token; a failed generation fails the
// test that called it (its tokens so far are returned).
inline DecodedTokens DecodeAll(CollabDecoder& dec, const std::vector<int32_t>& prompt, const DecodeOptions& d) {
  DecodedTokens out;
  auto st = dec.Generate(prompt, d, [&](const TokenEvent& ev) {
    out.ids.push_back(ev.id);
    out.src.push_back(ev.source);
    out.conf.push_back(ev.confidence);
    out.spec.push_back(ev.spec);
    if (!ev.llm_error.empty()) out.errors.push_back(ev.llm_error);
    return true;
  });
  EXPECT_TRUE(st.ok()) << st.status().message();
  if (st.ok()) out.st = *st;
  return out;
}

// A backend whose server is down: every call fails at once (the decoder must fall back); counts
// the calls.
class DownLlm : public LlmBackend {
 public:
  explicit DownLlm(uint64_t fp) : fp_(fp) {}
  std::shared_ptr<LlmCall> Submit(LlmRequest, std::function<void()> on_done) override {
    ++calls;
    auto c = std::make_shared<LlmCall>(std::move(on_done));
    c->Complete(Status::Error("connection refused"));
    return c;
  }
  void Reset() override {}
  uint64_t vocab_fingerprint() const override { return fp_; }
  LlmWork work() const override { return {}; }  // a server that is down does no work
  std::string name() const override { return "down"; }
  int calls = 0;

 private:
  uint64_t fp_;
};

}  // namespace tlr
