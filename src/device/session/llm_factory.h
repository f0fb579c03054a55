// Where the decoder's LLM runs (device layer): one factory for `tlr generate`, `tlr eval` and
// `tlr ui`. In this process (a model file, with an optional simulated network round trip), or
// behind a server (the native `tlr serve` protocol or any OpenAI-compatible engine).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "device/llm/bridged_llm.h"
#include "device/llm/llm_backend.h"
#include "device/remote/remote_llm.h"
#include "model/model.h"

namespace tlr {

// How the LLM is reached: in this process (the model and its KV cache size are given to
// LlmStack::Create) or behind a server.
struct LlmConfig {
  int threads = 1;                // in process: the LLM's own thread pool
  RemoteOptions remote;           // behind a server when remote.http.url is set
  // Simulated network round trip per call (+- uniform jitter): in process it wraps the model
  // (DelayedLlm); behind a server it is added to every HTTP request.
  double sim_rtt_s = 0, sim_jitter_s = 0;
  uint64_t seed = 1;              // for the jitter
  // Behind a server whose vocabulary differs from the SLM's: the LLM's tokenizer, a GGUF (a
  // vocabulary-only file or the model) or a tokenizer.json (in process the model's own is
  // used), or "server" (fetched from `tlr serve`). Empty: the server's vocabulary must be the SLM's.
  std::string llm_tokenizer;
};

// A tokenizer from a GGUF file (its vocabulary) or a Hugging Face tokenizer.json.
Expected<std::unique_ptr<Tokenizer>> LoadTokenizerFile(const std::string& path);

// Owns the chain of backends one config makes. Not copyable; the backends live as long as it.
class LlmStack {
 public:
  // `model`, `n_ctx`: the in-process LLM and its KV cache (prompt + generated must fit); unused
  // behind a server. `cancel` (may be null): stops the server's checks (the error says
  // "cancelled"); read during Create only.
  static Expected<std::unique_ptr<LlmStack>> Create(const LlmConfig& config, const Model* model, int64_t n_ctx,
                                                    const Tokenizer& vocab, const std::atomic<bool>* cancel = nullptr);
  LlmBackend* backend() const { return top_; }
  RemoteLlm* remote() const { return remote_.get(); }  // null in process
  BridgedLlm* bridge() const { return bridged_.get(); }  // null when the vocabularies are equal
  InProcessLlm* local() const { return local_.get(); }  // null behind a server
  // The backend under the bridge, speaking the LLM's ids (backend() when not bridged), and the
  // LLM's vocabulary (null when it is the SLM's).
  LlmBackend* unbridged() const { return unbridged_; }
  const Tokenizer* llm_vocab() const { return llm_vocab_used_; }
  std::string warning() const { return remote_ ? remote_->warning() : ""; }
  // Simulated network time added so far (both kinds).
  double sim_delay_s() const;

 private:
  // Declared so that the backends go first (their threads finish the calls in flight, whose
  // completions still run through the bridge), then the bridge, then the tokenizer both use.
  std::unique_ptr<Tokenizer> llm_vocab_;
  std::unique_ptr<BridgedLlm> bridged_;
  std::unique_ptr<InProcessLlm> local_;
  std::unique_ptr<DelayedLlm> delayed_;
  std::unique_ptr<RemoteLlm> remote_;
  LlmBackend* top_ = nullptr;
  LlmBackend* unbridged_ = nullptr;
  const Tokenizer* llm_vocab_used_ = nullptr;
};

}  // namespace tlr
