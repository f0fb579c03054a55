// OpenAI request parsing (net layer, label unit): chat_template_kwargs reach the template
// (enable_thinking, as vLLM and SGLang take it) and anything else is a clear error, never a
// silently different prompt; stream_options and the sampling defaults the caller gives.
#include "net/openai_requests.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"
#include "util/test_support.h"
#include "util/utf8.h"

namespace tlr {
namespace {


// A template that shows what it was given, as Qwen3's does with enable_thinking.
constexpr const char* kThinkTemplate =
    "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{%- endfor %}"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{%- elif enable_thinking is defined %}[thinking on]{%- else %}[default]{%- endif %}";

class ChatRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::Load(kDemo + "slm.gguf");
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m).value();
    auto t = ChatTemplate::FromJinja(kThinkTemplate, std::nullopt, std::nullopt);
    ASSERT_TRUE(t.ok()) << t.status().message();
    tmpl_ = std::move(t).value();
  }
  // The prompt text the request renders, or the error message.
  std::string Render(const std::string& body) {
    auto p = ParseOpenAiRequest(nlohmann::json::parse(body), true, model_->tokenizer(), &*tmpl_, OpenAiSamplingDefaults());
    if (!p.ok()) return "error: " + p.status().message();
    return model_->tokenizer().Decode(p->prompt);
  }
  std::unique_ptr<Model> model_;
  std::optional<ChatTemplate> tmpl_;
};

TEST_F(ChatRequestTest, EnableThinkingReachesTheTemplate) {
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(Render("{" + msgs + "}"), "user: hi[default]");
  EXPECT_EQ(Render("{" + msgs + R"(,"chat_template_kwargs":{"enable_thinking":true}})"), "user: hi[thinking on]");
  EXPECT_EQ(Render("{" + msgs + R"(,"chat_template_kwargs":{"enable_thinking":false}})"),
            "user: hi<think>\n\n</think>");  // {%- strips the whitespace before it, as in Jinja
  EXPECT_EQ(Render("{" + msgs + R"(,"chat_template_kwargs":{}})"), "user: hi[default]");
}

TEST_F(ChatRequestTest, UnsupportedKwargsAreRefused) {
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(Render("{" + msgs + R"(,"chat_template_kwargs":{"tools":[]}})"),
            "error: chat_template_kwargs: 'tools' is not supported (enable_thinking is)");
  EXPECT_EQ(Render("{" + msgs + R"(,"chat_template_kwargs":{"enable_thinking":"no"}})"),
            "error: chat_template_kwargs: 'enable_thinking' must be a boolean");
  EXPECT_NE(Render("{" + msgs + R"(,"chat_template_kwargs":[1]})").find("chat_template_kwargs"), std::string::npos);
}

