// Chat request parsing (server layer, label unit): the OpenAI endpoint's chat_template_kwargs
// reach the template (enable_thinking, as vLLM and SGLang take it) and anything else is a
// clear 400, never a silently different prompt.
#include "server/server_requests.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace tlr::server {
namespace {

const std::string kDemo = std::string(TLR_SOURCE_DIR) + "/models/demo/";

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
    auto p = ParseCompletionRequest(nlohmann::json::parse(body), true, model_->tokenizer(), &*tmpl_);
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

}  // namespace
}  // namespace tlr::server
