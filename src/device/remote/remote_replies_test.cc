// The device's reply parsers on well-formed replies (device layer, label unit): what the
// native protocol and OpenAI-compatible engines send is read exactly; the hostile shapes are
// in remote_hostile_test.cc and the fuzzer.
#include "device/remote/remote_replies.h"

#include <gtest/gtest.h>

#include "model/gguf/gguf_reader.h"
#include "model/model.h"
#include "util/test_support.h"

namespace tlr::remote {
namespace {


TEST(RemoteReplies, NativeReplies) {
  auto next = ParseNextReply(R"({"tokens":[5,6],"logprobs":[-0.5,null],"position":14,"version":4,"lookahead":[7]})", 10);
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ(next->tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(next->lookahead, (std::vector<int32_t>{7}));
  EXPECT_EQ(next->logprobs, (std::vector<float>{-0.5f, 0.0f}));
  EXPECT_EQ(next->position, 14);
  EXPECT_EQ(next->version, 4);
  EXPECT_FALSE(ParseNextReply(R"({"tokens":[10]})", 10).ok());
  EXPECT_FALSE(next->has_work);
  // The session's work so far (the server's own count, calls nobody read included).
  next = ParseNextReply(R"({"tokens":[5],"session_work":{"prefilled":40,"generated":9,"forward_ms":12.5}})", 10);
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_TRUE(next->has_work);
  EXPECT_EQ(next->session_work.prefilled, 40);
  EXPECT_EQ(next->session_work.generated, 9);
  EXPECT_DOUBLE_EQ(next->session_work.forward_s, 0.0125);
  EXPECT_EQ(ParseNextReply(R"({"tokens":[5],"session_work":{"prefilled":-1,"generated":9}})", 10).status().message(),
            "the LLM server's reply: 'session_work': 'prefilled' must be in 0..1125899906842624");

  auto resync = ParseResyncReply(R"({"held":12,"held_hash":"0123456789abcdef","version":3})");
  ASSERT_TRUE(resync.ok());
  EXPECT_EQ(resync->held, 12);
  EXPECT_TRUE(resync->hash_ok);
  EXPECT_EQ(resync->held_hash, 0x0123456789abcdefull);

  auto session = ParseSessionReply(R"({"session":"a1","vocab_fingerprint":"ff"})");
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->session, "a1");
  EXPECT_EQ(session->vocab_fingerprint, "ff");
  EXPECT_EQ(ParseSessionReply(R"({"session":5})").status().message(),
            "the server's session reply: 'session' must be a string");
}

TEST(RemoteReplies, ErrorMessages) {
  EXPECT_EQ(ErrorMessage(R"({"error":{"message":"full"}})"), "full");
  EXPECT_EQ(ErrorMessage(R"({"error":{"message":5}})"), R"({"error":{"message":5}})");
  EXPECT_EQ(ErrorMessage("\xff"), "\xEF\xBF\xBD");
  EXPECT_EQ(ErrorMessage(std::string(1000, 'x')).size(), 200u);
}

TEST(RemoteReplies, ModelLists) {
  auto m = ParseModelsReply(R"({"data":[{"id":"a"},{"id":"b","tlr_vocab_fingerprint":"fp"}]})", "");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->model, "a");
  EXPECT_EQ(m->vocab_fingerprint, "");
  m = ParseModelsReply(R"({"data":[{"id":"a"},{"id":"b","tlr_vocab_fingerprint":"fp"}]})", "b");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->vocab_fingerprint, "fp");
}

