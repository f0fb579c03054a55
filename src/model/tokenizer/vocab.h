// Vocab: everything a tokenizer needs, as loaded from GGUF metadata (tokenizer.ggml.*) or a
// Hugging Face tokenizer.json, and as written back to GGUF (model layer). Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/status.h"

namespace tlr {

class GgufFile;
class GgufWriter;

// llama.cpp's token types (tokenizer.ggml.token_type values).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,       // BOS/EOS/chat markers: matched in text only with parse_special
  kUserDefined = 4,   // added tokens: always matched in text, never split by the model
  kUnused = 5,
  kByte = 6,          // SentencePiece byte fallback <0xXX>
};

enum class VocabModel {
  kBpe,  // byte-level BPE (tokenizer.ggml.model = "gpt2")
  kSpm,  // SentencePiece BPE with byte fallback (tokenizer.ggml.model = "llama")
};

struct Vocab {
  VocabModel model = VocabModel::kBpe;
  // Pre-tokenizer name as in tokenizer.ggml.pre ("gpt-2", "qwen2", "llama-bpe", ...). When
  // pre_regex is non-empty (a tokenizer.json gave its own split patterns) it is used instead.
  std::string pre = "default";
  std::vector<std::string> pre_regex;
  bool normalize_nfc = false;  // tokenizer.json normalizer NFC (Qwen)
  bool ignore_merges = false;  // a whole pre-token found in the vocab is used as is (Llama 3)
  bool add_space_prefix = false;  // SentencePiece dummy prefix "▁" before the text

  std::vector<std::string> tokens;  // id -> text (byte-level or ▁-escaped form)
  std::vector<float> scores;        // id -> score (SentencePiece merge priority); may be empty
  std::vector<TokenType> types;     // id -> type
  std::vector<std::pair<std::string, std::string>> merges;  // BPE merges, rank order
  std::vector<uint8_t> lstrip, rstrip;  // per id: added token eats whitespace on that side

  int32_t bos_id = -1, eos_id = -1, eot_id = -1, unk_id = -1, pad_id = -1;
  // More ends of generation (Tokenizer::IsEndOfGeneration): Llama 3.1's end of a tool call's
  // message, and the FIM pad, repository and file-separator tokens (found by text when absent).
  int32_t eom_id = -1, fim_pad_id = -1, fim_rep_id = -1, fim_sep_id = -1;
  bool add_bos = false, add_eos = false;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  // Checks internal consistency (array lengths, special ids in range).
  Status Validate() const;
};

// Reads tokenizer.ggml.* metadata. Fails with a message naming the key on anything wrong.
Expected<Vocab> VocabFromGguf(const GgufFile& file);
// Writes the vocab as tokenizer.ggml.* metadata that llama.cpp reads.
void VocabToGguf(const Vocab& vocab, GgufWriter* writer);
// Parses a Hugging Face tokenizer.json (text). `config_json` is the optional
// tokenizer_config.json beside it (bos/eos tokens, add_bos_token); pass "" when absent.
Expected<Vocab> VocabFromHfJson(std::string_view json_text, const std::string& config_json);
// Loads tokenizer.json from a path, plus tokenizer_config.json from the same folder if any.
Expected<Vocab> VocabFromHfFile(const std::string& path);

}  // namespace tlr
