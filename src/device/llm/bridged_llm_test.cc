// Routing between models of different vocabularies (label model; the tokenizer.json files the
// tokenizer tests fetch): random-weight tiny models with real tokenizers, an SLM with Gemma 3's
// vocabulary and an LLM with Qwen3's (and the reverse), the LLM in process behind BridgedLlm
// and a simulated network. For multilingual prompts with emoji and CJK:
//   - router training's labels come from the calls the decoder makes (BridgedLabelLlm), asked
//     only where the SLM is wrong, and a resumed run asks nothing again;
//   - tokens really come from the LLM (its token healing constraint spells the held-back
//     text, so calls do not fail on it), and the output is the SLM tokens' text;
//   - the pipeline gives the blocking loop's tokens and sources, greedy and sampled;
//   - the LLM prefills about its final context once (the bridge keeps its tokens, the
//     in-process KV cache reuses them): prefilled / final context <= 1.1.
#include "device/llm/bridged_llm.h"

#include <gtest/gtest.h>

#include <random>

#include "device/labels/bridged_label_llm.h"
#include "device/decode/decoder.h"
#include "model/random_pair_fixture.h"
#include "ops/thread_pool.h"
#include "routing/label_cache.h"
#include "routing/router_train.h"
#include "util/temp_dir.h"
#include "device/decode/decode_test_support.h"

namespace tlr {
namespace {

class BridgedLlmTest : public CrossVocabPairTest {
 protected:
  using Out = DecodedTokens;
  Out Run(const Model& slm, const Model& llm, const std::string& prompt, bool pipeline, float temperature) {
    auto router = Router::Builtin(RouterKind::kRandom, 5);
    EXPECT_TRUE(router.ok());
    InProcessLlm local(llm, 1, 1024);
    DelayedLlm net(&local, 0.004, 0.002, 9);
    BridgedLlm bridged(&net, slm.tokenizer(), llm.tokenizer());
    CollabDecoder dec(slm, &*router, &bridged, &pool_);
    DecodeOptions d;
    d.threshold = 0.4f;
    d.max_tokens = 24;
    d.pipeline.enabled = pipeline;
    d.sampling.temperature = temperature;
    d.sampling.seed = 5;
    const std::vector<int32_t> ids = slm.tokenizer().Encode(prompt, true);
    Out out = DecodeAll(dec, ids, d);
    // The whole text (prompt and output) in the LLM's tokens: no call's context is longer.
    std::vector<int32_t> all = ids;
    all.insert(all.end(), out.ids.begin(), out.ids.end());
    final_llm_context_ =
        1 + static_cast<int64_t>(llm.tokenizer().EncodeExact(VocabBridge(slm.tokenizer(), llm.tokenizer()).SlmText(all),
                                                              true, true).size());
    return out;
  }