TEST(RemoteReplies, CompletionsByIdsLabelsTextAndStream) {
  auto slm = Model::Load(kDemo + "slm.gguf");
  ASSERT_TRUE(slm.ok());
  const Tokenizer& tok = (*slm)->tokenizer();
  // tlr serve's ids win over labels and text.
  auto r = ParseCompletionReply(R"({"choices":[{"text":"x","logprobs":{"tokens":["token_id:1"]}}],"tlr":{"token_ids":[3,4]}})",
                                tok, 4);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{3, 4}));
  // vLLM's labels, with an end token added when it stopped early.
  r = ParseCompletionReply(R"({"choices":[{"text":"","finish_reason":"stop","logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}}]})",
                           tok, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{3, tok.eos()}));
  EXPECT_EQ(r->logprobs, (std::vector<float>{-1.0f}));
  // Text only: tokenized, cut to what was asked.
  r = ParseCompletionReply(R"({"choices":[{"text":" the capital of France is Paris"}]})", tok, 2);
  ASSERT_TRUE(r.ok());
  const std::vector<int32_t> text_ids = tok.Encode(" the capital of France is Paris");
  ASSERT_GE(text_ids.size(), 2u);
  EXPECT_EQ(r->tokens, std::vector<int32_t>(text_ids.begin(), text_ids.begin() + 2));
  // A stream: the events' labels in order.
  r = ParseCompletionReply(
      "data: {\"choices\":[{\"text\":\"a\",\"logprobs\":{\"tokens\":[\"token_id:3\"]}}]}\r\n\r\n: ping\n\n"
      "data: {\"choices\":[{\"text\":\"b\",\"logprobs\":{\"tokens\":[\"token_id:4\"]},\"finish_reason\":\"length\"}]}\n\n"
      "data: [DONE]\n\n",
      tok, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(r->prefilled, -1);  // no usage reported
  EXPECT_EQ(r->generated, -1);
}

// Text without id labels continues the prompt: read back with no SentencePiece dummy prefix and
// no normalization, and "length" says the engine gave all it was asked for even where the text
// reads back as fewer tokens.
TEST(RemoteReplies, TextRepliesContinueThePrompt) {
  auto f = GgufFile::Open(std::string(TLR_SHARED_DIR) + "/tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(f.ok()) << f.status().message();
  auto spm = Tokenizer::FromGguf(*f);
  ASSERT_TRUE(spm.ok()) << spm.status().message();
  const std::string text = "ndon is big";  // "Lo" + this: a word the prompt's end cut
  auto r = ParseCompletionReply(R"({"choices":[{"text":"ndon is big","finish_reason":"length"}]})", *spm, 8);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(spm->Decode(r->tokens), text);
  EXPECT_EQ(r->tokens, spm->EncodeExact(text, false));
  EXPECT_NE(spm->Piece(r->tokens[0]).front(), ' ') << "no dummy prefix in the middle of a text";
  EXPECT_LT(r->tokens.size(), 8u);
  EXPECT_TRUE(r->hit_length);
  EXPECT_FALSE(spm->IsEndOfGeneration(r->tokens.back())) << "cut at the limit: not ended";
  r = ParseCompletionReply(R"({"choices":[{"text":"ndon","finish_reason":"stop"}]})", *spm, 8);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->hit_length);
  EXPECT_EQ(r->tokens.back(), spm->eos()) << "stopped on its own: ended";
}

// What a completion cost the engine: tlr serve's own count, else OpenAI's usage less vLLM's or
// OpenAI's cached prompt tokens.
TEST(RemoteReplies, CompletionUsage) {
  auto slm = Model::Load(kDemo + "slm.gguf");
  ASSERT_TRUE(slm.ok());
  const Tokenizer& tok = (*slm)->tokenizer();
  auto r = ParseCompletionReply(
      R"({"choices":[{"text":"x"}],"tlr":{"token_ids":[3],"prefilled":2},"usage":{"prompt_tokens":50,"completion_tokens":1}})", tok, 1);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->prefilled, 2);
  EXPECT_EQ(r->generated, 1);
  r = ParseCompletionReply(
      R"({"choices":[{"text":"","logprobs":{"tokens":["token_id:3","token_id:4"]}}],"usage":{"prompt_tokens":50,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":48}}})",
      tok, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->prefilled, 2);
  EXPECT_EQ(r->generated, 2);
  r = ParseCompletionReply(R"({"choices":[{"text":"a"}],"usage":{"prompt_tokens":50,"completion_tokens":1}})", tok, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prefilled, 50);
  EXPECT_FALSE(ParseCompletionReply(R"({"choices":[{"text":"a"}],"usage":{"prompt_tokens":"x"}})", tok, 1).ok());
}

