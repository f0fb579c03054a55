// An LLM of another vocabulary behind the decoder's LlmBackend interface (device layer): the
// decoder keeps speaking SLM token ids; each call's context goes to the LLM in its own tokens
// and its reply comes back as SLM tokens through a VocabBridge (vocab_bridge.h). The inner
// backend (in process, or a server in the LLM's vocabulary) sees an ordinary conversation in
// its own tokens, so its KV reuse and a server's delta sync work as with one vocabulary.
//
// A call asks the LLM for enough tokens to cover the held-back word and the SLM tokens wanted;
// no lookahead (a later call's SLM tokens depend on how its context is encoded, so text read
// ahead would not be its answer). A reply the bridge cannot use fails the call with the bridge's reason (the
// decoder's FALLBACK). Cancelling a call cancels the inner one. Thread-safe.
#pragma once

#include <memory>
#include <mutex>

#include "device/llm/llm_backend.h"
#include "device/llm/vocab_bridge.h"

namespace tlr {

// The SLM tokens of a bridged call's reply, at most n (`asked`: the LLM tokens the call asked
// for, LlmTokensFor; fewer without an end token, not at that limit: the LLM stopped on its own).
Expected<BridgedReply> SlmReplyOf(const VocabBridge& bridge, const BridgedContext& ctx, const LlmReply& reply,
                                  size_t asked, size_t n);

class BridgedLlm : public LlmBackend {
 public:
  // `inner` speaks `llm_vocab`'s ids; the decoder speaks `slm_vocab`'s. All three must outlive it.
  BridgedLlm(LlmBackend* inner, const Tokenizer& slm_vocab, const Tokenizer& llm_vocab);
  std::shared_ptr<LlmCall> Submit(LlmRequest request, std::function<void()> on_done) override;
  void Reset() override;
  uint64_t vocab_fingerprint() const override { return slm_vocab_.Fingerprint(); }
  LlmWork work() const override { return inner_->work(); }
  std::string name() const override { return inner_->name() + " (vocabulary bridge)"; }
  VocabBridgeStats bridge_stats() const;

 private:
  LlmBackend* inner_;
  const Tokenizer& slm_vocab_;
  mutable std::mutex mu_;  // bridge_'s incremental state (ToLlm)
  // Shared with the completions of calls in flight, which may run after this object is gone
  // (an inner backend destroyed later finishes them); they only read the tokenizers (ToSlm).
  std::shared_ptr<VocabBridge> bridge_;
};

}  // namespace tlr
