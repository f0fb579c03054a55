// Tokenizer (model layer): text <-> token ids exactly as the reference tokenizers do it.
//
//   - byte-level BPE (GPT-2, Llama 3, Qwen2, DeepSeek-R1-Qwen pre-tokenizers), and
//   - SentencePiece BPE with byte fallback and the dummy-prefix rule (Llama 2, Phi-3),
// loaded from GGUF metadata or a Hugging Face tokenizer.json. Special and added tokens are
// split out of the text first (control tokens only with parse_special); decode maps ids back
// to bytes; StreamDecoder emits text only in whole UTF-8 characters.
//
// Thread-safety: a Tokenizer is immutable after construction; Encode/Decode may run on many
// threads at once. A StreamDecoder belongs to one stream (one thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/pretokenize.h"
#include "model/tokenizer/vocab.h"
#include "util/status.h"

namespace tlr {

class GgufFile;

struct TokenizerOptions {
  // Overrides the pre-tokenizer (a tokenizer.ggml.pre name), e.g. to read a Qwen
  // tokenizer.json as "deepseek-r1-qwen". Empty: what the file says.
  std::string pre_override;
};

class Tokenizer {
 public:
  static Expected<Tokenizer> FromVocab(Vocab vocab, const TokenizerOptions& opts = {});
  static Expected<Tokenizer> FromGguf(const GgufFile& file, const TokenizerOptions& opts = {});
  static Expected<Tokenizer> FromHfJsonFile(const std::string& path,
                                            const TokenizerOptions& opts = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`. add_special adds BOS/EOS as the vocabulary's metadata says;
  // parse_special lets control tokens written in the text (e.g. "<|im_start|>") become their
  // ids (user-defined added tokens are always recognised, as in the references).
  std::vector<int32_t> Encode(std::string_view text, bool add_special = false,
                              bool parse_special = false) const;
  // Token ids whose pieces are exactly `text`'s bytes, for text that is not necessarily a
  // whole document: no BOS/EOS, no normalization (NFC would change bytes), and the
  // SentencePiece dummy prefix only `at_start` (text continuing other text gets none). A
  // vocabulary that cannot represent some bytes (no byte fallback) gives its unknown token.
  std::vector<int32_t> EncodeExact(std::string_view text, bool at_start, bool parse_special = false) const;
  // EncodeExact, and where its encoding can resume: byte offsets r (ascending) such that any
  // text beginning with text[0, r + RestartMargin()) encodes to the tokens of text[0, r) (they
  // end exactly at r) followed by EncodeExact(rest from r, false, parse_special). The starts of
  // the pieces a byte-level BPE encodes on their own (pre-tokens, special tokens); none for
  // SentencePiece vocabularies (encoded whole) or added tokens that strip whitespace.
  std::vector<int32_t> EncodeExact(std::string_view text, bool at_start, bool parse_special,
                                   std::vector<size_t>* restarts) const;
  size_t RestartMargin() const { return restart_margin_; }

  // Bytes of one token. Control tokens render as "" unless render_special. Ids outside the
  // vocabulary render as "".
  std::string Piece(int32_t id, bool render_special = false) const;
  // Bytes of a sequence. SentencePiece vocabularies drop the dummy-prefix space of the
  // first text token (so Decode(Encode(t)) == t); control tokens render only with
  // render_special.
  std::string Decode(std::span<const int32_t> ids, bool render_special = false) const;

  bool IsValidId(int32_t id) const { return id >= 0 && id < n_vocab(); }
  int32_t n_vocab() const { return vocab_.size(); }
  const Vocab& vocab() const { return vocab_; }
  const std::string& TokenText(int32_t id) const { return vocab_.tokens[id]; }
  int32_t bos() const { return vocab_.bos_id; }
  int32_t eos() const { return vocab_.eos_id; }
  // End of generation, as llama.cpp decides it: EOS, EOT and the other ids the file names (EOM,
  // FIM pad/repo/separator), and the tokens whose text ends a turn or a text in some family
  // (<end_of_turn>, <|im_end|>, <|eot_id|>, <|eom_id|>, <|endoftext|>, ...): a Gemma 3 file from
  // llama.cpp's converter names only <eos>, and its turns end at <end_of_turn>.
  bool IsEndOfGeneration(int32_t id) const;
  const std::vector<int32_t>& EndOfGenerationIds() const { return eog_; }  // sorted
  // 64-bit fingerprint of the vocabulary (model kind, pre-tokenizer, tokens, types, merges):
  // equal fingerprints mean identical tokenization.
  uint64_t Fingerprint() const { return fingerprint_; }
  // Piece of the id-th token of a sequence: Piece() plus the SentencePiece rule that the
  // first text piece loses its dummy-prefix space. *at_start tracks "no text yet".
  std::string SequencePiece(int32_t id, bool render_special, bool* at_start) const;
  // Token id for an exact token text, or -1.
  int32_t Find(std::string_view text) const;

 private:
  Tokenizer() = default;
  struct Fragment {
    size_t begin, end;  // raw text byte range, or ...
    int32_t token;      // ... a special token id (>= 0)
  };
  std::vector<Fragment> PartitionSpecial(std::string_view text, bool parse_special) const;
  void EncodeText(std::string_view text, bool parse_special, bool at_start, bool normalize,
                  std::vector<int32_t>* out, std::vector<size_t>* restarts = nullptr) const;
  void EncodeBpe(std::string_view text, std::vector<int32_t>* out, std::vector<size_t>* restarts = nullptr,
                 size_t base = 0) const;
  void EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const;
  void EncodeSpm(std::string_view text, std::vector<int32_t>* out) const;
  std::string Normalize(std::string_view text) const;

  Vocab vocab_;
  std::unordered_map<std::string, int32_t> index_;
  // (left id << 32 | right id) -> (rank, merged id), for byte-level BPE.
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<int32_t> special_;  // tokens matched in text, longest first
  std::vector<int32_t> eog_;      // ends of generation, sorted
  std::unique_ptr<RegexSplitter> splitter_;
  int32_t byte_token_[256];       // SentencePiece <0xXX> ids (-1 if absent)
  uint64_t fingerprint_ = 0;
  bool strips_ = false;             // an added token eats whitespace beside it: no restarts
  // The pre-tokenizer's lookahead (a character or two) and a special token that may begin
  // before a restart point: 8 bytes more than the longest special token's text, at least 16.
  size_t restart_margin_ = 16;
};

// Incremental decoder for streaming output: Push returns only whole UTF-8 characters (bytes
// of a character split across tokens are held back until it is complete) and always valid
// UTF-8 (bytes that can never form a character become U+FFFD); Flush returns the rest.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tok_(tokenizer), render_special_(render_special) {}
  std::string Push(int32_t id);
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool render_special_;
  bool at_start_ = true;
  std::string pending_;
};

// The GPT-2 byte <-> printable-character mapping used by byte-level BPE vocabularies.
std::string ByteToBpeChar(uint8_t b);
// Inverse for one code point; -1 when the code point is not in the mapping.
int BpeCharToByte(char32_t cp);

}  // namespace tlr
