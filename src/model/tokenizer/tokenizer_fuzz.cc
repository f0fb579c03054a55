// libFuzzer target for tokenizer encode/decode (model layer, fuzz label). The first input
// byte picks the vocabulary and flags, the rest is text (or token ids). Checks: no crash,
// ids in range, byte-level BPE round-trips any bytes exactly, streaming decode only ever
// returns valid UTF-8. With the first byte's top bit set the rest is a tokenizer.json: it
// loads or is refused, and a vocabulary it gives encodes and decodes text.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "model/tokenizer/fuzz_vocab.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"
#include "util/utf8.h"

namespace {
tlr::Tokenizer* g_tok[2];
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_tok[0] = tlr::LoadFuzzVocab("gpt-2");
  g_tok[1] = tlr::LoadFuzzVocab("llama-spm");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const tlr::Tokenizer& tok = *g_tok[sel & 1];
  const bool parse_special = sel & 2;
  const bool add_special = sel & 4;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (sel & 0x80) {
    auto vocab = tlr::VocabFromHfJson(text, "");
    if (!vocab.ok()) return 0;
    auto own = tlr::Tokenizer::FromVocab(std::move(vocab).value());
    if (!own.ok()) return 0;
    const auto ids = own->Encode("Hello, wörld 12 <s>", true, true);
    for (int32_t id : ids) {
      if (!own->IsValidId(id)) std::abort();
    }
    (void)own->Decode(ids);  // any bytes (byte-level tokens): only no crash is asked
    return 0;
  }
  if (sel & 8) {
    // Decode arbitrary ids (out-of-range ones render as nothing).
    std::vector<int32_t> ids(text.size() / 4);
    if (!ids.empty()) std::memcpy(ids.data(), text.data(), ids.size() * 4);
    tlr::StreamDecoder d(tok, sel & 16);
    for (int32_t id : ids) {
      if (!tlr::IsValidUtf8(d.Push(id))) std::abort();
    }
    if (!tlr::IsValidUtf8(d.Flush())) std::abort();
    (void)tok.Decode(ids);
    return 0;
  }
  const auto ids = tok.Encode(text, add_special, parse_special);
  for (int32_t id : ids) {
    if (!tok.IsValidId(id)) std::abort();
  }
  if ((sel & 1) == 0 && !parse_special && !add_special && tok.Decode(ids) != text) {
    std::abort();  // byte-level BPE must give back exactly the bytes it was given
  }
  tlr::StreamDecoder d(tok);
  for (int32_t id : ids) {
    if (!tlr::IsValidUtf8(d.Push(id))) std::abort();
  }
  return 0;
}