  ThreadPool pool_{2};
  int64_t final_llm_context_ = 0;
};

TEST_F(BridgedLlmTest, RoutesAcrossVocabulariesAndThePipelineChangesNothing) {
  std::mt19937 rng(3);
  const std::vector<std::string> prompts = {"Hello world, the quick brown fox", "東京は 😀 今日は晴れ",
                                            "Привет, мир! 🇫🇷 café naïve", "3.14159 and 2.71828 —",
                                            "def f(x):\n    return x * 2\n"};
  int64_t llm_tokens = 0, prefilled = 0, contexts = 0;
  for (const auto& [slm_p, llm_p] : {std::pair<Model*, Model*>{gemma_, qwen_}, {qwen_, gemma_}}) {
    const Model &slm = *slm_p, &llm = *llm_p;
    ASSERT_TRUE(VocabBridge::Needed(slm.tokenizer(), llm.tokenizer()));
    for (size_t k = 0; k < prompts.size(); ++k) {
      const std::string& p = prompts[k];
      // Every prompt greedy, two of them sampled too (make test's time: each run reads a
      // 150k-262k-token F32 output layer per token).
      for (float temp : {0.0f, 0.8f}) {
        if (temp > 0 && k % 2 == 1) continue;
        SCOPED_TRACE(p + (temp > 0 ? " sampled" : " greedy"));
        const Out off = Run(slm, llm, p, false, temp);
        const Out on = Run(slm, llm, p, true, temp);
        EXPECT_EQ(on.ids, off.ids);
        EXPECT_EQ(on.src, off.src);
        for (TokenSource s : off.src) llm_tokens += s == TokenSource::kLlm;
        for (const std::string& e : off.errors) {
          // The constraint spells the held-back text: a call fails only when its reply is not
          // yet a whole SLM token, or random weights chose bytes that are not UTF-8 at once.
          EXPECT_TRUE(e.find("not yet one whole SLM token") != std::string::npos ||
                      e.find("ill-formed UTF-8") != std::string::npos)
              << e;
        }
        // Blocking: what the LLM prefilled against the context it ends with.
        prefilled += off.st.llm_work.prefilled;
        contexts += final_llm_context_;
      }
    }
  }
  std::printf("[ bridged  ] %lld LLM tokens; the LLM prefilled %lld tokens for final contexts of %lld (%.2fx)\n",
              static_cast<long long>(llm_tokens), static_cast<long long>(prefilled), static_cast<long long>(contexts),
              static_cast<double>(prefilled) / static_cast<double>(contexts));
  EXPECT_GT(llm_tokens, 40);
  EXPECT_LE(static_cast<double>(prefilled), 1.1 * static_cast<double>(contexts))
      << "prefilled " << prefilled << " for final contexts of " << contexts;
}

// Counts the contexts router training asks about.
class CountingNext : public LabelLlm {
 public:
  explicit CountingNext(LabelLlm* inner) : inner_(inner) {}
  std::string name() const override { return inner_->name(); }
  std::string model_id() const override { return inner_->model_id(); }
  bool next_only() const override { return inner_->next_only(); }
  Expected<std::vector<std::vector<int32_t>>> Predict(const std::vector<std::vector<int32_t>>& s,
                                                      const AnswerFn& f = {}) override {
    ADD_FAILURE() << "a bridged LLM is asked per context, not per sequence";
    return inner_->Predict(s, f);
  }
  Expected<std::vector<std::vector<int32_t>>> Greedy(const std::vector<std::vector<int32_t>>& p, int n,
                                                     const AnswerFn& f = {}) override {
    return inner_->Greedy(p, n, f);
  }
  Expected<std::vector<std::vector<int32_t>>> PredictNext(const std::vector<std::vector<int32_t>>& c,
                                                          const AnswerFn& f = {}) override {
    asked += static_cast<int64_t>(c.size());
    return inner_->PredictNext(c, f);
  }
  int64_t asked = 0;

