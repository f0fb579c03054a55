// Routing to a `tlr serve` whose LLM has another vocabulary than the device's SLM (label server;
// the tokenizer.json files the tokenizer tests fetch): random tiny models with Gemma 3's and
// Qwen3's real vocabularies, the real server on a loopback port.
//   - the device fetches the server's vocabulary (--llm-tokenizer server) or reads it from a
//     file, sends contexts in the LLM's tokens with the held-back bytes (prefix_bytes), and gets
//     the same tokens and sources as with the LLM in process, pipeline on and off, greedy and
//     sampled; the server prefilled about the final context once;
//   - over the OpenAI backend (no constraint: check and trim), text prompts give what token-id
//     prompts give;
//   - a tokenizer file that is not the server's, a damaged one, and malformed prefix_bytes are
//     clear errors; replies say how many tokens spelled the bytes; Range headers are ignored.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "device/decode/decoder.h"
#include "device/session/llm_factory.h"
#include "model/random_pair_fixture.h"
#include "ops/thread_pool.h"
#include "server/llm_engine.h"
#include "server/llm_server.h"
#include "util/temp_dir.h"
#include "device/decode/decode_test_support.h"
#include "model/tokenizer/tokenizer_test_support.h"

namespace tlr {
namespace {


class ServerBridgeTest : public CrossVocabPairTest {
 protected:
  void SetUp() override {
    engine_ = std::make_unique<LlmEngine>(*llm_, nullptr, EngineLimits{}, &metrics_);
    ServerOptions so;
    so.port = 0;
    server_ = std::make_unique<LlmServer>(engine_.get(), &metrics_, so);
    ASSERT_TRUE(server_->Start().ok());
    url_ = "http://127.0.0.1:" + std::to_string(server_->port());
  }

  using Out = DecodedTokens;
  // One generation; `server_tokenizer` empty: the LLM in process.
  // `protocol`, `text_prompt`: how the device talks to the server.
  Out Run(const std::string& server_tokenizer, const std::string& prompt, bool pipeline, float temperature,
          RemoteProtocol protocol = RemoteProtocol::kTlr, bool text_prompt = false) {
    LlmConfig config;
    const Model* in_process = server_tokenizer.empty() ? llm_ : nullptr;
    if (!server_tokenizer.empty()) {
      config.remote.http.url = url_;
      config.remote.http.timeout_s = 10;
      config.remote.protocol = protocol;
      config.remote.text_prompt = text_prompt;
      config.llm_tokenizer = server_tokenizer;
    }
    auto stack = LlmStack::Create(config, in_process, 1024, slm_->tokenizer());
    EXPECT_TRUE(stack.ok()) << stack.status().message();
    if (!stack.ok()) return {};
    EXPECT_NE((*stack)->bridge(), nullptr);
    auto router = Router::Builtin(RouterKind::kRandom, 5);
    CollabDecoder dec(*slm_, &*router, (*stack)->backend(), &pool_);
    DecodeOptions d;
    d.threshold = 0.4f;
    d.max_tokens = 32;
    d.pipeline.enabled = pipeline;
    d.sampling.temperature = temperature;
    d.sampling.seed = 5;
    return DecodeAll(dec, slm_->tokenizer().Encode(prompt, true), d);
  }

