// BridgedLabelLlm (see bridged_label_llm.h).
#include "device/labels/bridged_label_llm.h"

#include "device/llm/bridged_llm.h"
#include "net/protocol.h"

namespace tlr {

namespace {

// A failure's reason without what varies from call to call (quoted text, counts), so the
// reasons stay few.
std::string ReasonOf(const std::string& message) {
  std::string out;
  bool quoted = false;
  for (size_t i = 0; i < message.size(); ++i) {
    const char c = message[i];
    if (c == '\'' && (quoted || i == 0 || message[i - 1] == ' ')) {
      if (!quoted) out += "'...'";
      quoted = !quoted;
    } else if (quoted) {
      continue;
    } else if (c >= '0' && c <= '9') {
      if (out.empty() || out.back() != 'N') out += 'N';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

BridgedLabelLlm::BridgedLabelLlm(LlmBackend* llm, const Tokenizer& slm_vocab, const Tokenizer& llm_vocab,
                                 std::string model_id)
    : llm_(llm),
      slm_vocab_(slm_vocab),
      bridge_(slm_vocab, llm_vocab),
      model_id_(std::move(model_id) + ", answering in SLM vocabulary " + HashHex(slm_vocab.Fingerprint())) {}

Expected<std::vector<int32_t>> BridgedLabelLlm::Call(const std::vector<int32_t>& context, int n, bool* ended) {
  *ended = false;
  if (context.empty()) return Status::Error("an empty context cannot be continued");
  const BridgedContext ctx = bridge_.ToLlm(context);
  if (ctx.llm_ids.empty()) {
    ++failures_["the context has no text the LLM's vocabulary can start from"];
    return std::vector<int32_t>{};
  }
  LlmRequest req;
  req.context = ctx.llm_ids;
  req.prefix = ctx.pending;
  req.n = bridge_.LlmTokensFor(ctx, n, llm_->spells_prefix());  // as BridgedLlm asks
  req.sampling.temperature = 0.0f;  // greedy
  const size_t asked = static_cast<size_t>(req.n);
  const std::shared_ptr<LlmCall> call = llm_->Submit(std::move(req), {});
  const Expected<LlmReply>& r = call->Wait();
  if (!r.ok()) return r.status();
  auto b = SlmReplyOf(bridge_, ctx, *r, asked, static_cast<size_t>(n));
  if (!b.ok()) {
    ++failures_[ReasonOf(b.status().message())];
    return std::vector<int32_t>{};
  }
  *ended = b->ended;
  return std::move(b->slm_ids);
}

Expected<std::vector<std::vector<int32_t>>> BridgedLabelLlm::PredictNext(const std::vector<std::vector<int32_t>>& contexts,
                                                                         const AnswerFn& on_answer) {
  std::vector<std::vector<int32_t>> out(contexts.size());
  for (size_t i = 0; i < contexts.size(); ++i) {
    bool ended;
    TLR_ASSIGN_OR_RETURN(auto toks, Call(contexts[i], 1, &ended));
    if (!toks.empty()) out[i].push_back(toks[0]);
    if (on_answer) on_answer(i, out[i]);
  }
  return out;
}

Expected<std::vector<std::vector<int32_t>>> BridgedLabelLlm::Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                                     const AnswerFn& on_answer) {
  std::vector<std::vector<int32_t>> out(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].empty()) return Status::Error("an empty sequence cannot be scored");
    for (size_t p = 1; p <= seqs[i].size(); ++p) {
      bool ended;
      TLR_ASSIGN_OR_RETURN(auto toks, Call(std::vector<int32_t>(seqs[i].begin(), seqs[i].begin() + p), 1, &ended));
      out[i].push_back(toks.empty() ? -1 : toks[0]);
    }
    if (on_answer) on_answer(i, out[i]);
  }
  return out;
}

Expected<std::vector<std::vector<int32_t>>> BridgedLabelLlm::Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                                    int max_tokens, const AnswerFn& on_answer) {
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return Status::Error("an empty prompt cannot be continued");
    std::vector<int32_t> ctx = prompts[i];
    while (static_cast<int>(out[i].size()) < max_tokens) {
      bool ended;
      TLR_ASSIGN_OR_RETURN(auto toks, Call(ctx, max_tokens - static_cast<int>(out[i].size()), &ended));
      if (toks.empty()) break;  // the bridge could not go on: the answer ends here
      out[i].insert(out[i].end(), toks.begin(), toks.end());
      ctx.insert(ctx.end(), toks.begin(), toks.end());
      if (ended || slm_vocab_.IsEndOfGeneration(toks.back())) break;
    }
    if (on_answer) on_answer(i, out[i]);
  }
  return out;
}

}  // namespace tlr
