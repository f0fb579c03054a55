// Tokenizer behaviour beyond the reference vectors (unit): special tokens, BOS/EOS, byte
// fallback, streaming decode of characters split across tokens, ill-formed input,
// fingerprints, and the BPE merge order on a hand-made vocabulary.
#include "model/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "model/gguf/gguf_keys.h"
#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"
#include "util/utf8.h"

namespace tlr {
namespace {

const std::string kVectors = std::string(TLR_SHARED_DIR) + "/tokenizer-vectors/";

// Loads a vocabulary GGUF from ../shared once per process (leaked on purpose).
const Tokenizer& Shared(const std::string& name) {
  auto f = GgufFile::Open(kVectors + "ggml-vocab-" + name + ".gguf");
  if (!f.ok()) {
    // The vocabularies are ../shared's, beside the repository: without them no test here can run.
    std::fprintf(stderr, "tokenizer_test: %s\n", f.status().message().c_str());
    std::exit(1);
  }
  auto tok = Tokenizer::FromGguf(*f);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_test: %s: %s\n", name.c_str(), tok.status().message().c_str());
    std::exit(1);
  }
  return *new Tokenizer(std::move(tok).value());
}

const Tokenizer& Gpt2() {
  static const Tokenizer& t = Shared("gpt-2");
  return t;
}

const Tokenizer& Spm() {
  static const Tokenizer& t = Shared("llama-spm");
  return t;
}

TEST(Tokenizer, HelloWorldGpt2) {
  EXPECT_EQ(Gpt2().Encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(Gpt2().Decode(std::vector<int32_t>{15496, 995}), "Hello world");
}

TEST(Tokenizer, ControlTokensOnlyWithParseSpecial) {
  const std::string text = "a<|endoftext|>b";
  const auto with = Gpt2().Encode(text, false, /*parse_special=*/true);
  ASSERT_EQ(with.size(), 3u);
  EXPECT_EQ(with[1], 50256);
  const auto without = Gpt2().Encode(text, false, /*parse_special=*/false);
  EXPECT_GT(without.size(), 3u);
  EXPECT_EQ(std::count(without.begin(), without.end(), 50256), 0);
  // Control tokens decode to nothing unless asked for.
  EXPECT_EQ(Gpt2().Decode(with), "ab");
  EXPECT_EQ(Gpt2().Decode(with, /*render_special=*/true), text);
  EXPECT_EQ(Gpt2().Decode(without), text);
}

TEST(Tokenizer, AddSpecialFollowsMetadata) {
  // llama-spm: add_bos_token = true, add_eos_token = false.
  const auto ids = Spm().Encode("Hello", /*add_special=*/true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  EXPECT_NE(ids.back(), 2);
  EXPECT_EQ(Spm().Encode("Hello", false).front(), Spm().Encode("Hello", true)[1]);
  // gpt-2's metadata asks for no BOS.
  EXPECT_EQ(Gpt2().Encode("Hello", true), Gpt2().Encode("Hello", false));
  EXPECT_EQ(Spm().Encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(Spm().Encode("", false).empty());
}

TEST(Tokenizer, SentencePieceDummyPrefixAndByteFallback) {
  // The dummy prefix: "Hello" is tokenized as "▁Hello" and decodes back without it.
  const auto ids = Spm().Encode("Hello");
  EXPECT_EQ(Spm().TokenText(ids[0]).rfind("\xE2\x96\x81", 0), 0u);
  EXPECT_EQ(Spm().Decode(ids), "Hello");
  EXPECT_EQ(Spm().Decode(Spm().Encode(" Hello")), " Hello");
  // A character missing from the vocabulary falls back to its UTF-8 bytes as <0xXX>.
  const std::string rare = "\xF0\x9F\xA6\x99";  // U+1F999 llama
  const auto r = Spm().Encode(rare);
  int byte_tokens = 0;
  for (int32_t id : r) byte_tokens += Spm().vocab().types[id] == TokenType::kByte;
  EXPECT_EQ(byte_tokens, 4);
  EXPECT_EQ(Spm().Decode(r), rare);
  EXPECT_EQ(Spm().Piece(Spm().Find("<0x0A>")), "\n");
}

TEST(Tokenizer, StreamingDecodeNeverSplitsACharacter) {
  for (const Tokenizer* tok : {&Gpt2(), &Spm()}) {
    const std::string text = "Ma\xC3\xB1" "ana \xF0\x9F\xA6\x99\xF0\x9F\x98\x81 \xE4\xBD\xA0\xE5\xA5\xBD!";
    const auto ids = tok->Encode(text);
    StreamDecoder d(*tok);
    std::string all;
    int held_back = 0;
    for (int32_t id : ids) {
      const std::string part = d.Push(id);
      EXPECT_TRUE(IsValidUtf8(part)) << "a push returned half a character";
      if (part.empty()) ++held_back;
      all += part;
    }
    all += d.Flush();
    EXPECT_EQ(all, text);
    EXPECT_GT(held_back, 0) << "expected some emoji bytes to be split across tokens";
  }
}

TEST(Tokenizer, IllFormedUtf8RoundTripsThroughByteLevelBpe) {
  const std::string bad = std::string("ok \xFF\xFE bad \xE2\x82 end \xC0\xAF", 20);
  const auto ids = Gpt2().Encode(bad);
  EXPECT_EQ(Gpt2().Decode(ids), bad);
  StreamDecoder d(Gpt2());
  std::string shown;
  for (int32_t id : ids) shown += d.Push(id);
  shown += d.Flush();
  EXPECT_TRUE(IsValidUtf8(shown));  // streamed text is always printable UTF-8
}

TEST(Tokenizer, FingerprintIdentifiesTheVocabulary) {
  EXPECT_NE(Gpt2().Fingerprint(), Spm().Fingerprint());
  auto f = GgufFile::Open(kVectors + "ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(f.ok());
  auto v = VocabFromGguf(*f);
  ASSERT_TRUE(v.ok());
  auto same = Tokenizer::FromVocab(*v);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->Fingerprint(), Gpt2().Fingerprint());
  v->tokens[500] += "x";
  auto changed = Tokenizer::FromVocab(*v);
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(changed->Fingerprint(), Gpt2().Fingerprint());
}

// A hand-made byte-level vocabulary: bytes, plus merges "a a" (rank 0) and "b c" (rank 1).
Vocab TinyVocab() {
  Vocab v;
  v.model = VocabModel::kBpe;
  v.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(ByteToBpeChar(static_cast<uint8_t>(b)));
  v.tokens.push_back("aa");
  v.tokens.push_back("bc");
  v.tokens.push_back("aabc");
  v.tokens.push_back("<|sep|>");
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.types.back() = TokenType::kUserDefined;
  v.merges = {{"a", "a"}, {"b", "c"}, {"aa", "bc"}};
  v.lstrip.assign(v.tokens.size(), 0);
  v.rstrip.assign(v.tokens.size(), 0);
  return v;
}

TEST(Tokenizer, BpeMergesLowestRankFirstLeftmostOnTies) {
  auto t = Tokenizer::FromVocab(TinyVocab());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->Encode("aaa"), (std::vector<int32_t>{256, 'a'}));   // (aa)a, not a(aa)
  EXPECT_EQ(t->Encode("aabc"), (std::vector<int32_t>{258}));        // aa + bc -> aabc
  EXPECT_EQ(t->Encode("abc"), (std::vector<int32_t>{'a', 257}));
  // User-defined added tokens split out even without parse_special.
  EXPECT_EQ(t->Encode("aa<|sep|>aa"), (std::vector<int32_t>{256, 259, 256}));
}

// TinyVocab with control tokens appended; returns the vocabulary, `ids` gets their ids.
Vocab WithControls(const std::vector<std::string>& texts, std::vector<int32_t>* ids) {
  Vocab v = TinyVocab();
  for (const std::string& t : texts) {
    ids->push_back(v.size());
    v.tokens.push_back(t);
    v.types.push_back(TokenType::kControl);
    v.lstrip.push_back(0);
    v.rstrip.push_back(0);
  }
  return v;
}

// The vocabulary through a GGUF's metadata: `edit` changes what VocabToGguf wrote, `drop` a key
// is left out.
Expected<Tokenizer> ThroughGguf(const Vocab& v, const std::function<void(GgufWriter&)>& edit, const std::string& drop = "") {
  GgufWriter w;
  VocabToGguf(v, &w);
  edit(w);
  auto bytes = w.ToBytes();
  if (!bytes.ok()) return bytes.status();
  auto f = GgufFile::FromBytes(*bytes);
  if (!f.ok()) return f.status();
  GgufWriter kept;
  for (const auto& [key, value] : f->metadata()) {
    if (key != drop) kept.Set(key, value);
  }
  bytes = kept.ToBytes();
  if (!bytes.ok()) return bytes.status();
  f = GgufFile::FromBytes(*bytes);
  if (!f.ok()) return f.status();
  return Tokenizer::FromGguf(*f);
}

// Generation ends where llama.cpp's would: a Gemma 3 file names <eos> only, but its turns end at
// <end_of_turn>; Llama 3.1 names <|eom_id|> as EOM; Qwen's FIM tokens end a fill.
TEST(Tokenizer, EndOfGenerationAsLlamaCppDecidesIt) {
  std::vector<int32_t> id;
  Vocab v = WithControls({"<eos>", "<end_of_turn>", "<start_of_turn>", "<|fim_pad|>", "<|eom_id|>", "<tool>"}, &id);
  v.eos_id = id[0];
  auto t = Tokenizer::FromVocab(v);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->IsEndOfGeneration(id[0]));
  EXPECT_TRUE(t->IsEndOfGeneration(id[1]));   // by its text
  EXPECT_FALSE(t->IsEndOfGeneration(id[2]));
  EXPECT_TRUE(t->IsEndOfGeneration(id[3]));   // FIM pad by its text: the file names no FIM id
  EXPECT_TRUE(t->IsEndOfGeneration(id[4]));
  EXPECT_FALSE(t->IsEndOfGeneration(id[5]));
  EXPECT_FALSE(t->IsEndOfGeneration('a'));
  EXPECT_FALSE(t->IsEndOfGeneration(-1));
  // The ids a file names: EOM and a FIM pad on tokens of any text.
  t = ThroughGguf(v, [&](GgufWriter& w) {
    w.Set(gguf_keys::kTokEom, GgufValue(static_cast<uint32_t>(id[5])));
    w.Set(gguf_keys::kTokFimPad, GgufValue(static_cast<uint32_t>(id[2])));
  });
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->IsEndOfGeneration(id[5]));
  EXPECT_TRUE(t->IsEndOfGeneration(id[2]));
  EXPECT_TRUE(t->IsEndOfGeneration(id[1]));
  EXPECT_FALSE(t->IsEndOfGeneration(id[3]));  // the file names its FIM pad: not found by text
  // The vocabulary as the server sends it (VocabToGguf) ends generation at the same tokens.
  auto again = ThroughGguf(t->vocab(), [](GgufWriter&) {});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->EndOfGenerationIds(), t->EndOfGenerationIds());
  // An id outside the vocabulary is an error naming the key.
  t = ThroughGguf(v, [&](GgufWriter& w) { w.Set(gguf_keys::kTokEom, GgufValue(static_cast<uint32_t>(v.size()))); });
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.ggml.eom_token_id"), std::string::npos) << t.status().message();
}

