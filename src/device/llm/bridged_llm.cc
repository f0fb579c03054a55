// BridgedLlm (see bridged_llm.h).
#include "device/llm/bridged_llm.h"

namespace tlr {

Expected<BridgedReply> SlmReplyOf(const VocabBridge& bridge, const BridgedContext& ctx, const LlmReply& reply,
                                  size_t asked, size_t n) {
  return bridge.ToSlm(ctx, reply.tokens, reply.tokens.size() < asked && !reply.hit_limit, n);
}

BridgedLlm::BridgedLlm(LlmBackend* inner, const Tokenizer& slm_vocab, const Tokenizer& llm_vocab)
    : inner_(inner),
      slm_vocab_(slm_vocab),
      bridge_(std::make_shared<VocabBridge>(slm_vocab, llm_vocab)) {}

void BridgedLlm::Reset() {
  inner_->Reset();
  std::lock_guard<std::mutex> l(mu_);
  bridge_->Reset();
}

VocabBridgeStats BridgedLlm::bridge_stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return bridge_->stats();
}

std::shared_ptr<LlmCall> BridgedLlm::Submit(LlmRequest request, std::function<void()> on_done) {
  auto outer = std::make_shared<LlmCall>(std::move(on_done));
  auto ctx = std::make_shared<BridgedContext>();
  LlmRequest inner_req;
  {
    std::lock_guard<std::mutex> l(mu_);
    *ctx = bridge_->ToLlm(request.context);
    inner_req.n = bridge_->LlmTokensFor(*ctx, request.n, inner_->spells_prefix());
    // No lookahead: the SLM tokens a later call gives depend on how that call's context is
    // encoded, so a continuation read ahead would not be its answer.
    inner_req.lookahead = 0;
  }
  if (ctx->llm_ids.empty()) {
    outer->Complete(Status::Error("the context has no text the LLM's vocabulary can start from"));
    return outer;
  }
  inner_req.context = ctx->llm_ids;
  inner_req.sampling = request.sampling;
  inner_req.prefix = ctx->pending;
  const int n = request.n;
  const size_t asked = static_cast<size_t>(inner_req.n);
  // Turns the inner call's reply into the outer call's.
  auto finish = [bridge = bridge_, outer, ctx, n, asked](const Expected<LlmReply>& r) {
    if (!r.ok()) {
      outer->Complete(r.status());
      return;
    }
    auto b = SlmReplyOf(*bridge, *ctx, *r, asked, static_cast<size_t>(n));
    if (!b.ok()) {
      outer->Complete(b.status());
      return;
    }
    LlmReply out;
    out.ingested = r->ingested;
    out.tokens = std::move(b->slm_ids);
    out.logprobs.assign(out.tokens.size(), 0.0f);  // per LLM token, not per SLM token: not known
    outer->Complete(std::move(out));
  };
  // The inner call may complete on another thread before Submit returns, or on this one inside
  // it: whichever of the two sees both the call and its completion finishes the outer call.
  struct Slot {
    std::mutex mu;
    std::shared_ptr<LlmCall> call;
    bool completed = false;
  };
  auto slot = std::make_shared<Slot>();
  std::shared_ptr<LlmCall> call = inner_->Submit(std::move(inner_req), [slot, finish]() {
    std::shared_ptr<LlmCall> c;
    {
      std::lock_guard<std::mutex> g(slot->mu);
      slot->completed = true;
      c = std::move(slot->call);  // (no cycle left between the call and its callback)
    }
    if (c) finish(c->Wait());
  });
  bool completed;
  {
    std::lock_guard<std::mutex> g(slot->mu);
    completed = slot->completed;
    if (!completed) slot->call = call;
  }
  if (completed) finish(call->Wait());
  std::weak_ptr<LlmCall> weak = call;
  outer->OnCancel([weak] {
    if (auto c = weak.lock()) c->Cancel();
  });
  return outer;
}

}  // namespace tlr
