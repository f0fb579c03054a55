// One text, two vocabularies (device layer): the SLM's context as the LLM's tokens, and the
// LLM's reply as SLM tokens, for pairs whose tokenizers differ (fingerprints unequal).
//
// Towards the LLM: the SLM context's text (its BOS dropped, control tokens as their text, so an
// LLM with the same control tokens reads them as its own) is encoded with the LLM's tokenizer,
// its BOS first when it adds one. The last word is held back ("pending"): where the SLM's
// context ends inside what is one token for the LLM ("Hel|lo"), the LLM's encoding of the
// prefix would end in a token it would not produce with the rest of the word, so the prompt
// stops at the word's start and the reply must begin with the held-back bytes (token healing by
// check and trim). Consecutive contexts share their beginning: only the tail from the last
// pre-token the change cannot reach (the tokenizer's restart points) is encoded again, so the
// LLM-side context keeps its tokens and a server's delta sync and KV reuse work as with one
// vocabulary; the tokens are exactly the whole text's encoding, whatever contexts came before
// (a SentencePiece LLM, encoded whole, has no restart points: every context is encoded whole).
//
// Back to the SLM: the reply's text after the held-back bytes is encoded with the SLM's
// tokenizer, exactly (the tokens' pieces concatenate to the text byte for byte, UTF-8 split
// across tokens included), and only pieces that cannot change when more text follows are kept
// (all but the last, and none that ends inside a UTF-8 character) unless the LLM ended. A reply
// that does not reproduce the held-back text, holds a control token other than an end of
// generation, is ill-formed UTF-8, or that the SLM's vocabulary cannot represent, is an error
// naming the reason (the decoder's FALLBACK).
//
// Not thread-safe (one per LLM conversation; the incremental state is the last context).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "util/status.h"

namespace tlr {

struct BridgedContext {
  std::vector<int32_t> llm_ids;  // the context in the LLM's tokens, up to the held-back word
  std::string pending;           // the context's last bytes, held back: the reply must start with them
};

struct BridgedReply {
  std::vector<int32_t> slm_ids;  // SLM tokens continuing the SLM context (the SLM's EOS last when ended)
  size_t llm_tokens_used = 0;    // reply tokens whose text the SLM tokens cover (all when ended)
  bool ended = false;            // the LLM ended (an end-of-generation token)
};

struct VocabBridgeStats {
  int64_t contexts = 0;           // ToLlm calls
  int64_t llm_tokens_encoded = 0; // LLM tokens produced by encoding (the re-encoded tails)
  int64_t llm_tokens_kept = 0;    // LLM tokens taken over from the previous context
  int64_t full_encodes = 0;       // contexts encoded from the start
  int64_t pending_bytes = 0;      // bytes held back, summed
};

class VocabBridge {
 public:
  // Both tokenizers must outlive the bridge.
  VocabBridge(const Tokenizer& slm, const Tokenizer& llm) : slm_(slm), llm_(llm) {}
  // Whether a pair needs one (their vocabularies differ).
  static bool Needed(const Tokenizer& slm, const Tokenizer& llm) { return slm.Fingerprint() != llm.Fingerprint(); }

  // The text of an SLM context as the bridge reads it (BOS dropped, control tokens as text).
  std::string SlmText(std::span<const int32_t> slm_ids) const;
  BridgedContext ToLlm(std::span<const int32_t> slm_ids);
  // The LLM's reply tokens after `ctx.llm_ids` (as many as it gave; `llm_ended`: it stopped on
  // its own without an end token, e.g. its context is full), at most `max_tokens` SLM tokens.
  Expected<BridgedReply> ToSlm(const BridgedContext& ctx, std::span<const int32_t> reply, bool llm_ended,
                               size_t max_tokens) const;
  // How many LLM tokens to ask for to get `n` SLM tokens after `ctx`: n tokens' worth and one
  // more that may be held back, plus the tokens spelling the held-back bytes unless the backend
  // spells them on top of what is asked (`backend_spells_prefix`: it constrains its reply).
  int LlmTokensFor(const BridgedContext& ctx, int n, bool backend_spells_prefix) const;

  const VocabBridgeStats& stats() const { return stats_; }
  void Reset();

 private:
  const Tokenizer& slm_;
  const Tokenizer& llm_;
  // The last context: its text, the LLM tokens of all of it (BOS apart) and where each ends.
  std::string text_;
  std::vector<int32_t> ids_;
  std::vector<size_t> ends_;
  std::vector<size_t> restarts_;  // where its encoding can resume (Tokenizer::EncodeExact)
  VocabBridgeStats stats_;
};

}  // namespace tlr
