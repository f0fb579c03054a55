// A generated token and a generation's statistics as JSON (device layer), the one shape every
// output of TLR gives each: tokens in the trace of `tlr generate --trace`, the page's token stream
// and the device's OpenAI endpoint (choices[].tlr.tokens); statistics in the page's "stats" event,
// the OpenAI endpoint's usage.tlr and the browser build's stats, under the names of the C API's
// tlr_stats (include/tlr.h), which the Python binding's Stats also uses.
#pragma once

#include <nlohmann/json.hpp>

#include "device/decode/decoder.h"

namespace tlr {

// "id", "text", "source" (SLM, LLM or FALLBACK) and "confidence" (the router's; -1 where it did
// not run); with `timing` also "end", "spec" (what became of its speculation), "wasted_slm_steps",
// "slm_ms", "router_ms", "llm_ms", "stall_ms", "at_ms" and, when its LLM call failed, "llm_error".
nlohmann::json TokenEventJson(const TokenEvent& ev, bool timing);

// "stop", "prompt_tokens", "prompt_reused", "generated", "routed", "routed_pct", "fallbacks",
// "llm_calls", the times "ttft_ms", "tbt_ms", "total_ms", "slm_ms" (of which "slm_prefill_ms"),
// "router_ms", "llm_ms", "stall_ms"; the pipeline's "spec_resolved", "spec_hits",
// "spec_branch_hits", "spec_hit_pct", "lookahead_used", "wasted_slm_steps", "cancelled_calls";
// the LLM's work "llm_prefilled", "llm_generated", "llm_generated_per_routed", "llm_forward_ms"
// (-1: not reported). A caller behind a server adds the transport's "http_requests", "retries",
// "resyncs", "failed_calls" and "llm_failure" (tlr_stats' names too).
nlohmann::json DecodeStatsJson(const DecodeStats& st);

}  // namespace tlr
