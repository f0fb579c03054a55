// A GoogleTest fixture for tests that need an SLM and an LLM sharing one tokenizer (model
// layer, tests only): two random-weight models (F32) of the preset kPreset ("tiny", a qwen2;
// kTinyQwen3, kTinyGemma3 for the newer families) with the given seeds, written to a
// temporary folder and loaded once per test suite.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "model/model.h"
#include "model/random_model.h"
#include "model/tokenizer/tokenizer_test_support.h"
#include "util/temp_dir.h"

namespace tlr {

// A tiny random Q8_0 model of `arch` with a real tokenizer (a tokenizer.json), for tests of pairs
// whose vocabularies differ.
inline void WriteTinyWithTokenizer(const std::string& arch, const std::string& tokenizer_json, uint64_t seed,
                                   const std::string& path) {
  RandomModelOptions o;
  o.preset = "tiny";
  o.arch = arch;
  // Q8_0: the output layer of a 152k-262k-token vocabulary is read for every token, at a
  // quarter of F32's bytes (make test's time).
  o.type = "q8_0";
  o.seed = seed;
  o.tokenizer_path = tokenizer_json;
  const Status st = WriteRandomModel(o, path);
  ASSERT_TRUE(st.ok()) << st.message();
}

// Two tiny random models with real, different vocabularies (Gemma 3's, seed 3, in gemma.gguf,
// and Qwen3's, seed 4, in qwen.gguf; the tokenizer.json files the tokenizer tests fetch under
// TLR_TESTDATA_DIR), written to a temporary folder and loaded once per test suite.
class CrossVocabPairTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("tlr_xvocab_pair");
    const std::string npm = NpmTokenizerDir();
    for (const char* arch : {"gemma3", "qwen3"}) {
      WriteTinyWithTokenizer(arch, npm + "tokenizer-" + arch + "/models/tokenizer.json", arch[0] == 'g' ? 3 : 4,
                             dir_->File(arch[0] == 'g' ? "gemma.gguf" : "qwen.gguf"));
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
  static inline TempDir* dir_ = nullptr;
  static inline Model* gemma_ = nullptr;
  static inline Model* qwen_ = nullptr;
};

inline constexpr char kTinyPreset[] = "tiny";
inline constexpr char kTinyQwen3[] = "tiny-qwen3";
inline constexpr char kTinyGemma3[] = "tiny-gemma3";

template <uint64_t kSlmSeed, uint64_t kLlmSeed, const char* kPreset = kTinyPreset>
class RandomPairTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("tlr_pair_" + std::string(kPreset) + "_" + std::to_string(kSlmSeed) + "_" +
                       std::to_string(kLlmSeed));
    RandomModelOptions o;
    o.preset = kPreset;
    o.type = "f32";
    o.seed = kSlmSeed;
    ASSERT_TRUE(WriteRandomModel(o, dir_->File("slm.gguf")).ok());
    o.seed = kLlmSeed;
    ASSERT_TRUE(WriteRandomModel(o, dir_->File("llm.gguf")).ok());
    slm_ = Model::Load(dir_->File("slm.gguf"))->release();
    llm_ = Model::Load(dir_->File("llm.gguf"))->release();
  }
  static void TearDownTestSuite() {
    delete slm_;
    delete llm_;
    delete dir_;
    slm_ = llm_ = nullptr;
    dir_ = nullptr;
  }
  static inline TempDir* dir_ = nullptr;
  static inline Model* slm_ = nullptr;
  static inline Model* llm_ = nullptr;
};

}  // namespace tlr
