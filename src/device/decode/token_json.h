// A generated token as JSON (device layer), the one shape every output of TLR gives it: the
// trace of `tlr generate --trace`, the page's token stream and the device's OpenAI endpoint
// (choices[].tlr.tokens).
#pragma once

#include <nlohmann/json.hpp>

#include "device/decode/decoder.h"

namespace tlr {

// "id", "text", "source" (SLM, LLM or FALLBACK) and "confidence" (the router's; -1 where it did
// not run); with `timing` also "end", "spec" (what became of its speculation), "wasted_slm_steps",
// "slm_ms", "router_ms", "llm_ms", "stall_ms", "at_ms" and, when its LLM call failed, "llm_error".
nlohmann::json TokenEventJson(const TokenEvent& ev, bool timing);

}  // namespace tlr
