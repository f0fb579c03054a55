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
Expected<std::unique_ptr<Tokenizer>> FetchServerVocabulary(const HttpOptions& http, const std::atomic<bool>* cancel) {
  HttpTransport t(http);
  const std::string where = "the LLM server " + http.url;
  LlmCall watch(nullptr, cancel);  // cancelled with the caller's flag
  LlmCall* call = cancel ? &watch : nullptr;
  HttpResult info = t.Request("GET", "/tlr/v1/info", "", call);
  if (info.cancelled) return Status::Error("cancelled");
  if (!info.sent) return Status::Error(where + " is unreachable: " + info.error);
  if (info.status != 200) return Status::Error(where + ": /tlr/v1/info answered " + std::to_string(info.status));
  auto parsed = remote::ParseInfoReply(info.body);
  if (!parsed.ok()) return parsed.status();
  if (std::find(parsed->features.begin(), parsed->features.end(), "vocabulary") == parsed->features.end()) {
    return Status::Error(where + " does not serve its vocabulary (an older tlr serve?): give --llm-tokenizer FILE");
  }
  HttpResult v = t.Request("GET", "/tlr/v1/vocabulary", "", call);
  if (v.cancelled) return Status::Error("cancelled");
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

Expected<std::unique_ptr<LlmStack>> LlmStack::Create(const LlmConfig& config, const Model* model, int64_t n_ctx,
                                                   const Tokenizer& vocab, const std::atomic<bool>* cancel) {
  if (!(config.sim_rtt_s >= 0) || !(config.sim_jitter_s >= 0)) {
    return Status::Error("simulated network delays must not be negative");
  }
  std::unique_ptr<LlmStack> s(new LlmStack());
  if (!config.remote.http.url.empty()) {
    RemoteOptions r = config.remote;
    r.http.sim_rtt_s = config.sim_rtt_s;
    r.http.sim_jitter_s = config.sim_jitter_s;
    r.http.seed = config.seed;
    // The server is checked against the LLM's tokenizer when one is given (the bridge then
    // speaks the SLM's ids to the decoder), else against the SLM's.
    if (config.llm_tokenizer == "server") {
      TLR_ASSIGN_OR_RETURN(s->llm_vocab_, FetchServerVocabulary(r.http, cancel));
    } else if (!config.llm_tokenizer.empty()) {
      TLR_ASSIGN_OR_RETURN(s->llm_vocab_, LoadTokenizerFile(config.llm_tokenizer));
      r.vocab_source = config.llm_tokenizer;
    }
    const Tokenizer& server_vocab = s->llm_vocab_ ? *s->llm_vocab_ : vocab;
    TLR_ASSIGN_OR_RETURN(s->remote_, RemoteLlm::Connect(r, server_vocab, cancel));
    s->top_ = s->unbridged_ = s->remote_.get();
    if (VocabBridge::Needed(vocab, server_vocab)) {
      s->llm_vocab_used_ = &server_vocab;
      s->bridged_ = std::make_unique<BridgedLlm>(s->top_, vocab, server_vocab);
      s->top_ = s->bridged_.get();
    }
    return s;
  }
  if (!model) return Status::Error("no LLM: give a model file or a server URL");
  s->local_ = std::make_unique<InProcessLlm>(*model, config.threads, n_ctx);
  s->top_ = s->local_.get();
  if (config.sim_rtt_s > 0 || config.sim_jitter_s > 0) {
    s->delayed_ = std::make_unique<DelayedLlm>(s->top_, config.sim_rtt_s, config.sim_jitter_s, config.seed);
    s->top_ = s->delayed_.get();
  }
  s->unbridged_ = s->top_;
  // Another vocabulary: the model's own tokenizer, bridged.
  if (VocabBridge::Needed(vocab, model->tokenizer())) {
    s->llm_vocab_used_ = &model->tokenizer();
    s->bridged_ = std::make_unique<BridgedLlm>(s->top_, vocab, model->tokenizer());
    s->top_ = s->bridged_.get();
  }
  return s;
}

double LlmStack::sim_delay_s() const {
  if (remote_) return remote_->stats().sim_delay_s;
  return delayed_ ? delayed_->sim_delay_s() : 0.0;
}

}  // namespace tlr
