// Reference tokenizer vectors (model label): llama.cpp's test texts and expected ids from
// ../shared/tokenizer-vectors, run through our tokenizers loaded from the GGUF vocabularies
// there and from the pinned npm tokenizer.json files (fetched by the fetch_tokenizer_data
// CTest fixture). Every text must match exactly, and decode(encode(text)) must give the text
// back (SentencePiece: up to the dummy-prefix rule, which Decode applies).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_test_support.h"
#include "util/mapped_file.h"
#include "util/utf8.h"

#include <nlohmann/json.hpp>
#include <algorithm>

namespace tlr {
namespace {

const std::string kVectorDir = std::string(TLR_SHARED_DIR) + "/tokenizer-vectors/";

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// X.gguf.inp: texts separated by "\n__ggml_vocab_test__\n"; X.gguf.out: one line of ids each.
std::vector<Case> LoadVectors(const std::string& set) {
  auto inp = ReadFileToString(kVectorDir + "ggml-vocab-" + set + ".gguf.inp");
  auto out = ReadFileToString(kVectorDir + "ggml-vocab-" + set + ".gguf.out");
  EXPECT_TRUE(inp.ok()) << inp.status().message();
  EXPECT_TRUE(out.ok()) << out.status().message();
  if (!inp.ok() || !out.ok()) return {};
  std::vector<std::string> texts;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp->size();) {
    size_t next = inp->find(sep, pos);
    if (next == std::string::npos) next = inp->size();
    texts.push_back(inp->substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(*out);
  std::string line;
  for (const auto& t : texts) {
    EXPECT_TRUE(static_cast<bool>(std::getline(lines, line))) << "fewer id lines than texts";
    Case c{t, {}};
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

// Runs every vector of `set` through `tok`; returns the number that matched.
size_t CheckSet(const Tokenizer& tok, const std::string& set, bool spm) {
  const auto cases = LoadVectors(set);
  EXPECT_GT(cases.size(), 40u);
  size_t matched = 0;
  for (const auto& c : cases) {
    const auto got = tok.Encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ShowIds(got), ShowIds(c.ids)) << set << ": text '" << c.text << "'";
    if (got == c.ids) ++matched;
    EXPECT_EQ(tok.Decode(got), c.text) << set << ": round trip of '" << c.text << "'";
  }
  std::cout << "[ vectors  ] " << set << ": " << matched << "/" << cases.size()
            << " texts match exactly" << (spm ? " (SentencePiece)" : "") << "\n";
  return matched;
}

Tokenizer FromGgufFile(const std::string& path) {
  auto f = GgufFile::Open(path);
  if (!f.ok()) {
    // The vocabularies are ../shared's, beside the repository: without them nothing here runs.
    std::fprintf(stderr, "tokenizer_vectors_test: %s\n", f.status().message().c_str());
    std::exit(1);
  }
  auto t = Tokenizer::FromGguf(*f);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) std::exit(1);
  return std::move(t).value();
}

TEST(TokenizerVectors, Gpt2FromGguf) {
  CheckSet(FromGgufFile(kVectorDir + "ggml-vocab-gpt-2.gguf"), "gpt-2", false);
}

TEST(TokenizerVectors, LlamaSpmFromGguf) {
  CheckSet(FromGgufFile(kVectorDir + "ggml-vocab-llama-spm.gguf"), "llama-spm", true);
}

TEST(TokenizerVectors, Qwen2FromTokenizerJson) {
  CheckSet(NpmTokenizer("tokenizer-qwen3"), "qwen2", false);
}

TEST(TokenizerVectors, DeepseekR1QwenFromTokenizerJson) {
  // The same vocabulary read with the deepseek-r1-qwen pre-tokenizer name.
  CheckSet(NpmTokenizer("tokenizer-qwen3", "deepseek-r1-qwen"), "deepseek-r1-qwen", false);
}

TEST(TokenizerVectors, LlamaBpeFromTokenizerJson) {
  CheckSet(NpmTokenizer("tokenizer-llama3"), "llama-bpe", false);
}

// tokenizer.json -> GGUF tokenizer metadata (our writer) -> GGUF reader -> same ids: the
// path a converted model takes.
TEST(TokenizerVectors, Qwen2AndLlama3ThroughGguf) {
  for (const auto& [pkg, set] : {std::pair<std::string, std::string>{"tokenizer-qwen3", "qwen2"},
                                 {"tokenizer-llama3", "llama-bpe"}}) {
    auto v = VocabFromHfFile(NpmTokenizerDir() + pkg + "/models/tokenizer.json");
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_EQ(v->pre, set);
    GgufWriter w;
    w.Set("general.architecture", GgufValue::Str("qwen2"));
    VocabToGguf(*v, &w);
    auto bytes = w.ToBytes();
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    auto f = GgufFile::FromBytes(*bytes);
    ASSERT_TRUE(f.ok()) << f.status().message();
    auto t = Tokenizer::FromGguf(*f);
    ASSERT_TRUE(t.ok()) << t.status().message();
    CheckSet(*t, set, false);
  }
}

// A SentencePiece vocabulary in Hugging Face's tokenizer.json form (BPE + byte_fallback, with
// merges derived from the scores the way Hugging Face's converter does), built from the
// llama-spm GGUF: loading it must tokenize the llama-spm vectors exactly like the GGUF.
TEST(TokenizerVectors, LlamaSpmFromTokenizerJson) {
  auto f = GgufFile::Open(kVectorDir + "ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(f.ok());
  auto v = VocabFromGguf(*f);
  ASSERT_TRUE(v.ok());
  nlohmann::json vocab = nlohmann::json::object();
  std::unordered_map<std::string, int32_t> id;
  for (int32_t i = 0; i < v->size(); ++i) {
    vocab[v->tokens[i]] = i;
    id[v->tokens[i]] = i;
  }
  struct Merge {
    std::string l, r;
    float score;
    int32_t il, ir;
  };
  std::vector<Merge> merges;
  for (int32_t i = 0; i < v->size(); ++i) {
    if (v->types[i] != TokenType::kNormal) continue;
    const std::string& t = v->tokens[i];
    size_t pos = 0;
    char32_t cp;
    DecodeUtf8(t, &pos, &cp);
    for (; pos < t.size(); DecodeUtf8(t, &pos, &cp)) {  // split at character boundaries
      auto l = id.find(t.substr(0, pos)), r = id.find(t.substr(pos));
      if (l != id.end() && r != id.end()) merges.push_back({l->first, r->first, v->scores[i], l->second, r->second});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.il != b.il ? a.il < b.il : a.ir < b.ir;
  });
  nlohmann::json jm = nlohmann::json::array();
  for (const auto& m : merges) jm.push_back({m.l, m.r});
  nlohmann::json added = nlohmann::json::array();
  for (int32_t i : {0, 1, 2}) {
    added.push_back({{"id", i}, {"content", v->tokens[i]}, {"special", true}});
  }
  nlohmann::json j = {
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"},
                      {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                       {{"type", "Replace"}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"},
                 {"vocab", vocab}, {"merges", jm}}}};
  auto hv = VocabFromHfJson(j.dump(), R"({"bos_token": "<s>", "add_bos_token": true})");
  ASSERT_TRUE(hv.ok()) << hv.status().message();
  EXPECT_EQ(hv->model, VocabModel::kSpm);
  EXPECT_TRUE(hv->add_space_prefix);
  EXPECT_EQ(hv->bos_id, 1);
  auto t = Tokenizer::FromVocab(std::move(hv).value());
  ASSERT_TRUE(t.ok()) << t.status().message();
  CheckSet(*t, "llama-spm", true);
}

}  // namespace
}  // namespace tlr
