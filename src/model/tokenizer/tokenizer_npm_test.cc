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

#include <algorithm>
#include <random>

#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_test_support.h"
#include "util/mapped_file.h"

namespace tlr {
namespace {

const nlohmann::json& NpmIds() {
  static const nlohmann::json j = [] {
    auto text = ReadFileToString(std::string(TLR_TESTDATA_DIR) + "/npm-tokenizer-ids.json");
    EXPECT_TRUE(text.ok()) << text.status().message() << " (the npm_tokenizer_ids fixture writes it)";
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json::object();
  }();
  return j;
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
      ADD_FAILURE() << pkg << " (" << how << "): text '" << text << "'\n  got " << ShowIds(got) << "\n want "
                    << ShowIds(want);
    }
  }
  EXPECT_EQ(matched, cases.size()) << pkg << " (" << how << ")";
  std::printf("[ npm ids  ] %s (%s): %zu/%zu texts identical to @lenml/tokenizers\n", pkg.c_str(), how.c_str(),
              matched, cases.size());
}

Tokenizer ThroughGguf(const std::string& pkg) {
  auto v = VocabFromHfFile(NpmTokenizerDir() + pkg + "/models/tokenizer.json");
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
  const Tokenizer tok = NpmTokenizer("tokenizer-qwen3");
  CheckAll(tok, "tokenizer-qwen3", "tokenizer.json");
  // GGUF tokenizer metadata has no normalizer: like llama.cpp, a converted Qwen model does
  // not apply tokenizer.json's NFC, so only texts already in NFC must match there.
  CheckAll(ThroughGguf("tokenizer-qwen3"), "tokenizer-qwen3", "GGUF metadata, NFC texts", true);
  CheckIllFormed(tok, "tokenizer-qwen3");
}

TEST(TokenizerNpm, Gemma3TokenizerJsonMatchesLenmlTokenizers) {
  const Tokenizer tok = NpmTokenizer("tokenizer-gemma3");
  EXPECT_EQ(tok.vocab().model, VocabModel::kSpm);
  EXPECT_FALSE(tok.vocab().add_space_prefix);
  CheckAll(tok, "tokenizer-gemma3", "tokenizer.json");
  CheckAll(ThroughGguf("tokenizer-gemma3"), "tokenizer-gemma3", "GGUF metadata");
  CheckIllFormed(tok, "tokenizer-gemma3");
}

// Encoding resumes at the restart points EncodeExact reports: any text that keeps the first
// r + RestartMargin() bytes encodes to the tokens before r and the encoding of the rest from r
// (the vocabulary bridge re-encodes only a context's tail this way). Every text of the npm
// sets, continued by another, at every restart point; a SentencePiece vocabulary has none.
void CheckRestarts(const Tokenizer& tok, const std::string& pkg) {
  const auto& all = NpmIds()["tokenizer-qwen3"];  // the texts (the npm sets hold the same ones)
  ASSERT_GT(all.size(), 600u) << pkg;
  std::mt19937 rng(3);
  size_t checked = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string text = all[i]["text"];
    const std::string other = all[rng() % all.size()]["text"];
    std::vector<size_t> restarts;
    const std::vector<int32_t> ids = tok.EncodeExact(text, true, true, &restarts);
    ASSERT_EQ(ids, tok.EncodeExact(text, true, true)) << pkg;
    ASSERT_TRUE(std::is_sorted(restarts.begin(), restarts.end())) << pkg;
    if (tok.vocab().model == VocabModel::kSpm) {
      ASSERT_TRUE(restarts.empty()) << pkg;
      continue;
    }
    if (!text.empty()) {
      ASSERT_EQ(restarts.front(), 0u) << pkg;
    }
    std::vector<size_t> ends;
    size_t at = 0;
    for (int32_t id : ids) ends.push_back(at += tok.Piece(id, true).size());
    for (size_t r : restarts) {
      if (r == 0 || r + tok.RestartMargin() > text.size()) continue;
      const std::string changed = text.substr(0, r + tok.RestartMargin()) + other;
      const auto k = std::find(ends.begin(), ends.end(), r);
      ASSERT_NE(k, ends.end()) << pkg << ": a token crosses restart point " << r << " of '" << text << "'";
      std::vector<int32_t> resumed(ids.begin(), ids.begin() + (k - ends.begin()) + 1);
      const std::vector<int32_t> rest = tok.EncodeExact(std::string_view(changed).substr(r), false, true);
      resumed.insert(resumed.end(), rest.begin(), rest.end());
      ASSERT_EQ(resumed, tok.EncodeExact(changed, true, true)) << pkg << ": '" << changed << "' resumed at " << r;
      ++checked;
    }
  }
  if (tok.vocab().model != VocabModel::kSpm) {
    EXPECT_GT(checked, 1000u) << pkg;
  }
}

TEST(TokenizerNpm, EncodingResumesAtItsRestartPoints) {
  for (const char* pkg : {"tokenizer-qwen3", "tokenizer-llama3", "tokenizer-gemma3"}) {
    SCOPED_TRACE(pkg);
    CheckRestarts(NpmTokenizer(pkg), pkg);
  }
}

}  // namespace
}  // namespace tlr