// A Llama 3 file without tokenizer.ggml.add_bos_token (converted from Meta's tokenizer_config.json,
// which has none) still starts with BOS, as in llama.cpp; the key, when there, decides.
TEST(Tokenizer, Llama3PreTokenizerMeansBosUnlessTheFileSaysOtherwise) {
  std::vector<int32_t> id;
  Vocab v = WithControls({"<|begin_of_text|>", "<|end_of_text|>"}, &id);
  v.bos_id = id[0];
  v.eos_id = id[1];
  for (const char* pre : {"llama-bpe", "llama3", "llama-v3", "falcon3", "gpt-2"}) {
    v.pre = pre;
    auto t = ThroughGguf(v, [](GgufWriter&) {}, gguf_keys::kTokAddBos);
    ASSERT_TRUE(t.ok()) << t.status().message();
    const bool llama3 = std::string(pre) != "gpt-2";
    EXPECT_EQ(t->vocab().add_bos, llama3) << pre;
    EXPECT_EQ(t->vocab().ignore_merges, llama3) << pre;
    EXPECT_EQ(t->Encode("aa", /*add_special=*/true).front() == id[0], llama3) << pre;
    v.add_bos = false;
    t = ThroughGguf(v, [](GgufWriter&) {});
    ASSERT_TRUE(t.ok());
    EXPECT_FALSE(t->vocab().add_bos) << pre;
  }
}

