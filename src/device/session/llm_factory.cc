// The LLM backend factory (see llm_factory.h).
#include "device/session/llm_factory.h"

#include <algorithm>

#include "device/http/http_transport.h"
#include "device/remote/remote_replies.h"
#include "model/gguf/gguf_reader.h"
#include "net/protocol.h"

namespace tlr {

namespace {

// `tlr serve`'s vocabulary (GET /tlr/v1/vocabulary, a vocabulary-only GGUF), checked against
// the fingerprint its info reports.
Expected<std::unique_ptr<Tokenizer>> FetchServerVocabulary(const HttpOptions& http) {
  HttpTransport t(http);
  const std::string where = "the LLM server " + http.url;
  HttpResult info = t.Request("GET", "/tlr/v1/info", "");
  if (!info.sent) return Status::Error(where + " is unreachable: " + info.error);
  if (info.status != 200) return Status::Error(where + ": /tlr/v1/info answered " + std::to_string(info.status));
  auto parsed = remote::ParseInfoReply(info.body);
  if (!parsed.ok()) return parsed.status();
  if (std::find(parsed->features.begin(), parsed->features.end(), "vocabulary") == parsed->features.end()) {
    return Status::Error(where + " does not serve its vocabulary (an older tlr serve?): give --llm-tokenizer FILE");
  }
  HttpResult v = t.Request("GET", "/tlr/v1/vocabulary", "");
  if (!v.sent) return Status::Error(where + " is unreachable: " + v.error);
  if (v.status != 200) return Status::Error(where + ": /tlr/v1/vocabulary answered " + std::to_string(v.status));
  auto f = GgufFile::FromBytes({reinterpret_cast<const uint8_t*>(v.body.data()), v.body.size()});
  if (!f.ok()) return f.status().WithPrefix(where + "'s vocabulary");
  auto tok = Tokenizer::FromGguf(*f);
  if (!tok.ok()) return tok.status().WithPrefix(where + "'s vocabulary");
  if (HashHex(tok->Fingerprint()) != parsed->vocab_fingerprint) {
    return Status::Error(where + "'s vocabulary does not have the fingerprint its info reports");
  }
  return std::make_unique<Tokenizer>(std::move(tok).value());
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> LoadTokenizerFile(const std::string& path) {
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  Expected<Tokenizer> t = Status::Error("");
  if (json) {
    t = Tokenizer::FromHfJsonFile(path);
  } else {
    auto f = GgufFile::Open(path);
    if (!f.ok()) return f.status().WithPrefix("the LLM tokenizer '" + path + "'");
    t = Tokenizer::FromGguf(*f);
  }
  if (!t.ok()) return t.status().WithPrefix("the LLM tokenizer '" + path + "'");
  return std::make_unique<Tokenizer>(std::move(t).value());
}

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
    // The server is checked against the LLM's tokenizer when one is given (the bridge then
    // speaks the SLM's ids to the decoder), else against the SLM's.
    if (spec.llm_tokenizer == "server") {
      TLR_ASSIGN_OR_RETURN(s->llm_vocab_, FetchServerVocabulary(r.http));
    } else if (!spec.llm_tokenizer.empty()) {
      TLR_ASSIGN_OR_RETURN(s->llm_vocab_, LoadTokenizerFile(spec.llm_tokenizer));
    }
    const Tokenizer& server_vocab = s->llm_vocab_ ? *s->llm_vocab_ : vocab;
    TLR_ASSIGN_OR_RETURN(s->remote_, RemoteLlm::Connect(r, server_vocab));
    s->top_ = s->unbridged_ = s->remote_.get();
    if (VocabBridge::Needed(vocab, server_vocab)) {
      s->llm_vocab_used_ = &server_vocab;
      s->bridged_ = std::make_unique<BridgedLlm>(s->top_, vocab, server_vocab);
      s->top_ = s->bridged_.get();
    }
    return s;
  }
  if (!spec.model) return Status::Error("no LLM: give a model file or a server URL");
  s->local_ = std::make_unique<InProcessLlm>(*spec.model, spec.threads, spec.n_ctx);
  s->top_ = s->local_.get();
  if (spec.sim_rtt_s > 0 || spec.sim_jitter_s > 0) {
    s->delayed_ = std::make_unique<DelayedLlm>(s->top_, spec.sim_rtt_s, spec.sim_jitter_s, spec.seed);
    s->top_ = s->delayed_.get();
  }
  s->unbridged_ = s->top_;
  // Another vocabulary: the model's own tokenizer, bridged.
  if (VocabBridge::Needed(vocab, spec.model->tokenizer())) {
    s->llm_vocab_used_ = &spec.model->tokenizer();
    s->bridged_ = std::make_unique<BridgedLlm>(s->top_, vocab, spec.model->tokenizer());
    s->top_ = s->bridged_.get();
  }
  return s;
}

double LlmStack::sim_delay_s() const {
  if (remote_) return remote_->stats().sim_delay_s;
  return delayed_ ? delayed_->sim_delay_s() : 0.0;
}

}  // namespace tlr
