// The LLM backend factory (see llm_factory.h).
#include "device/llm_factory.h"

namespace tlr {

Expected<std::unique_ptr<LlmStack>> LlmStack::Create(const LlmSpec& spec, const Tokenizer& vocab) {
  if (!(spec.sim_rtt_s >= 0) || !(spec.sim_jitter_s >= 0)) {
    return Status::Error("simulated network delays must not be negative");
  }
  std::unique_ptr<LlmStack> s(new LlmStack());
  if (!spec.remote.http.url.empty()) {
    RemoteOptions r = spec.remote;
    r.http.sim_rtt_s = spec.sim_rtt_s;
    r.http.sim_jitter_s = spec.sim_jitter_s;
    r.http.seed = spec.seed;
    TLR_ASSIGN_OR_RETURN(s->remote_, RemoteLlm::Connect(r, vocab));
    s->top_ = s->remote_.get();
    return s;
  }
  if (!spec.model) return Status::Error("no LLM: give a model file or a server URL");
  if (spec.model->tokenizer().Fingerprint() != vocab.Fingerprint()) {
    return Status::Error("the LLM's vocabulary differs from the SLM's: token routing needs one tokenizer");
  }
  s->local_ = std::make_unique<InProcessLlm>(*spec.model, spec.threads, spec.n_ctx);
  s->top_ = s->local_.get();
  if (spec.sim_rtt_s > 0 || spec.sim_jitter_s > 0) {
    s->delayed_ = std::make_unique<DelayedLlm>(s->top_, spec.sim_rtt_s, spec.sim_jitter_s, spec.seed);
    s->top_ = s->delayed_.get();
  }
  return s;
}

double LlmStack::sim_delay_s() const {
  if (remote_) return remote_->stats().sim_delay_s;
  return delayed_ ? delayed_->sim_delay_s() : 0.0;
}

}  // namespace tlr
