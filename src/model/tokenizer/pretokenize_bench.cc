// Pre-tokenization speed (a benchmark, not a test): each supported pattern's split of a ~1 MB
// multilingual text by TLR's regex engine against ICU's (the engine the tokenizers used before;
// icu_split_ref.h is that code), and NFC of the same text, TLR's tables against ICU's
// Normalizer2. Usage: pretokenize_bench [text-file] (default: llama.cpp's tokenizer test texts
// and the CommonsenseQA questions in ../shared, repeated to 1 MB). Best of 5 runs each.
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "model/tokenizer/icu_split_ref.h"
#include "model/tokenizer/pretokenize.h"
#include "util/unicode.h"

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename F>
double BestSeconds(F f) {
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string text;
  if (argc > 1) {
    text = Slurp(argv[1]);
  } else {
    const std::string shared = TLR_SHARED_DIR;
    std::string base;
    for (const char* set : {"gpt-2", "llama-bpe", "deepseek-r1-qwen", "llama-spm"}) {
      base += Slurp(shared + "/tokenizer-vectors/ggml-vocab-" + std::string(set) + ".gguf.inp");
    }
    base += Slurp(shared + "/datasets/commonsenseqa_dev.jsonl").substr(0, 200000);
    while (text.size() < (1u << 20)) text += base;
    text.resize(1u << 20);
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
  }
  std::printf("text: %zu bytes\n%-34s %10s %10s %7s\n", text.size(), "pattern", "ICU ms", "TLR ms", "ratio");
  const char* names[] = {"gpt-2", "llama-bpe", "qwen2", "default"};
  std::vector<std::pair<std::string, std::vector<std::string>>> sets;
  for (const char* n : names) sets.emplace_back(n, tlr::PreTokenizerPatterns(n).value());
  sets.emplace_back("llama3 tokenizer.json (?i:...)",
                    std::vector<std::string>{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"});
  int failures = 0;
  for (const auto& [name, patterns] : sets) {
    tlr::icu_ref::Splitter icu(patterns);
    auto ours = tlr::RegexSplitter::Create(patterns);
    if (!icu.error().empty() || !ours.ok()) return 1;
    std::vector<std::pair<size_t, size_t>> a, b;
    const double t_icu = BestSeconds([&] { a = icu.Split(text); });
    const double t_tlr = BestSeconds([&] { b = ours->Split(text); });
    if (a != b) ++failures;
    std::printf("%-34s %10.1f %10.1f %6.2fx%s\n", name.c_str(), t_icu * 1e3, t_tlr * 1e3, t_icu / t_tlr,
                a == b ? "" : "  (pieces differ!)");
  }
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(st);
  std::string x, y;
  const double t_icu = BestSeconds([&] {
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
    UErrorCode s2 = U_ZERO_ERROR;
    x.clear();
    if (nfc->isNormalized(u, s2)) {
      x = text;
    } else {
      nfc->normalize(u, s2).toUTF8String(x);
    }
  });
  const double t_tlr = BestSeconds([&] { y = tlr::unicode::NfcUtf8(text); });
  std::printf("%-34s %10.1f %10.1f %6.2fx%s\n", "NFC", t_icu * 1e3, t_tlr * 1e3, t_icu / t_tlr, x == y ? "" : "  (differs!)");
  return failures == 0 && x == y ? 0 : 1;
}
