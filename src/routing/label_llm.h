// LabelLlm (routing layer): what router training asks of the LLM, wherever the LLM runs. Two
// questions: the LLM's greedy continuation of a prompt (a reference answer, a rollout), and its
// teacher-forced predictions along a sequence (the token it would pick after every prefix: the
// CITER label at each position), or after one prefix. Token ids are the SLM's: an LLM of
// another vocabulary answers through the device layer's BridgedLabelLlm (bridged_label_llm.h). In this process (InProcessLabelLlm, below) the LLM's Forward
// answers them; behind a server the device layer's RemoteLabelLlm (device/labels/remote_label_llm.h)
// asks `tlr serve` or a vLLM-compatible engine, so an LLM that lives on GPUs elsewhere labels
// a router here.
//
// Thread-safety: one caller at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/status.h"

namespace tlr {

class Model;
class ThreadPool;

class LabelLlm {
 public:
  // Hears each answer as soon as it is there (index into the question list), possibly from
  // several threads at once, before the call returns; a call that fails may have given some.
  using AnswerFn = std::function<void(size_t, const std::vector<int32_t>&)>;

  virtual ~LabelLlm() = default;
  virtual std::string name() const = 0;
  // What identifies the model's answers (its weights): "fingerprint <hex>" when known (in process,
  // tlr serve), else the served model's name. A resumable run checks it (label_cache.h).
  virtual std::string model_id() const = 0;
  // For each sequence, the LLM's argmax after each prefix: out[i][p] is the token it predicts
  // after seqs[i][0..p] (one per position; out[i].size() == seqs[i].size()).
  virtual Expected<std::vector<std::vector<int32_t>>> Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                              const AnswerFn& on_answer = {}) = 0;
  // For each prompt, its greedy continuation: up to max_tokens tokens, ending early with an
  // end-of-generation token (included).
  virtual Expected<std::vector<std::vector<int32_t>>> Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                             int max_tokens, const AnswerFn& on_answer = {}) = 0;
  // For each context, the token the LLM gives right after it: out[i] holds that one token, or
  // none when the LLM gives none there (an LLM of another vocabulary whose reply turns into no
  // SLM token: the decoder would fall back to the SLM's). Default: Predict, keep the last.
  virtual Expected<std::vector<std::vector<int32_t>>> PredictNext(const std::vector<std::vector<int32_t>>& contexts,
                                                                  const AnswerFn& on_answer = {});
  // True when Predict costs a call per position (an LLM of another vocabulary, bridged): router
  // training then asks PredictNext only where the SLM is wrong instead of Predict everywhere.
  virtual bool next_only() const { return false; }
};

// The LLM in this process: batched prefills and greedy decoding over `model` (not owned).
class InProcessLabelLlm : public LabelLlm {
 public:
  InProcessLabelLlm(const Model& model, ThreadPool* pool) : model_(model), pool_(pool) {}
  std::string name() const override;
  std::string model_id() const override;
  Expected<std::vector<std::vector<int32_t>>> Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                      const AnswerFn& on_answer = {}) override;
  Expected<std::vector<std::vector<int32_t>>> Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                     int max_tokens, const AnswerFn& on_answer = {}) override;

 private:
  const Model& model_;
  ThreadPool* pool_;
};

}  // namespace tlr