 private:
  LabelLlm* inner_;
};

TEST_F(BridgedLlmTest, RouterLabelsAreTheRoutedCallsAnswers) {
  const Model &slm = *gemma_, &llm = *qwen_;
  InProcessLlm local(llm, 1, 1024);
  BridgedLabelLlm labels(&local, slm.tokenizer(), llm.tokenizer(), "fingerprint " + llm.fingerprint_hex());
  ASSERT_TRUE(labels.next_only());
  // The token a label is decided by is the one a routed call gives (the decoder's BridgedLlm,
  // through another backend), for contexts that end inside words, emoji and CJK.
  InProcessLlm local2(llm, 1, 1024);
  BridgedLlm routed(&local2, slm.tokenizer(), llm.tokenizer());
  std::vector<std::vector<int32_t>> contexts;
  for (const char* p : {"Question: where is the zinth", "東京は 😀 今日は晴", "Привет, мир! café naï"}) {
    const std::vector<int32_t> ids = slm.tokenizer().Encode(p, true);
    for (size_t n = 2; n <= ids.size(); n += 2) contexts.emplace_back(ids.begin(), ids.begin() + n);
  }
  auto next = labels.PredictNext(contexts);
  ASSERT_TRUE(next.ok()) << next.status().message();
  ASSERT_EQ(next->size(), contexts.size());
  int given = 0;
  for (size_t i = 0; i < contexts.size(); ++i) {
    SamplerParams greedy;
    auto r = routed.Next(contexts[i], 1, greedy);
    ASSERT_LE((*next)[i].size(), 1u);
    if (!r.ok() || r->tokens.empty()) {
      EXPECT_TRUE((*next)[i].empty()) << "context " << i;
      continue;
    }
    ASSERT_EQ((*next)[i].size(), 1u) << "context " << i << ": the routed call gave a token";
    EXPECT_EQ((*next)[i][0], r->tokens[0]) << "context " << i;
    ++given;
  }
  EXPECT_GT(given, static_cast<int>(contexts.size()) / 2);

  // Router training: references are the LLM's own bridged answers for half of the questions
  // (so the LLM is right where the SLM is not), a text for the others.
  std::vector<QaRow> rows;
  for (int i = 0; i < 8; ++i) {
    QaRow r;
    r.id = "q" + std::to_string(i);
    r.question = "Where would you find a " + std::string(i % 2 ? "zinthar" : "kovel") + std::string(i / 2, '?');
    r.labels = {"A", "B", "C", "D", "E"};
    r.texts = {"marsh", "forest", "cave", "river", "beach"};
    r.answer_key = "C";
    if (i % 2 == 0) {
      auto g = labels.Greedy({slm.tokenizer().Encode(QaPrompt(r))}, 10);
      ASSERT_TRUE(g.ok()) << g.status().message();
      ASSERT_FALSE((*g)[0].empty());
      r.reference = slm.tokenizer().Decode((*g)[0]);
    } else {
      r.reference = "Answer: a cave. 洞窟 🦇";
    }
    rows.push_back(std::move(r));
  }
  // Chat rows ending with the user's turn: the LLM answers them (references by multi-token
  // bridged calls), and is still asked, one token at a time, where the SLM is wrong.
  for (int i = 0; i < 3; ++i) {
    QaRow r;
    r.id = "chat" + std::to_string(i);
    r.messages = {{"user", "Name a place like the zinth marsh" + std::string(i, '!')}};
    rows.push_back(std::move(r));
  }
  RouterTrainOptions o;
  o.mlp.max_epochs = 3;
  o.mlp.batch = 16;
  o.max_answer_tokens = 12;
  o.val_fraction = 0.3f;
  o.batch_questions = 3;
  TempDir work("tlr_bridged_labels");
  RouterTrainReport first;
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "first run" : "resumed");
    auto cached = CachedLabelLlm::Open(&labels, work.path().string());
    ASSERT_TRUE(cached.ok()) << cached.status().message();
    CountingNext counting(cached->get());
    auto t = TrainRouter(slm, counting, rows, o, &pool_);
    ASSERT_TRUE(t.ok()) << t.status().message();
    const RouterTrainReport& rep = t->report;
    // Asked exactly where the SLM is wrong: the LLM is right there (route), or both are wrong
    // (a rollout decides: kept, or route too) or the position is dropped.
    const int64_t llm_right = rep.route - (rep.both_wrong - rep.both_wrong_kept);
    EXPECT_EQ(counting.asked, llm_right + rep.both_wrong + rep.dropped_tokens);
    EXPECT_GT(llm_right, 0) << "the LLM's own answers: it is right where the SLM is not";
    EXPECT_GT(rep.questions, 8) << "the chat rows with the LLM's references are kept";
    EXPECT_GT(rep.keep, 0);
    if (run == 0) {
      first = rep;
      EXPECT_GT((*cached)->asked(), 0);
    } else {
      EXPECT_EQ((*cached)->asked(), 0) << "a resumed run asks nothing again";
      EXPECT_EQ(rep.route, first.route);
      EXPECT_EQ(rep.keep, first.keep);
    }
  }
}

}  // namespace
}  // namespace tlr
