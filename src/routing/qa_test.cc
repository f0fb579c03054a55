// Question sets: both JSONL schemas, the real CommonsenseQA dev set, errors, prompts and
// answer extraction.
#include "routing/qa.h"

#include <gtest/gtest.h>

#include <fstream>

#include "util/temp_dir.h"

namespace tlr {
namespace {

const char* kFlat =
    R"({"id": "q1", "question": "Where would you find a zinthar?", "question_concept": "zinthar", )"
    R"("choices": {"label": ["A", "B", "C", "D", "E"], "text": ["marsh", "forest", "cave", "river", "beach"]}, )"
    R"("answerKey": "A"})";

QaRow Row() {
  auto r = ParseQaRow(kFlat);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

TEST(Qa, ParsesFlattenedSchema) {
  QaRow r = Row();
  EXPECT_EQ(r.id, "q1");
  EXPECT_EQ(r.question_concept, "zinthar");
  ASSERT_EQ(r.texts.size(), 5u);
  EXPECT_EQ(r.texts[2], "cave");
  EXPECT_EQ(r.answer_key, "A");
  EXPECT_EQ(QaPrompt(r),
            "Question: Where would you find a zinthar?\nA. marsh\nB. forest\nC. cave\nD. river\nE. beach\n");
  EXPECT_EQ(QaInstructPrompt(r), QaPrompt(r) + "Answer with the letter of the correct choice, then explain briefly.");
  // A context (a shared document) comes first, then a blank line; not a string: an error.
  std::string with = kFlat;
  with.insert(1, R"("context": "The zinthar is good for fishing.", )");
  auto c = ParseQaRow(with);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(QaPrompt(*c), "The zinthar is good for fishing.\n\n" + QaPrompt(r));
  with = kFlat;
  with.insert(1, R"("context": 3, )");
  EXPECT_FALSE(ParseQaRow(with).ok());
}

TEST(Qa, ParsesNestedSchema) {
  auto r = ParseQaRow(
      R"({"answerKey": "B", "id": "x", "question": {"question_concept": "c", "choices": [)"
      R"({"label": "A", "text": "ignore"}, {"label": "B", "text": "stone"}], "stem": "What?"}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->question, "What?");
  EXPECT_EQ(r->labels, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(r->texts[1], "stone");
  EXPECT_EQ(r->answer_key, "B");
}

TEST(Qa, LoadsTheRealCommonsenseQaDevSet) {
  auto rows = LoadQaJsonl(std::string(TLR_SHARED_DIR) + "/datasets/commonsenseqa_dev.jsonl");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1221u);
  for (const QaRow& r : *rows) {
    ASSERT_EQ(r.labels.size(), 5u) << r.id;
    ASSERT_FALSE(r.answer_key.empty()) << r.id;
  }
}

TEST(Qa, BadInputIsAnErrorNamingTheLine) {
  TempDir dir;
  const std::string path = dir.File("bad.jsonl");
  std::ofstream(path) << kFlat << "\n\n" << R"({"id": "2", "question": "q", "choices": {"label": ["A"]}})" << "\n";
  auto rows = LoadQaJsonl(path);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("line 3"), std::string::npos) << rows.status().message();
  for (const char* bad : {"", "[1]", "{", R"({"question": 5})", R"({"question": "q"})",
                          R"({"question": "q", "choices": {"label": ["A", "B"], "text": ["x", 3]}})",
                          R"({"question": "q", "choices": {"label": ["A", "B"], "text": ["x", "y"]}, "answerKey": "Z"})",
                          R"({"question": {"choices": []}})"}) {
    EXPECT_FALSE(ParseQaRow(bad).ok()) << bad;
  }
  EXPECT_FALSE(LoadQaJsonl(dir.File("missing.jsonl")).ok());
}

TEST(Qa, ExtractsStatedLetters) {
  const QaRow r = Row();
  EXPECT_EQ(ExtractChoice("The answer is C.", r), "C");
  EXPECT_EQ(ExtractChoice("Answer: D", r), "D");
  EXPECT_EQ(ExtractChoice("Answer: (E) beach", r), "E");
  EXPECT_EQ(ExtractChoice("I pick (B) because", r), "B");
  EXPECT_EQ(ExtractChoice("So the answer is E.", r), "E");
  // A capital starting a sentence is not a label.
  EXPECT_EQ(ExtractChoice("Answer: A zinthar is found in the cave.", r), "C");
}

TEST(Qa, ExtractsTheChoiceTextAfterAnswer) {
  const QaRow r = Row();
  EXPECT_EQ(ExtractChoice("Answer: marsh. A zinthar is found in the marsh.", r), "A");
  EXPECT_EQ(ExtractChoice("Answer: Cave.", r), "C");
  // The deciding words win over choice words in the explanation.
  EXPECT_EQ(ExtractChoice("Answer: river. It is not in the forest.", r), "D");
  EXPECT_EQ(ExtractChoice("Answer: A zinthar is found in the marsh. So the answer is marsh.", r), "A");
  EXPECT_EQ(ExtractChoice("Answer: A zinthar is found in the glacier. So the answer is beach.", r), "E");
  EXPECT_EQ(ExtractChoice("Answer: A zinthar is found in the forest. So the answer is beach.", r), "E");
}

TEST(Qa, ExtractsASingleMentionedChoiceOrNothing) {
  const QaRow r = Row();
  EXPECT_EQ(ExtractChoice("It lives by the beach, I think", r), "E");
  EXPECT_EQ(ExtractChoice("Either the beach or the cave", r), std::nullopt);
  EXPECT_EQ(ExtractChoice("Answer: glacier. A zinthar is found in the glacier.", r), std::nullopt);
  EXPECT_EQ(ExtractChoice("", r), std::nullopt);
  EXPECT_EQ(ExtractChoice("caves and marshes", r), std::nullopt);  // whole words only
}

TEST(Qa, ParsesChatRows) {
  auto r = ParseQaRow(R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                       {"role": "assistant", "content": "Hello."}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[2].role, "assistant");
  EXPECT_EQ(r->messages[2].content, "Hello.");
  EXPECT_FALSE(r->gradable());
  // With the question's fields too, its answers can be graded.
  r = ParseQaRow(R"({"messages": [{"role": "user", "content": "Q"}], "question": "Q",
                     "choices": {"label": ["A", "B"], "text": ["x", "y"]}, "answerKey": "B"})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->gradable());
  EXPECT_EQ(ParseQaRow(R"({"messages": [{"role": "robot", "content": "Q"}]})").status().message().find("robot") !=
                std::string::npos,
            true);
  EXPECT_FALSE(ParseQaRow(R"({"messages": []})").ok());
  EXPECT_FALSE(ParseQaRow(R"({"messages": [{"role": "user", "content": 3}]})").ok());
  EXPECT_NE(ParseQaRow(R"({"id": "x"})").status().message().find("'messages'"), std::string::npos);
}

}  // namespace
}  // namespace tlr
