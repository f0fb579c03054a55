// The OpenAI response writer's shapes (OpenAI's API reference and vLLM's protocol).
#include "net/openai_writer.h"

#include <gtest/gtest.h>

namespace tlr {
namespace {

using nlohmann::json;

TEST(OpenAiWriterTest, CompletionAndChatResponses) {
  const OpenAiWriter text(false, 7, "m");
  json r = text.Response(json::array({text.Choice(0, "hi", "stop")}), OpenAiWriter::Usage(3, 1));
  EXPECT_EQ(r["id"], "cmpl-7");
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "m");
  EXPECT_EQ(r["choices"][0]["text"], "hi");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["usage"]["total_tokens"], 4);

  const OpenAiWriter chat(true, 8, "m");
  r = chat.Response(json::array({chat.Choice(1, "yo", "length")}), OpenAiWriter::Usage(2, 5));
  EXPECT_EQ(r["id"], "chatcmpl-8");
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["index"], 1);
  EXPECT_EQ(r["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "yo"}}));
  EXPECT_FALSE(r["choices"][0].contains("text"));
}

TEST(OpenAiWriterTest, ChatStreamChunks) {
  const OpenAiWriter chat(true, 1, "m");
  json first = chat.RoleChunk();
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  json mid = chat.Chunk("ab");
  EXPECT_EQ(mid["choices"][0]["delta"], (json{{"content", "ab"}}));
  json last = chat.Chunk("", "stop");
  EXPECT_EQ(last["choices"][0]["delta"], json::object());  // nothing left: an empty delta
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chat.Chunk("z", "length")["choices"][0]["delta"], (json{{"content", "z"}}));
  json usage = chat.UsageChunk(OpenAiWriter::Usage(1, 2));
  EXPECT_TRUE(usage["choices"].is_array() && usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(usage["id"], first["id"]);  // one id and one created time for the whole stream
  EXPECT_EQ(usage["created"], first["created"]);
}

TEST(OpenAiWriterTest, CompletionStreamChunks) {
  const OpenAiWriter text(false, 2, "m");
  json c = text.Chunk("x", nullptr, json{{"tokens", {"x"}}});
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"][0], "x");
  EXPECT_STREQ(OpenAiWriter::kDone, "data: [DONE]\n\n");
  EXPECT_STREQ(OpenAiWriter::FinishReason(true), "stop");
  EXPECT_STREQ(OpenAiWriter::FinishReason(false), "length");
}

}  // namespace
}  // namespace tlr
