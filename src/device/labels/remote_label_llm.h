// RemoteLabelLlm (device layer): router training's LLM (routing/label_llm.h) behind a server, so
// that a router can be trained for an LLM that lives on GPUs elsewhere.
//
//   tlr     `tlr serve`'s POST /tlr/v1/score: many sequences per request, teacher-forced, the
//           argmax after every prefix (docs/protocol.md);
//   openai  a vLLM-compatible /v1/completions: one request per sequence with the token ids as
//           the prompt, prompt_logprobs 1 and max_tokens 1 (vLLM's extension; requests run
//           `connections` at once, so the engine batches them).
// Greedy continuations (references, rollouts) go through /v1/completions with temperature 0 on
// both. The server's vocabulary is checked against the SLM's at connect when it reports one
// (tlr serve does); transient errors are retried with backoff (HttpOptions), persistent ones
// fail the call with a message naming the server and what it answered.
//
// Thread-safety: one caller at a time (it runs its own requests in parallel).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "device/http/http_transport.h"
#include "device/remote/remote_llm.h"
#include "model/tokenizer/tokenizer.h"
#include "routing/label_llm.h"

namespace tlr {

class RemoteLabelLlm : public LabelLlm {
 public:
  // Checks the server (reachable, the right kind, the same vocabulary) before returning.
  static Expected<std::unique_ptr<RemoteLabelLlm>> Connect(const RemoteOptions& opts, const Tokenizer& vocab);

  std::string name() const override;
  std::string model_id() const override { return model_id_; }
  Expected<std::vector<std::vector<int32_t>>> Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                      const AnswerFn& on_answer = {}) override;
  Expected<std::vector<std::vector<int32_t>>> Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                     int max_tokens, const AnswerFn& on_answer = {}) override;
  int64_t http_requests() const { return http_.http_requests(); }

 private:
  RemoteLabelLlm(const RemoteOptions& opts, const Tokenizer& vocab);
  // POSTs `body` to `path`; the reply body on 200, else an error naming the server's answer.
  Expected<std::string> Post(const std::string& path, const std::string& body);
  // Runs f(i) for i in [0, n) on up to `connections` threads; the first error wins.
  Status ForEach(size_t n, const std::function<Status(size_t)>& f);

  RemoteOptions opts_;
  const Tokenizer& vocab_;
  HttpTransport http_;
  int64_t max_context_ = 0;  // tlr serve's limit (0: unknown)
  std::string model_id_;
};

}  // namespace tlr
