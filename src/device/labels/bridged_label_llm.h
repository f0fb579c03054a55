// BridgedLabelLlm (device layer): router training's LLM (routing/label_llm.h) when its
// vocabulary differs from the SLM's. Every question is asked as the decoder would ask it in a
// routed call: the SLM context's text goes to the LLM in its own tokens with the last word held
// back (vocab_bridge.h, token healing through the backend's constraint where it has one), and
// the reply comes back as SLM tokens. So "the LLM is right here" is decided on text: the label
// at a position is whether the SLM token the LLM's reply turns into is the reference's.
//
//   PredictNext  one bridged call per context, one SLM token (none when the reply turns into
//                no usable SLM token: the decoder would fall back to the SLM's own there);
//   Greedy       bridged calls until max_tokens SLM tokens or the LLM ends (references);
//   Predict      PredictNext at every position (-1 where none; router training asks
//                PredictNext only where the SLM is wrong: next_only()).
// The backend (in process, or a server speaking the LLM's ids) reuses its KV cache across the
// calls, which share their beginnings. Errors of the backend (a server down) fail the call;
// replies the bridge cannot use are answers ("none"), counted in bridge_failures().
//
// Thread-safety: one caller at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "device/llm/llm_backend.h"
#include "device/llm/vocab_bridge.h"
#include "routing/label_llm.h"

namespace tlr {

class BridgedLabelLlm : public LabelLlm {
 public:
  // `llm` speaks `llm_vocab`'s ids; `model_id` identifies its weights (label_llm.h). All outlive
  // this. model_id() adds the SLM's vocabulary: the answers are its tokens (a label cache of
  // the same LLM and another SLM is another cache).
  BridgedLabelLlm(LlmBackend* llm, const Tokenizer& slm_vocab, const Tokenizer& llm_vocab, std::string model_id);

  std::string name() const override { return llm_->name() + " (vocabulary bridge)"; }
  std::string model_id() const override { return model_id_; }
  bool next_only() const override { return true; }
  Expected<std::vector<std::vector<int32_t>>> Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                      const AnswerFn& on_answer = {}) override;
  Expected<std::vector<std::vector<int32_t>>> Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                     int max_tokens, const AnswerFn& on_answer = {}) override;
  Expected<std::vector<std::vector<int32_t>>> PredictNext(const std::vector<std::vector<int32_t>>& contexts,
                                                          const AnswerFn& on_answer = {}) override;

  // Calls whose reply the bridge could not use, by reason.
  const std::map<std::string, int64_t>& bridge_failures() const { return failures_; }
  const VocabBridgeStats& bridge_stats() const { return bridge_.stats(); }

 private:
  // One routed call: up to `n` SLM tokens after `context` (empty when the bridge cannot use the
  // reply), `*ended` when the LLM ended its answer.
  Expected<std::vector<int32_t>> Call(const std::vector<int32_t>& context, int n, bool* ended);

  LlmBackend* llm_;
  const Tokenizer& slm_vocab_;
  VocabBridge bridge_;
  std::string model_id_;
  std::map<std::string, int64_t> failures_;
};

}  // namespace tlr
