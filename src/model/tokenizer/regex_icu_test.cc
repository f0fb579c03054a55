// TLR's regex engine against ICU's (unit; ICU is test-only): the pre-tokenizer split of every
// supported pattern, those of the reference tokenizer.json files and others real tokenizers use,
// on llama.cpp's tokenizer test texts and on random multilingual strings, must be identical.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include "model/tokenizer/icu_split_ref.h"
#include "model/tokenizer/pretokenize.h"
#include "model/tokenizer/regex.h"
#include "util/utf8.h"

namespace tlr {
namespace {

std::vector<std::vector<std::string>> PatternSets() {
  std::vector<std::vector<std::string>> sets;
  for (const char* name : {"gpt-2", "default", "llama-bpe", "qwen2"}) sets.push_back(PreTokenizerPatterns(name).value());
  // As the Llama 3 / Qwen tokenizer.json files write it.
  sets.push_back({"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"});
  // GPT-4o (o200k) style, as Phi-4 and Llama 4 use it.
  sets.push_back({"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                  "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"});
  // DeepSeek V3's sequence.
  sets.push_back({"\\p{N}{1,3}", "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
                  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
                  " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"});
  // Constructs the tables above do not reach.
  sets.push_back({"a$|\\s$", "\\s+?\\S", "\\d{2,3}?\\D|(?>\\w+)\\W", "\\p{L}++'|\\P{L}{2}", "(?:ab|a)(?=c)|.", "[^\\p{Lu}\\p{Nd}\\s]+$|^\\S"});
  sets.push_back({"(?i)[a-f]+|[\\x{1F600}-\\x{1F64F}\\u00e9]|[\\p{Sc}\\p{Sm}]+|\\w+(?!\\d)|\\W"});
  return sets;
}

std::vector<std::string> VectorTexts() {
  std::vector<std::string> texts;
  for (const char* set : {"gpt-2", "llama-bpe", "deepseek-r1-qwen", "llama-spm"}) {
    std::ifstream f(std::string(TLR_SHARED_DIR) + "/tokenizer-vectors/ggml-vocab-" + set + ".gguf.inp");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string all = ss.str(), sep = "\n__ggml_vocab_test__\n";
    for (size_t pos = 0; pos < all.size();) {
      size_t next = all.find(sep, pos);
      if (next == std::string::npos) next = all.size();
      texts.push_back(all.substr(pos, next - pos));
      pos = next + sep.size();
    }
  }
  return texts;
}

std::string RandomText(std::mt19937& rng) {
  static const std::vector<char32_t> pool = {
      'a', 'b', 'Z', 'k', 'K', 's', 'S', 'T', 'x', '0', '7', '\'', '"', ' ', ' ', ' ', '\n', '\r', '\t', '\v', '\f',
      '.', ',', '!', '-', '/', '$', '{', '}', '[', '\\', '^', '_', 0x85, 0xA0, 0x17F, 0x212A, 0x2028, 0x3000,
      0x2003, 0xE9, 0x301, 0x308, 0x4E2D, 0x6587, 0x3042, 0x30AB, 0xAC00, 0x0661, 0x0967, 0x0915, 0x093F,
      0x1F600, 0x1F44D, 0x200D, 0x20AC, 0x2212, 0x00BD, 0x2460, 0x01C5, 0x02B0, 0x0394, 0x03C2, 0xFF21, 0x10400};
  std::string out;
  const int n = static_cast<int>(rng() % 24);
  for (int k = 0; k < n; ++k) {
    if (rng() % 40 == 0) {
      out += static_cast<char>(0x80 + rng() % 0x7F);  // an ill-formed byte
    } else {
      AppendUtf8(&out, pool[rng() % pool.size()]);
    }
  }
  return out;
}

TEST(RegexIcu, SplitsEqualIcusOnVectorsAndRandomText) {
  const std::vector<std::string> texts = VectorTexts();
  ASSERT_GT(texts.size(), 50u);
  std::mt19937 rng(11);
  for (const auto& patterns : PatternSets()) {
    icu_ref::Splitter ref(patterns);
    ASSERT_EQ(ref.error(), "") << patterns[0];
    auto ours = RegexSplitter::Create(patterns);
    ASSERT_TRUE(ours.ok()) << ours.status().message();
    auto check = [&](const std::string& t) {
      ASSERT_EQ(ours->Split(t), ref.Split(t)) << "pattern " << patterns.back() << "\ntext: " << t;
    };
    for (const auto& t : texts) check(t);
    for (int i = 0; i < 4000; ++i) check(RandomText(rng));
    if (HasFatalFailure()) return;
  }
}

TEST(RegexIcu, ErrorsNameTheConstruct) {
  EXPECT_FALSE(UnicodeRegex::Compile(std::string(100000, '(')).ok());  // no stack overflow
  for (const char* bad : {"(?<=a)b", "a\\1", "a{1}{1}", "a**", "\\x{110000}", "\\UFFFFFFFF", "[a", "(a", "a)", "*a", "\\p{Bogus}", "a{3,2}", "(?:a*)*", "[[a]]", "\\"}) {
    auto r = UnicodeRegex::Compile(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("pre-tokenizer regex"), std::string::npos) << r.status().message();
    }
  }
}

// A pattern that backtracks exponentially (from a hostile tokenizer.json) stops at its step
// budget instead of hanging the process: the text is then left in one piece.
TEST(RegexIcu, ExponentialBacktrackingIsBounded) {
  // (?:a|a)*b backtracks exponentially; a+b|a quadratically over the searches of one text.
  auto quadratic = RegexSplitter::Create({"a+b|a"});
  ASSERT_TRUE(quadratic.ok());
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_FALSE(quadratic->Split(std::string(300000, 'a')).empty());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 5.0);
  auto splitter = RegexSplitter::Create({"(?:a|a)*b"});
  ASSERT_TRUE(splitter.ok());
  const auto t0 = std::chrono::steady_clock::now();
  const auto pieces = splitter->Split(std::string(40, 'a'));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  ASSERT_FALSE(pieces.empty());
  EXPECT_EQ(pieces.back().second, 40u);
  // Real patterns are far from the budget: a long text splits as ICU splits it (above).
  auto qwen = RegexSplitter::Create(PreTokenizerPatterns("qwen2").value());
  EXPECT_EQ(qwen->Split(std::string(200000, ' ') + "x").size(), 2u);
}

}  // namespace
}  // namespace tlr
