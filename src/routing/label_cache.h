// CachedLabelLlm (routing layer): makes router training's LLM work resumable. Every answer the
// LLM gives (a sequence's predictions, a prompt's greedy continuation) is appended to
// DIR/llm_answers.jsonl as it arrives; a later run with the same directory reads them back and
// asks the LLM only for what is missing, so an interrupted run (Ctrl-C, a server restart, a lost
// connection) continues where it stopped and never asks for a sequence twice. The directory
// remembers which LLM and vocabulary it was filled for (DIR/manifest.json); another one is an
// error, not a silent mix.
//
// Thread-safety: one caller at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "routing/label_llm.h"

namespace tlr {

class CachedLabelLlm : public LabelLlm {
 public:
  // The answers depend on the LLM (inner->model_id(), checked against the directory's
  // manifest); the directory is created if missing.
  static Expected<std::unique_ptr<CachedLabelLlm>> Open(LabelLlm* inner, const std::string& dir);
  ~CachedLabelLlm() override;

  std::string name() const override { return inner_->name(); }
  std::string model_id() const override { return inner_->model_id(); }
  Expected<std::vector<std::vector<int32_t>>> Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                      const AnswerFn& on_answer = {}) override;
  Expected<std::vector<std::vector<int32_t>>> Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                     int max_tokens, const AnswerFn& on_answer = {}) override;
  Expected<std::vector<std::vector<int32_t>>> PredictNext(const std::vector<std::vector<int32_t>>& contexts,
                                                          const AnswerFn& on_answer = {}) override;
  bool next_only() const override { return inner_->next_only(); }

  int64_t loaded() const { return loaded_; }    // answers read back from the directory
  int64_t reused() const { return reused_; }    // questions answered from them
  int64_t asked() const { return asked_; }      // questions sent to the LLM

 private:
  CachedLabelLlm(LabelLlm* inner, std::string path) : inner_(inner), path_(std::move(path)) {}
  struct Key {
    uint64_t a = 0, b = 0;
    bool operator==(const Key& o) const { return a == o.a && b == o.b; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.a ^ (k.b * 0x9e3779b97f4a7c15ull)); }
  };
  static Key KeyOf(char kind, int max_tokens, const std::vector<int32_t>& ids);
  // Looks the inputs up, asks `ask` for the rest, stores its answers.
  using Ask = std::function<Expected<std::vector<std::vector<int32_t>>>(const std::vector<std::vector<int32_t>>&,
                                                                        const AnswerFn&)>;
  Expected<std::vector<std::vector<int32_t>>> Through(char kind, int max_tokens,
                                                      const std::vector<std::vector<int32_t>>& in, const Ask& ask,
                                                      const AnswerFn& on_answer);
  Status Load();

  LabelLlm* inner_;
  std::string path_;
  FILE* out_ = nullptr;
  std::mutex mu_;  // answers arrive from the LLM's request threads
  std::unordered_map<Key, std::vector<int32_t>, KeyHash> answers_;
  int64_t loaded_ = 0, reused_ = 0, asked_ = 0;
};

}  // namespace tlr