TEST_F(ChatRequestTest, StreamOptionsAndDefaults) {
  const nlohmann::json msgs = {{"role", "user"}, {"content", "hi"}};
  SamplerParams defaults;
  defaults.temperature = 0;
  defaults.seed = 7;
  auto parse = [&](nlohmann::json body) {
    body["messages"] = nlohmann::json::array({msgs});
    return ParseOpenAiRequest(body, true, model_->tokenizer(), &*tmpl_, defaults);
  };
  auto p = parse({{"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->stream && p->include_usage);
  EXPECT_EQ(p->sampling.temperature, 0.0f);  // the caller's defaults where the body is silent
  EXPECT_EQ(p->sampling.seed, 7u);
  EXPECT_EQ(p->max_tokens, -1);
  p = parse({{"temperature", 0.5}, {"seed", 3}, {"max_completion_tokens", 9}});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_FALSE(p->include_usage);
  EXPECT_EQ(p->sampling.temperature, 0.5f);
  EXPECT_EQ(p->sampling.seed, 3u);
  EXPECT_EQ(p->max_tokens, 9);
  p = parse({{"stream_options", {{"include_usage", "yes"}}}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("stream_options"), std::string::npos) << p.status().message();
  EXPECT_FALSE(parse({{"stream_options", 1}}).ok());
  p = parse({{"stream_options", {{"include_usage", true}}}});  // as OpenAI and vLLM: only with stream
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("'stream_options' needs \"stream\": true"), std::string::npos);
  EXPECT_FALSE(parse({{"n", 2}}).ok());
  EXPECT_FALSE(parse({{"stop", {"a", "b", "c", "d", "e"}}}).ok());
}

// Fields that would change the answer if ignored are refused naming the field; their no-op values
// (what LangChain and the openai package send by default) are taken.
TEST_F(ChatRequestTest, FieldsThatWouldChangeTheAnswerAreRefusedUnlessNoOps) {
  const nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  auto parse = [&](nlohmann::json body, bool chat) {
    if (chat) {
      body["messages"] = msgs;
    } else {
      body["prompt"] = "hi";
    }
    return ParseOpenAiRequest(body, chat, model_->tokenizer(), &*tmpl_, OpenAiSamplingDefaults());
  };
  using J = nlohmann::json;
  for (bool chat : {true, false}) {
    for (const J& ok : {J{{"frequency_penalty", 0}, {"presence_penalty", 0.0}, {"logit_bias", J::object()}},
                        J{{"logit_bias", nullptr}, {"tools", J::array()}, {"tool_choice", "none"}},
                        J{{"response_format", {{"type", "text"}}}, {"tool_choice", "auto"}, {"user", "u"}},
                        J{{"model", "any-name"}}, J{{"model", nullptr}}}) {
      auto p = parse(ok, chat);
      EXPECT_TRUE(p.ok()) << ok.dump() << ": " << p.status().message();
    }
    for (const auto& [bad, want] : std::vector<std::pair<J, std::string>>{
             {{{"frequency_penalty", 0.5}}, "'frequency_penalty' is not supported"},
             {{{"presence_penalty", -1}}, "'presence_penalty' is not supported"},
             {{{"logit_bias", {{"340", -100}}}}, "'logit_bias' is not supported"},
             {{{"logit_bias", "garbage"}}, "'logit_bias' is not supported"},
             {{{"response_format", {{"type", "json_object"}}}}, "'response_format' is not supported"},
             {{{"tools", J::array({{{"type", "function"}}})}}, "'tools' is not supported"},
             {{{"tool_choice", "required"}}, "'tool_choice' is not supported"},
             {{{"functions", J::array({J::object()})}}, "'functions' is not supported"},
             {{{"model", {{"name", "x"}}}}, "'model' must be a string"}}) {
      auto p = parse(bad, chat);
      ASSERT_FALSE(p.ok()) << bad.dump();
      EXPECT_NE(p.status().message().find(want), std::string::npos) << p.status().message();
    }
  }
  EXPECT_TRUE(parse({{"suffix", ""}, {"best_of", 1}}, false).ok());
  EXPECT_NE(parse({{"suffix", " END"}}, false).status().message().find("'suffix' is not supported"), std::string::npos);
  EXPECT_NE(parse({{"best_of", 3}}, false).status().message().find("best_of = 1"), std::string::npos);
  EXPECT_NE(parse({{"top_logprobs", 2}}, true).status().message().find("needs \"logprobs\": true"), std::string::npos);
  EXPECT_TRUE(parse({{"top_logprobs", 2}, {"logprobs", true}}, true).ok());
  // vLLM's name for the repetition penalty is taken as llama.cpp's.
  auto rp = parse({{"repetition_penalty", 1.3}}, true);
  ASSERT_TRUE(rp.ok()) << rp.status().message();
  EXPECT_FLOAT_EQ(rp->sampling.repeat_penalty, 1.3f);
}

TEST_F(ChatRequestTest, StopStringsCutTheText) {
  const Tokenizer& tok = model_->tokenizer();
  const std::vector<int32_t> ids = tok.Encode("the answer is B because", false, false);
  CompletionText text(tok, {"is B"});
  bool go = true;
  for (int32_t id : ids) {
    if (!(go = text.Push(id, false))) break;
  }
  EXPECT_FALSE(go);
  EXPECT_TRUE(text.stopped());
  text.Finish();
  EXPECT_EQ(text.text(), "the answer ");
  EXPECT_EQ(text.TakeReady(true), "the answer ");
}

// A streamed text with stop strings holds back a possible stop's prefix in whole characters: each
// piece is valid UTF-8 (a piece cut inside a character reached clients as U+FFFD).
TEST_F(ChatRequestTest, StreamedPiecesWithStopStringsAreWholeCharacters) {
  const Tokenizer& tok = model_->tokenizer();
  const std::string want = "caf\u00e9 \u0434\u0430 \u4e2d\u6587 \U0001f600 na\u00efve";
  for (const std::vector<std::string>& stop : {std::vector<std::string>{"\n\n"}, {"xyz"}, {"abcd", "\n"}}) {
    CompletionText text(tok, stop);
    std::string streamed;
    for (int32_t id : tok.Encode(want, false, false)) {
      ASSERT_TRUE(text.Push(id, false));
      const std::string piece = text.TakeReady(false);
      EXPECT_TRUE(IsValidUtf8(piece)) << "stop of " << stop[0].size() << " bytes: a piece of " << piece.size() << " bytes";
      streamed += piece;
    }
    text.Finish();
    streamed += text.TakeReady(true);
    EXPECT_EQ(streamed, want);
  }
}

}  // namespace

}  // namespace tlr
