// The device side of token-level routing as one reusable piece (device layer):
// loading the SLM and its router, describing where the LLM runs, turning a prompt into ids, and
// running one collaborative generation with the LLM backends it needs. `tlr generate` and the C
// API (tlr_capi.cc, include/tlr.h) both run generations through RunDeviceGeneration, so the
// command line and embedded callers cannot drift apart.
//
// Thread-safety: a DeviceModels is immutable after Load except for its router's scratch
// buffers, so one generation at a time may use it (the C API holds a per-device lock); the
// tokenizer may be used from any thread. An LlmTarget is immutable and may serve concurrent
// generations: each one builds its own backend stack (KV cache or server session).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "device/session/context_pool.h"
#include "device/decode/decoder.h"
#include "device/session/llm_factory.h"
#include "device/remote/remote_llm.h"
#include "model/chat.h"
#include "model/model.h"
#include "routing/router.h"
#include "util/status.h"

namespace tlr {

class ThreadPool;

// Model::Options for a KV cache storage name: "f16" (default), "f32" or "q8_0".
Expected<Model::Options> ModelOptionsForKvType(std::string_view kv_type);

// Loads a model file; errors start with `role` ("SLM: ...", "LLM: ...").
Expected<std::unique_ptr<Model>> LoadModelAs(std::string_view role, const std::string& path,
                                             const Model::Options& opts);

// The SLM and its router (checked against each other at load).
struct DeviceModels {
  enum class Step { kSlm, kRouter, kCompatibility };  // what failed, for callers that classify
  std::unique_ptr<Model> slm;
  std::unique_ptr<Router> router;
  // `router`: a router GGUF or a built-in kind (maxprob, entropy, random; `seed` for random).
  // On failure `*failed` (if given) says which step failed.
  static Expected<DeviceModels> Load(const std::string& slm_path, const std::string& router,
                                     const Model::Options& opts, uint64_t seed, Step* failed = nullptr);
};

// Where the LLM runs: an in-process model (shared, not owned by a generation) or a server.
struct LlmTarget {
  std::shared_ptr<const Model> model;  // in process (when config.remote.http.url is empty); each
                                       // generation sizes its own KV cache
  LlmConfig config;                    // threads, remote options, simulated round trip, seed
  // Unique per target object: a DeviceContext reuses its LLM backend only for the target it was
  // made for, even when another target later lives at the same address.
  const uint64_t id = NextId();

 private:
  static uint64_t NextId();
};

// The most tokens one generation may ask for (the in-process LLM's KV cache is sized for them).
inline constexpr int kMaxGenerateTokens = 1 << 20;

// Checks what the decoder would otherwise find only mid-way or what the command line checks
// with its flag ranges: threshold in [0, 1], span 1..64, max tokens 0..kMaxGenerateTokens,
// sampling, pipeline.
Status ValidateDecodeOptions(const DecodeOptions& d);

// The prompt's ids: BOS + text, or with `chat` the model's chat template around one user
// message (enable_thinking passed to the template when set). An empty result is an error.
Expected<std::vector<int32_t>> EncodePrompt(const Model& model, std::string_view text, bool chat,
                                            std::optional<bool> enable_thinking = std::nullopt);

// The prompt of a conversation's next assistant message: the model's chat template over the
// whole message history (system, user, assistant), ending with the assistant header.
Expected<std::vector<int32_t>> EncodeMessages(const Model& model, const std::vector<ChatMessage>& messages,
                                              std::optional<bool> enable_thinking = std::nullopt);

// Which part of a generation failed (RunDeviceGeneration's `failed`).
enum class DeviceRunStep { kOptions, kLlmSetup, kDecode };

struct DeviceRunResult {
  DecodeStats stats;
  bool remote = false;       // the LLM was behind a server
  RemoteStats remote_stats;  // when remote
  double sim_delay_s = 0;    // simulated network time (--sim-rtt) this generation waited, setup included
  double setup_s = 0;        // setting the LLM up before decoding (loading, checking the server)
  std::string warning;       // from setting the LLM up (e.g. the server is not reachable yet)
};

// One collaborative generation. `main` is the SLM (or, for large_only in process without an
// SLM, the LLM); `router` may be null for large_only; `llm` may be null for small_only.
// Builds the LLM's backend stack for this generation (in process: a KV cache for the prompt,
// max_tokens and a span), then runs the decoder. `on_warning` (may be empty) hears a setup
// warning before the first token. On failure `*failed` (if given) says which part failed.
// `context` (may be null): a conversation's state from an earlier generation (see
// DeviceContext): the prompt's prefix the SLM's cache holds is not prefilled again, the LLM
// backend (its server session, or the in-process LLM's cache) is reused when it was made for
// the same `llm`, and both hold this generation afterwards.
Expected<DeviceRunResult> RunDeviceGeneration(const Model& main, Router* router, const LlmTarget* llm,
                                              ThreadPool* pool, std::span<const int32_t> prompt,
                                              const DecodeOptions& opts,
                                              const std::function<bool(const TokenEvent&)>& on_token,
                                              const std::function<void(const std::string&)>& on_warning = {},
                                              DeviceRunStep* failed = nullptr, DeviceContext* context = nullptr);

}  // namespace tlr
