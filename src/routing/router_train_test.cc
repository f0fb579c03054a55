// Router training end to end on two small random-weight models sharing a vocabulary: CITER's
// three label cases (SLM right, LLM right, both wrong -> rollout or drop), iterative rounds,
// the saved router. References come from each model's own greedy output, so both label
// classes occur without trained models.
#include "routing/router_train.h"

#include <gtest/gtest.h>

#include "model/model.h"
#include "model/random_pair_fixture.h"
#include "ops/thread_pool.h"
#include "util/temp_dir.h"

namespace tlr {
namespace {

class RouterTrainTest : public RandomPairTest<21, 22> {
 protected:

  // The greedy continuation of a question's prompt by `m`, as text.
  std::string GreedyText(const Model& m, const QaRow& row, int n) {
    std::vector<int32_t> p = m.tokenizer().Encode(QaPrompt(row));
    auto cache = m.NewCache(static_cast<int64_t>(p.size()) + n + 2);
    ForwardContext ctx(&pool_);
    if (p.size() > 1) {
      SequenceInput in{&*cache, std::span<const int32_t>(p).first(p.size() - 1), OutputRows::kNone, nullptr, nullptr};
      EXPECT_TRUE(m.Forward({&in, 1}, &ctx).ok());
    }
    auto out = GreedyContinue(m, {&*cache}, {p.back()}, n, &pool_);
    EXPECT_TRUE(out.ok());
    std::vector<int32_t> ids = (*out)[0];
    if (!ids.empty() && m.tokenizer().IsEndOfGeneration(ids.back())) ids.pop_back();
    return m.tokenizer().Decode(ids);
  }

  std::vector<QaRow> Rows() {
    std::vector<QaRow> rows;
    const char* things[] = {"zinthar", "kovel", "murdra", "pexlun", "sarquo", "britalnom", "fexgri", "huljor"};
    for (int i = 0; i < 24; ++i) {
      QaRow r;
      r.id = "q" + std::to_string(i);
      r.question = std::string("Where would you find a ") + things[i % 8] + (i >= 8 ? "?" : " today?") +
                   std::string(i / 8, '!');
      r.labels = {"A", "B", "C", "D", "E"};
      r.texts = {"marsh", "forest", "cave", "river", "beach"};
      r.answer_key = "C";
      // A third each: the SLM's own answer, the LLM's, and a text neither model produces.
      r.reference = i % 3 == 0   ? GreedyText(*slm_, r, 12)
                    : i % 3 == 1 ? GreedyText(*llm_, r, 12)
                                 : "Answer: cave.";
      rows.push_back(std::move(r));
    }
    return rows;
  }

  // Small and quick: a few epochs over the 24 questions.
  static RouterTrainOptions SmallOptions(int epochs) {
    RouterTrainOptions o;
    o.mlp.max_epochs = epochs;
    o.mlp.batch = 16;
    o.max_answer_tokens = 16;
    o.val_fraction = 0.3f;
    o.batch_questions = 5;
    return o;
  }

