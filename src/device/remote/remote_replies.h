// What the device reads from an LLM server (device layer, internal to the remote backends):
// each reply body of the native protocol and of OpenAI-compatible engines parsed into a plain
// struct, or an error saying what was wrong with it. Nothing here throws or aborts whatever the
// bytes; token ids outside the vocabulary are refused. Pure functions (no network), so the
// reply fuzzer (remote_reply_fuzz.cc) drives them directly. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "device/llm/llm_backend.h"
#include "model/tokenizer/tokenizer.h"
#include "util/status.h"

namespace tlr::remote {

// The message of an error body ({"error": {"message": ...}}), else the body's start (at most
// 200 bytes, made valid UTF-8).
std::string ErrorMessage(std::string_view body);
// The `error.code` of an error body ("" when there is none).
std::string ErrorCode(std::string_view body);

// GET /tlr/v1/info and POST /tlr/v1/sessions (201): the session id (sessions only) and the
// vocabulary fingerprint (empty when the server does not report one).
struct SessionReply {
  std::string session;
  std::string vocab_fingerprint;
  std::vector<std::string> features;  // info: what the server supports beyond the base protocol
};
Expected<SessionReply> ParseInfoReply(std::string_view body);
Expected<SessionReply> ParseSessionReply(std::string_view body);

// 409 from /tlr/v1/next: what the session holds (held < 0: unknown).
struct ResyncReply {
  int64_t held = -1;
  uint64_t held_hash = 0;
  bool hash_ok = false;
  int64_t version = -1;
};
Expected<ResyncReply> ParseResyncReply(std::string_view body);

// 200 from /tlr/v1/next.
struct NextReply {
  std::vector<int32_t> tokens, lookahead;
  std::vector<float> logprobs;
  int64_t position = -1, version = -1;
  // The session's work since it was created ("session_work"; has_work false when absent).
  bool has_work = false;
  LlmWork session_work;
};
Expected<NextReply> ParseNextReply(std::string_view body, int64_t n_vocab);

// GET /v1/models: the first model's id, and the vocabulary fingerprint of `model` (the first
// when empty) when the engine reports it.
struct ModelsReply {
  std::string model;
  std::string vocab_fingerprint;
};
Expected<ModelsReply> ParseModelsReply(std::string_view body, const std::string& model);

// 200 from /v1/completions: the tokens (tlr serve's ids, vLLM's "token_id:N" strings, or the
// text tokenized with `vocab`), an end token added when the engine stopped early, cut to `want`.
// A `text/event-stream` body (an engine that streams although not asked to) is read too.
struct CompletionReply {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  // The call's work: tokens the engine prefilled (tlr serve's tlr.prefilled; else usage's
  // prompt_tokens less prompt_tokens_details.cached_tokens; -1 when the reply says neither) and
  // tokens it generated (usage.completion_tokens; -1 when absent). Streamed replies: the last
  // event that reports them.
  int64_t prefilled = -1, generated = -1;
  // finish_reason "length": the engine generated every token asked for, though tokens read back
  // from its text (no id labels) may number fewer.
  bool hit_length = false;
};
Expected<CompletionReply> ParseCompletionReply(std::string_view body, const Tokenizer& vocab, int want);

// Teacher-forced predictions (router labels): the LLM's argmax after each prefix of an
// n-token sequence, from
//   - tlr serve's POST /tlr/v1/score reply: results[i].argmax, one per token, for each of
//     `lengths` (ParseScoreReply);
//   - a vLLM-style /v1/completions reply to {prompt: ids, prompt_logprobs: k>=1, max_tokens: 1,
//     temperature: 0}: choices[0].prompt_logprobs (null, then per token a dict keyed by token id
//     whose rank-1 entry is the argmax at the position before) for positions 0..n-2, and the
//     generated token for the last (ParsePromptLogprobsReply).
// Errors name what was wrong (lengths, ids outside the vocabulary, a missing rank-1 entry).
Expected<std::vector<std::vector<int32_t>>> ParseScoreReply(std::string_view body, const std::vector<size_t>& lengths,
                                                            int64_t n_vocab);
Expected<std::vector<int32_t>> ParsePromptLogprobsReply(std::string_view body, size_t n, const Tokenizer& vocab);

}  // namespace tlr::remote
