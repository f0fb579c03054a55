// The Qwen3 and Gemma 3 tokenizer.json files against an independent implementation of Hugging
// Face tokenizers (model label): npm @lenml/tokenizers encodes llama.cpp's vector texts and
// random Unicode text (tools/reference/npm_tokenize.mjs, run by the npm_tokenizer_ids CTest
// fixture); our tokenizer, loaded from the same tokenizer.json, and again through GGUF
// metadata as a converted model carries it, must give identical ids for every text (through
// GGUF, which has no normalizer, Qwen's texts that NFC would change are left out). Ill-formed
// UTF-8 (which a JavaScript string cannot hold) is checked separately: no failure, and bytes
// back on decoding.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"
#include "util/mapped_file.h"

namespace tlr {
namespace {

const std::string kNpm = std::string(TLR_TESTDATA_DIR) + "/npm/node_modules/@lenml/";

const nlohmann::json& NpmIds() {
  static const nlohmann::json j = [] {
    auto text = ReadFileToString(std::string(TLR_TESTDATA_DIR) + "/npm-tokenizer-ids.json");
    EXPECT_TRUE(text.ok()) << text.status().message() << " (the npm_tokenizer_ids fixture writes it)";
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json::object();
  }();
  return j;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

// Every text of `pkg` through `tok` (only the texts that are their own NFC form when
// nfc_only): all must match.
void CheckAll(const Tokenizer& tok, const std::string& pkg, const std::string& how, bool nfc_only = false) {
  const auto& all = NpmIds()[pkg];
  ASSERT_GT(all.size(), 600u) << pkg;
  std::vector<nlohmann::json> cases;
  for (const auto& c : all) {
    if (!nfc_only || c.value("nfc", false)) cases.push_back(c);
  }
  size_t matched = 0, shown = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"];
    const auto got = tok.Encode(text, /*add_special=*/false, /*parse_special=*/true);
    if (got == want) {
      ++matched;
    } else if (shown++ < 10) {
      ADD_FAILURE() << pkg << " (" << how << "): text '" << text << "'\n  got " << Show(got) << "\n want "
                    << Show(want);
    }
  }
  EXPECT_EQ(matched, cases.size()) << pkg << " (" << how << ")";
  std::printf("[ npm ids  ] %s (%s): %zu/%zu texts identical to @lenml/tokenizers\n", pkg.c_str(), how.c_str(),
              matched, cases.size());
}

Tokenizer FromJson(const std::string& pkg) {
  auto t = Tokenizer::FromHfJsonFile(kNpm + pkg + "/models/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

Tokenizer ThroughGguf(const std::string& pkg) {
  auto v = VocabFromHfFile(kNpm + pkg + "/models/tokenizer.json");
  EXPECT_TRUE(v.ok()) << v.status().message();
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str(pkg == "tokenizer-gemma3" ? "gemma3" : "qwen3"));
  VocabToGguf(*v, &w);
  auto bytes = w.ToBytes();
  EXPECT_TRUE(bytes.ok());
  auto f = GgufFile::FromBytes(*bytes);
  EXPECT_TRUE(f.ok()) << f.status().message();
  auto t = Tokenizer::FromGguf(*f);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

// Ill-formed UTF-8: lone continuation bytes, truncated sequences, overlongs, surrogates,
// code points past U+10FFFF, mixed with text. Encoding must not fail and decoding must give
// the bytes back.
void CheckIllFormed(const Tokenizer& tok, const std::string& pkg) {
  std::mt19937 rng(7);
  const std::vector<std::string> bad = {"\x80", "\xBF\xBF", "\xC3", "\xE2\x82", "\xF0\x9F\x98", "\xC0\xAF",
                                        "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF", "\xFE\xFE"};
  const std::vector<std::string> good = {"hello", " world", "\xC3\xA9t\xC3\xA9", "\xE4\xB8\xAD", "  ", "\n", "42"};
  for (int i = 0; i < 200; ++i) {
    std::string text;
    for (int k = 0; k < 6; ++k) {
      text += rng() % 2 ? bad[rng() % bad.size()] : good[rng() % good.size()];
    }
    const auto ids = tok.Encode(text, false, false);
    EXPECT_FALSE(ids.empty()) << pkg;
    EXPECT_EQ(tok.Decode(ids), text) << pkg << ": ill-formed text does not come back";
  }
}

TEST(TokenizerNpm, Qwen3TokenizerJsonMatchesLenmlTokenizers) {
  const Tokenizer tok = FromJson("tokenizer-qwen3");
  CheckAll(tok, "tokenizer-qwen3", "tokenizer.json");
  // GGUF tokenizer metadata has no normalizer: like llama.cpp, a converted Qwen model does
  // not apply tokenizer.json's NFC, so only texts already in NFC must match there.
  CheckAll(ThroughGguf("tokenizer-qwen3"), "tokenizer-qwen3", "GGUF metadata, NFC texts", true);
  CheckIllFormed(tok, "tokenizer-qwen3");
}

TEST(TokenizerNpm, Gemma3TokenizerJsonMatchesLenmlTokenizers) {
  const Tokenizer tok = FromJson("tokenizer-gemma3");
  EXPECT_EQ(tok.vocab().model, VocabModel::kSpm);
  EXPECT_FALSE(tok.vocab().add_space_prefix);
  CheckAll(tok, "tokenizer-gemma3", "tokenizer.json");
  CheckAll(ThroughGguf("tokenizer-gemma3"), "tokenizer-gemma3", "GGUF metadata");
  CheckIllFormed(tok, "tokenizer-gemma3");
}

}  // namespace
}  // namespace tlr
