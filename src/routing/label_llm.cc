// The LLM in this process for router training (see label_llm.h).
#include "routing/label_llm.h"

#include <algorithm>

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"
#include "routing/router_train.h"

namespace tlr {

Expected<std::vector<std::vector<int32_t>>> LabelLlm::PredictNext(const std::vector<std::vector<int32_t>>& contexts,
                                                                  const AnswerFn& on_answer) {
  TLR_ASSIGN_OR_RETURN(auto all, Predict(contexts));
  if (all.size() != contexts.size()) return Status::Error("the LLM answered " + std::to_string(all.size()) + " of " +
                                                          std::to_string(contexts.size()) + " sequences");
  std::vector<std::vector<int32_t>> out(contexts.size());
  for (size_t i = 0; i < contexts.size(); ++i) {
    if (all[i].size() != contexts[i].size()) return Status::Error("the LLM's predictions do not match the sequence");
    if (!all[i].empty()) out[i].push_back(all[i].back());
    if (on_answer) on_answer(i, out[i]);
  }
  return out;
}

std::string InProcessLabelLlm::name() const { return "in-process " + model_.config().arch_name; }
std::string InProcessLabelLlm::model_id() const { return "fingerprint " + model_.fingerprint_hex(); }

Expected<std::vector<std::vector<int32_t>>> InProcessLabelLlm::Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                                       const AnswerFn& on_answer) {
  const int64_t V = model_.config().n_vocab;
  int64_t rows = 0;
  std::vector<KvCache> caches;
  for (const auto& s : seqs) {
    if (s.empty()) return Status::Error("an empty sequence cannot be scored");
    rows += static_cast<int64_t>(s.size());
    TLR_ASSIGN_OR_RETURN(KvCache c, model_.NewCache(static_cast<int64_t>(s.size())));
    caches.push_back(std::move(c));
  }
  std::vector<float> logits(static_cast<size_t>(rows * V));
  std::vector<SequenceInput> in;
  int64_t off = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    in.push_back({&caches[i], seqs[i], OutputRows::kAll, logits.data() + off * V, nullptr});
    off += static_cast<int64_t>(seqs[i].size());
  }
  ForwardContext ctx(pool_);
  TLR_RETURN_IF_ERROR(model_.Forward(in, &ctx));
  std::vector<std::vector<int32_t>> out(seqs.size());
  off = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (size_t p = 0; p < seqs[i].size(); ++p) out[i].push_back(ArgMax(logits.data() + (off + static_cast<int64_t>(p)) * V, V));
    off += static_cast<int64_t>(seqs[i].size());
    if (on_answer) on_answer(i, out[i]);
  }
  return out;
}

Expected<std::vector<std::vector<int32_t>>> InProcessLabelLlm::Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                                      int max_tokens, const AnswerFn& on_answer) {
  std::vector<KvCache> caches;
  std::vector<KvCache*> ptrs;
  std::vector<SequenceInput> pre;
  std::vector<int32_t> first;
  for (const auto& p : prompts) {
    if (p.empty()) return Status::Error("an empty prompt cannot be continued");
    TLR_ASSIGN_OR_RETURN(KvCache c, model_.NewCache(static_cast<int64_t>(p.size()) + max_tokens + 2));
    caches.push_back(std::move(c));
    first.push_back(p.back());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ptrs.push_back(&caches[i]);
    if (prompts[i].size() > 1) {
      pre.push_back({&caches[i], std::span<const int32_t>(prompts[i]).first(prompts[i].size() - 1), OutputRows::kNone,
                     nullptr, nullptr});
    }
  }
  ForwardContext ctx(pool_);
  if (!pre.empty()) TLR_RETURN_IF_ERROR(model_.Forward(pre, &ctx));
  TLR_ASSIGN_OR_RETURN(auto out, GreedyContinue(model_, ptrs, first, max_tokens, pool_));
  for (size_t i = 0; on_answer && i < out.size(); ++i) on_answer(i, out[i]);
  return out;
}

}  // namespace tlr
