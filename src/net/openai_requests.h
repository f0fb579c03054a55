// OpenAI completion requests and their text (net layer): what `tlr serve`'s /v1/completions and
// /v1/chat/completions and the device's routed endpoint (`tlr ui`) both read and write. A JSON
// body in, a checked request or an error naming the field out; and the stop-string logic of the
// text a generation produces. Pure; thread-safe (a CompletionText belongs to one generation).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "util/status.h"

namespace tlr {

// Most prompts in one /v1/completions request ('prompt' as a list).
inline constexpr size_t kMaxPromptBatch = 256;

struct OpenAiRequest {
  std::vector<int32_t> prompt;     // the (first) prompt
  std::vector<std::vector<int32_t>> prompts;  // every prompt: a batch has several, one choice each
  int max_tokens = 16;             // -1 (chat, not given): as many as fit
  SamplerParams sampling;
  int logprobs = -1;               // -1: none; else top-k count (0 = just the chosen token)
  int prompt_logprobs = -1;        // vLLM's extension: per prompt token, its logprob and the top k
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  bool ids_as_tokens = false;      // vLLM's return_tokens_as_token_ids
  bool chat = false;
};

// OpenAI's sampling defaults: temperature 1, no top-k, a seed from the clock.
SamplerParams OpenAiSamplingDefaults();

// Reads a /v1/completions (chat false: `prompt`, a string or token ids, or a list of either: a
// batch, in `prompts`) or /v1/chat/completions
// (chat true: `messages` rendered with `chat_template`, required then) body. Sampling fields
// not given keep `defaults`. Fields it does not know are ignored (as OpenAI-compatible servers
// do); `model` is not checked here.
Expected<OpenAiRequest> ParseOpenAiRequest(const nlohmann::json& body, bool chat, const Tokenizer& tok,
                                           const ChatTemplate* chat_template, const SamplerParams& defaults);

// Everything a generation produced, with the stop strings applied.
class CompletionText {
 public:
  CompletionText(const Tokenizer& tok, std::vector<std::string> stop);
  // Adds a token; returns false when a stop string has appeared (text is cut before it).
  bool Push(int32_t id, bool end);
  void Finish();
  // Text that can be sent now (a possible stop-string prefix is held back).
  std::string TakeReady(bool final);
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

 private:
  StreamDecoder dec_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::string text_;
  size_t sent_ = 0;
  bool stopped_ = false;
};

}  // namespace tlr