// Router labels: tlr serve's score reply and vLLM's prompt_logprobs, and every way they can be
// wrong named in the error.
TEST(RemoteReplies, TeacherForcedPredictions) {
  auto slm = Model::Load(kDemo + "slm.gguf");
  ASSERT_TRUE(slm.ok());
  const Tokenizer& tok = (*slm)->tokenizer();
  auto score = ParseScoreReply(R"({"results":[{"argmax":[3,4,5]},{"argmax":[9]}]})", {3, 1}, 10);
  ASSERT_TRUE(score.ok()) << score.status().message();
  EXPECT_EQ((*score)[0], (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ((*score)[1], (std::vector<int32_t>{9}));
  EXPECT_EQ(ParseScoreReply(R"({"results":[{"argmax":[3,4]}]})", {3}, 10).status().message(),
            "score result 0 has 2 predictions for a sequence of 3 tokens");
  EXPECT_EQ(ParseScoreReply(R"({"results":[{"argmax":[3]}]})", {1, 1}, 10).status().message(),
            "the score reply has 1 results for 2 sequences");
  EXPECT_NE(ParseScoreReply(R"({"results":[{"argmax":[10]}]})", {1}, 10).status().message().find("0..9"), std::string::npos);
  EXPECT_FALSE(ParseScoreReply(R"({"results":[{"argmax":[1]})", {1}, 10).ok());  // truncated
  EXPECT_FALSE(ParseScoreReply(R"({"results":[{}]})", {1}, 10).ok());

  // vLLM: null first, then per position a dict whose rank-1 entry is the argmax; the generated
  // token is the prediction after the whole prompt.
  const std::string ok = R"({"choices":[{"text":"x","logprobs":{"tokens":["token_id:7"]},"finish_reason":"length",
      "prompt_logprobs":[null,{"5":{"logprob":-0.1,"rank":1,"decoded_token":"a"}},
                         {"6":{"logprob":-2.0,"rank":3},"8":{"logprob":-0.2,"rank":1}}]}]})";
  auto pl = ParsePromptLogprobsReply(ok, 3, tok);
  ASSERT_TRUE(pl.ok()) << pl.status().message();
  EXPECT_EQ(*pl, (std::vector<int32_t>{5, 8, 7}));
  EXPECT_EQ(ParsePromptLogprobsReply(ok, 4, tok).status().message(), "'prompt_logprobs' has 3 entries for a prompt of 4 tokens");
  EXPECT_NE(ParsePromptLogprobsReply(R"({"choices":[{"text":"x"}]})", 1, tok).status().message().find("no 'prompt_logprobs'"),
            std::string::npos);
  EXPECT_EQ(ParsePromptLogprobsReply(R"({"choices":[{"text":"x","prompt_logprobs":[null,{"6":{"logprob":-2.0,"rank":2}}]}]})", 2,
                                     tok).status().message(),
            "prompt_logprobs[1] has no rank-1 entry (ask for prompt_logprobs >= 1)");
  EXPECT_NE(ParsePromptLogprobsReply(R"({"choices":[{"text":"x","prompt_logprobs":[null,{"99999999":{"logprob":0,"rank":1}}]}]})", 2,
                                     tok).status().message().find("not an id in the vocabulary"),
            std::string::npos);
  EXPECT_NE(ParsePromptLogprobsReply(R"({"choices":[{"text":"x","prompt_logprobs":[null,{"a":{"logprob":0,"rank":1}}]}]})", 2,
                                     tok).status().message().find("not an id in the vocabulary"),
            std::string::npos);
  EXPECT_NE(ParsePromptLogprobsReply(R"({"choices":[{"text":"x","prompt_logprobs":[null,{"5":{"logprob":0}}]}]})", 2, tok)
                .status().message().find("no integer 'rank'"),
            std::string::npos);
  EXPECT_FALSE(ParsePromptLogprobsReply(R"({"choices":[{"text":"x","prompt_logprobs":[null,)", 2, tok).ok());
}

}  // namespace
}  // namespace tlr::remote