  ThreadPool pool_{2};
  Metrics metrics_;
  std::unique_ptr<LlmEngine> engine_;
  std::unique_ptr<LlmServer> server_;
  std::string url_;
  // The SLM has Gemma 3's vocabulary, the server's LLM Qwen3's.
  const Model* const slm_ = gemma_;
  const Model* const llm_ = qwen_;
};

TEST_F(ServerBridgeTest, SameTokensAsInProcessWithTheServersVocabulary) {
  // The LLM's GGUF as the tokenizer file (a tokenizer.json converted into GGUF loses its NFC
  // normalizer, so the server's vocabulary is the GGUF's; see tokenizer_npm_test).
  const std::string tokenizer_file = dir_->File("qwen.gguf");
  int llm_tokens = 0;
  for (const std::string prompt : {"Hello world, the quick brown fox", "東京は 😀 今日は晴れ", "Привет, мир! café"}) {
    for (float temp : {0.0f, 0.8f}) {
      if (temp > 0 && prompt[0] == 'H') continue;  // two prompts sampled (make test's time)
      SCOPED_TRACE(prompt + (temp > 0 ? " sampled" : " greedy"));
      const Out local = Run("", prompt, false, temp);
      for (const std::string& tok : {std::string("server"), tokenizer_file}) {
        for (bool pipeline : {false, true}) {
          if (!pipeline && tok != "server") continue;  // blocking: once is enough; the pipeline with both
          const Out remote = Run(tok, prompt, pipeline, temp);
          EXPECT_EQ(remote.ids, local.ids) << tok << (pipeline ? " pipeline" : "");
          EXPECT_EQ(remote.src, local.src) << tok << (pipeline ? " pipeline" : "");
        }
      }
      for (TokenSource s : local.src) llm_tokens += s == TokenSource::kLlm;
    }
  }
  EXPECT_GT(llm_tokens, 10);
}

TEST_F(ServerBridgeTest, OpenAiBackendWithTokenIdsOrTextPrompts) {
  // An OpenAI-compatible engine has no constraint: the held-back word is checked and trimmed
  // (random weights never reproduce it: every routed call falls back, for the reason given).
  // The bridge's LLM tokens are the text's own encoding, so a text prompt (the engine encodes
  // it again) gives what token ids give.
  const std::string tokenizer_file = dir_->File("qwen.gguf");
  // One call without the bridge: the engine answers a text prompt as it answers its token ids.
  std::string replies[2];
  for (bool text_prompt : {false, true}) {
    LlmConfig config;
    config.remote.http.url = url_;
    config.remote.protocol = RemoteProtocol::kOpenAi;
    config.remote.text_prompt = text_prompt;
    config.llm_tokenizer = tokenizer_file;
    auto stack = LlmStack::Create(config, nullptr, 0, slm_->tokenizer());
    ASSERT_TRUE(stack.ok()) << stack.status().message();
    auto r = (*stack)->unbridged()->Next(llm_->tokenizer().Encode("Привет, мир! 東京は 😀", true), 6, SamplerParams{});
    ASSERT_TRUE(r.ok()) << r.status().message();
    replies[text_prompt] = llm_->tokenizer().Decode(r->tokens);
  }
  EXPECT_FALSE(replies[0].empty());
  EXPECT_EQ(replies[1], replies[0]);
  for (const std::string prompt : {"Hello world, the quick brown fox", "東京は 😀 今日は晴れ", "Привет, мир! café"}) {
    SCOPED_TRACE(prompt);
    const Out ids = Run(tokenizer_file, prompt, false, 0.0f, RemoteProtocol::kOpenAi, false);
    const Out text = Run(tokenizer_file, prompt, false, 0.0f, RemoteProtocol::kOpenAi, true);
    const Out text_pipelined = Run(tokenizer_file, prompt, true, 0.0f, RemoteProtocol::kOpenAi, true);
    EXPECT_EQ(text.ids, ids.ids);
    EXPECT_EQ(text.src, ids.src);
    EXPECT_EQ(text_pipelined.ids, text.ids);
    EXPECT_EQ(text_pipelined.src, text.src);
    for (const std::string& e : text.errors) {
      // What an unconstrained reply can do: not reproduce the held-back text, stop inside an SLM
      // token, or (random weights) choose bytes that are not UTF-8.
      EXPECT_TRUE(e.find("held-back") != std::string::npos || e.find("not yet one whole SLM token") != std::string::npos ||
                  e.find("ill-formed UTF-8") != std::string::npos)
          << e;
    }
  }
}

TEST_F(ServerBridgeTest, WrongOrDamagedTokenizersAndBadPrefixBytesAreErrors) {
  // The SLM's own vocabulary is not the server's.
  const std::string gemma = NpmTokenizerDir() + "tokenizer-gemma3/models/tokenizer.json";
  LlmConfig config;
  config.remote.http.url = url_;
  config.llm_tokenizer = gemma;
  auto s = LlmStack::Create(config, nullptr, 0, slm_->tokenizer());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("different vocabulary"), std::string::npos) << s.status().message();
  // A damaged file.
  const std::string bad = dir_->File("bad.json");
  std::ofstream(bad) << "{\"model\": {\"type\": \"BPE\", \"vocab\": ";
  config.llm_tokenizer = bad;
  s = LlmStack::Create(config, nullptr, 0, slm_->tokenizer());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("the LLM tokenizer"), std::string::npos) << s.status().message();
  // The server's vocabulary endpoint and malformed prefix_bytes.
  httplib::Client c("127.0.0.1", server_->port());
  auto v = c.Get("/tlr/v1/vocabulary");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, 200);
  EXPECT_EQ(v->body.compare(0, 4, "GGUF"), 0);
  auto session = c.Post("/tlr/v1/sessions", "{}", "application/json");
  ASSERT_TRUE(session);
  const std::string id = nlohmann::json::parse(session->body)["session"];
  for (const std::string prefix : {"[300]", "[\"a\"]", "[-1]", "[1.5]", "\"Hi\""}) {
    const std::string body = "{\"session\": \"" + id + "\", \"append\": [1, 2], \"prefix_bytes\": " + prefix + "}";
    auto r = c.Post("/tlr/v1/next", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << prefix << ": " << r->body;
  }
  std::string many = "[";
  for (int i = 0; i < 257; ++i) many += std::string(i ? "," : "") + "65";
  auto r = c.Post("/tlr/v1/next", "{\"session\": \"" + id + "\", \"append\": [1, 2], \"prefix_bytes\": " + many + "]}",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  // A good one is answered with the bytes spelled first.
  r = c.Post("/tlr/v1/next", "{\"session\": \"" + id + "\", \"append\": [1, 2], \"n\": 1, \"prefix_bytes\": [72, 105]}",
             "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto j = nlohmann::json::parse(r->body);
  std::string spelled;
  for (int32_t t : j["tokens"]) spelled += llm_->tokenizer().Piece(t);
  EXPECT_EQ(spelled.compare(0, 2, "Hi"), 0) << spelled;
  // How many tokens spelled them, and alternatives only among tokens the constraint allows.
  r = c.Post("/tlr/v1/next", "{\"session\": \"" + id + "\", \"append\": [1, 2], \"n\": 2, \"top_logprobs\": 20, "
             "\"prefix_bytes\": [255]}", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto k = nlohmann::json::parse(r->body);
  ASSERT_TRUE(k.contains("spelled")) << r->body;
  const int n_spelled = k["spelled"].get<int>();
  EXPECT_GE(n_spelled, 1);
  EXPECT_EQ(k["tokens"].size(), static_cast<size_t>(n_spelled + 2)) << r->body;
  for (const auto& per : k["top_logprobs"]) {
    for (const auto& alt : per) EXPECT_TRUE(alt["logprob"].is_number()) << r->body;
  }
  // The element that is wrong is named.
  r = c.Post("/tlr/v1/next", "{\"session\": \"" + id + "\", \"append\": [1], \"prefix_bytes\": [65, 66, 300]}",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("element 2 is 300"), std::string::npos) << r->body;
  // Range headers are ignored: the whole representation, once, however many ranges are asked.
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 500; ++i) ranges += ",0-";
  for (const char* path : {"/tlr/v1/vocabulary", "/tlr/v1/info", "/health"}) {
    auto whole = c.Get(path);
    auto ranged = c.Get(path, {{"Range", ranges}});
    ASSERT_TRUE(whole && ranged) << path;
    EXPECT_EQ(ranged->status, 200) << path;
    EXPECT_EQ(ranged->body.size(), whole->body.size()) << path;
  }
}

}  // namespace
}  // namespace tlr