  ThreadPool pool_{2};
};

TEST_F(RouterTrainTest, LabelsTrainsAndSaves) {
  const std::vector<QaRow> rows = Rows();
  RouterTrainOptions o = SmallOptions(5);
  std::vector<std::string> stages;
  o.on_progress = [&](const std::string& s, int64_t, int64_t) {
    if (stages.empty() || stages.back() != s) stages.push_back(s);
  };
  auto r = TrainRouter(*slm_, *llm_, rows, o, &pool_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const RouterTrainReport& rep = r->report;
  EXPECT_EQ(rep.questions, 24);
  EXPECT_EQ(rep.keep + rep.route, rep.tokens);
  EXPECT_GT(rep.keep, 0);
  EXPECT_GT(rep.route, 0);
  EXPECT_GT(rep.both_wrong, 0);  // the fixed-text references
  EXPECT_GT(rep.val_tokens, 0);
  EXPECT_GE(rep.auroc_router, 0.0);
  EXPECT_LE(rep.auroc_router, 1.0);
  EXPECT_EQ(stages, (std::vector<std::string>{"label", "train"}));
  EXPECT_EQ(r->router.kind(), RouterKind::kCiter);
  EXPECT_TRUE(r->router.CheckCompatible(*slm_).ok());
  EXPECT_FALSE(r->router.CheckCompatible(*llm_).ok());
  ASSERT_TRUE(r->router.Save(dir_->File("router.gguf")).ok());
  auto back = Router::Load(dir_->File("router.gguf"));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_NE(back->info().training_summary.find("\"auroc\""), std::string::npos);
  EXPECT_FLOAT_EQ(back->info().threshold, rep.threshold);

  // Dropping both-wrong positions instead of rolling them out.
  o.both_wrong = BothWrong::kDrop;
  auto d = TrainRouter(*slm_, *llm_, rows, o, &pool_);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->report.dropped_tokens, rep.both_wrong);
  EXPECT_EQ(d->report.tokens, rep.tokens - rep.both_wrong);

  // A second round relabels the both-wrong positions with the router in the loop.
  o.both_wrong = BothWrong::kRollout;
  o.rounds = 2;
  o.mlp.kind = RouterKind::kColm;
  stages.clear();
  auto two = TrainRouter(*slm_, *llm_, rows, o, &pool_);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(stages, (std::vector<std::string>{"label", "train", "rollout", "train"}));
  EXPECT_EQ(two->router.kind(), RouterKind::kColm);
}

TEST_F(RouterTrainTest, LlmReferencesAndErrors) {
  // Without references the LLM's greedy answers are graded; a random LLM gets almost all
  // wrong, so they are dropped and training refuses to go on with too little data.
  std::vector<QaRow> rows = Rows();
  for (QaRow& r : rows) r.reference.clear();
  RouterTrainOptions o;
  o.max_answer_tokens = 8;
  auto r = TrainRouter(*slm_, *llm_, rows, o, &pool_);
  if (r.ok()) {
    EXPECT_GE(r->report.questions, 4);
  } else {
    EXPECT_NE(r.status().message().find("usable questions"), std::string::npos) << r.status().message();
  }
  o.mlp.kind = RouterKind::kEntropy;
  EXPECT_FALSE(TrainRouter(*slm_, *llm_, Rows(), o, &pool_).ok());
}

// Chat rows rendered with a template that writes exactly the plain prompt and reference give
// the same labels and the same router as the multiple-choice rows; without a grader the
// both-wrong positions are dropped; --reference llm lets the LLM answer the last turn; every
// assistant message of a multi-turn row is a reference.
TEST_F(RouterTrainTest, ChatRows) {
  const std::vector<QaRow> mc = Rows();
  std::vector<QaRow> chat = mc;
  for (QaRow& r : chat) {
    r.messages = {{"user", QaPrompt(r)}, {"assistant", r.reference}};
    r.reference.clear();
  }
  RouterTrainOptions o = SmallOptions(3);
  o.chat_template =
      "{%- for m in messages -%}{{ m.content }}{%- if m.role == 'assistant' -%}{{ eos_token }}{%- endif -%}{%- endfor -%}";
  auto a = TrainRouter(*slm_, *llm_, mc, o, &pool_);
  auto b = TrainRouter(*slm_, *llm_, chat, o, &pool_);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->report.tokens, a->report.tokens);
  EXPECT_EQ(b->report.keep, a->report.keep);
  EXPECT_EQ(b->report.both_wrong, a->report.both_wrong);
  ASSERT_EQ(b->router.layers().size(), a->router.layers().size());
  for (size_t i = 0; i < a->router.layers().size(); ++i) EXPECT_EQ(b->router.layers()[i].w, a->router.layers()[i].w);

  // No grader (no choices): both-wrong positions are dropped, not rolled out.
  std::vector<QaRow> ungraded = chat;
  for (QaRow& r : ungraded) {
    r.labels.clear();
    r.texts.clear();
    r.answer_key.clear();
  }
  auto u = TrainRouter(*slm_, *llm_, ungraded, o, &pool_);
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->report.both_wrong, 0);
  EXPECT_EQ(u->report.dropped_tokens, a->report.both_wrong);
  EXPECT_EQ(u->report.tokens, a->report.tokens - a->report.both_wrong);

  // The LLM answers the last turn: its tokens are labelled keep or route, never both wrong,
  // and ungraded answers are all kept.
  o.reference = ReferenceSource::kLlm;
  auto l = TrainRouter(*slm_, *llm_, ungraded, o, &pool_);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->report.questions, 24);
  EXPECT_EQ(l->report.dropped_llm_wrong, 0);
  EXPECT_EQ(l->report.both_wrong + l->report.dropped_tokens, 0);

  // Two assistant turns in a row: two references (a user turn left open: the LLM answers it).
  o.reference = ReferenceSource::kRow;
  std::vector<QaRow> multi = ungraded;
  for (QaRow& r : multi) {
    r.messages.push_back({"user", "And where else?"});
    r.messages.push_back({"assistant", "Answer: cave."});
  }
  auto m = TrainRouter(*slm_, *llm_, multi, o, &pool_);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->report.questions, 48);
  for (QaRow& r : multi) r.messages.pop_back();
  auto open = TrainRouter(*slm_, *llm_, multi, o, &pool_);
  ASSERT_TRUE(open.ok()) << open.status().message();
  EXPECT_EQ(open->report.questions, 48);  // 24 given + 24 answered by the LLM

  // A template that cannot be parsed is an error naming it.
  o.chat_template = "{% for %}";
  auto bad = TrainRouter(*slm_, *llm_, chat, o, &pool_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("the chat template given"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tlr