TEST(Tokenizer, LoadErrorsAreClear) {
  Vocab v = TinyVocab();
  v.pre = "no-such-pre";
  auto t = Tokenizer::FromVocab(v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("unknown pre-tokenizer 'no-such-pre'"), std::string::npos);
  EXPECT_NE(t.status().message().find("qwen2"), std::string::npos);
  Vocab bad = TinyVocab();
  bad.types.pop_back();
  EXPECT_FALSE(Tokenizer::FromVocab(bad).ok());
  EXPECT_FALSE(VocabFromHfJson("{not json", "").ok());
  auto wrong = VocabFromHfJson(R"({"model": {"type": "Unigram", "vocab": []}})", "");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("Unigram"), std::string::npos);
  auto shape = VocabFromHfJson(R"({"model": {"type": "BPE", "vocab": {"a": "x"}},
                                   "decoder": {"type": "ByteLevel"}})", "");
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("bad id"), std::string::npos);
}

// tokenizer.json's vocab and merges are streamed into vectors, not parsed as a document
// (hf_json_reader.h): every shape of them still reads as one or is refused, naming what.
TEST(Tokenizer, TokenizerJsonVocabAndMergesOfEveryShape) {
  auto load = [](const std::string& vocab, const std::string& merges, const std::string& extra = "") {
    return VocabFromHfJson(R"({"model": {"type": "BPE", "vocab": )" + vocab + merges + R"(}, "decoder": {"type": "ByteLevel"})" +
                               extra + "}",
                           "");
  };
  auto error = [&](const std::string& vocab, const std::string& merges, const std::string& extra = "") {
    auto v = load(vocab, merges, extra);
    return v.ok() ? std::string("loaded") : v.status().message();
  };
  // Both merge forms, keys in any order, the model's other fields before and after.
  auto v = load(R"({"a": 0, "b": 1, "ab": 2, "c": 4})", R"(, "merges": ["a b", ["ab", "c"]], "ignore_merges": true)",
                R"(, "added_tokens": [{"id": 5, "content": "<s>", "special": true}])");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->tokens, (std::vector<std::string>{"a", "b", "ab", "[UNUSED_3]", "c", "<s>"}));
  EXPECT_EQ(v->merges, (std::vector<std::pair<std::string, std::string>>{{"a", "b"}, {"ab", "c"}}));
  EXPECT_TRUE(v->ignore_merges);
  EXPECT_EQ(v->types[5], TokenType::kControl);
  auto later = VocabFromHfJson(R"({"decoder": {"type": "ByteLevel"}, "model": {"merges": [" x y"], "vocab": {" x": 0, "y": 1}}})", "");
  ASSERT_TRUE(later.ok()) << later.status().message();
  EXPECT_EQ(later->merges, (std::vector<std::pair<std::string, std::string>>{{" x", "y"}}));
  // Bad ids, whatever their shape (nested values are skipped whole).
  for (const std::string bad : {R"({"a": 0, "b": "1"})", R"({"a": 0, "b": 1.5})", R"({"a": 0, "b": [1]})",
                                R"({"a": 0, "b": {"id": [1, {"x": 2}]}})", R"({"a": 0, "b": -1})", R"({"a": 0, "b": null})",
                                R"({"a": 0, "b": 16777216})", R"({"a": 0, "b": 18446744073709551615})"}) {
    EXPECT_NE(error(bad, "").find("vocab entry 'b' has a bad id"), std::string::npos) << bad << ": " << error(bad, "");
  }
  EXPECT_NE(error("[]", "").find("no 'vocab' object"), std::string::npos);
  EXPECT_NE(error("3", "").find("no 'vocab' object"), std::string::npos);
  // Merges of other shapes.
  const std::string ok = R"({"a": 0, "b": 1})";
  EXPECT_NE(error(ok, R"(, "merges": ["ab"])").find("merge 'ab' has no space"), std::string::npos);
  EXPECT_NE(error(ok, R"(, "merges": [" a"])").find("merge ' a' has no space"), std::string::npos);
  for (const std::string bad : {R"(["a b", ["a"]])", R"([["a", "b", "c"]])", R"([["a", 1]])", R"([["a", ["b"]]])",
                                R"([["a", {"b": 1}]])", R"([7])", R"([{"a": "b"}])", R"([null])"}) {
    EXPECT_NE(error(ok, R"(, "merges": )" + bad).find("neither \"a b\" nor [a, b]"), std::string::npos)
        << bad << ": " << error(ok, R"(, "merges": )" + bad);
  }
  EXPECT_NE(error(ok, R"(, "merges": "a b")").find("model.merges is not an array"), std::string::npos);
  EXPECT_NE(error(ok, R"(, "merges": {"a": "b"})").find("model.merges is not an array"), std::string::npos);
  // A repeated key: the last value counts, as in a document.
  auto twice = VocabFromHfJson(R"({"model": {"vocab": {"x": 0}}, "decoder": {"type": "ByteLevel"},
                                   "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", "");
  ASSERT_TRUE(twice.ok()) << twice.status().message();
  EXPECT_EQ(twice->tokens, (std::vector<std::string>{"a", "b"}));
  // Not JSON, or JSON that stops early or goes on.
  for (const std::string bad : {"", "{", R"({"model": {"vocab": {"a": 0)", R"({"model": {}} x)", "[1, 2,]"}) {
    EXPECT_EQ(error(bad, ""), "tokenizer.json is not valid JSON") << bad;
    auto whole = VocabFromHfJson(bad, "");
    ASSERT_FALSE(whole.ok());
    EXPECT_EQ(whole.status().message(), "tokenizer.json is not valid JSON") << bad;
  }
  auto top = VocabFromHfJson("[1, 2]", "");
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.status().message().find("no 'model' object"), std::string::npos);
}

}  // namespace
}  // namespace tlr
