// Routing policies (device layer): from the router's confidence at a position, and what a call
// there would cost the LLM, whether the position goes to the LLM.
//
//   threshold  route when confidence < threshold, whatever the call costs (the paper's rule).
//   cost       the bar falls as the call's price rises. A call at a context of L tokens, of
//              which the LLM already holds H (it read them for an earlier call of this
//              generation, or of the conversation before), costs (L - H) input tokens to read
//              plus R x n output tokens (R: the price ratio, n: the route span). A wrong SLM
//              token is worth V of those units to fix, and the router's confidence c is the
//              chance the SLM's token is right, so routing pays when (1 - c) V > cost. V comes
//              from the threshold t: t is the bar for the cheapest call there is, one new token
//              read and n written (1 + R n), so V = (1 + R n) / (1 - t) and a call routes when
//                  c < 1 - (1 - t) x cost / (1 + R n).
//              A cold first call, which reads the whole prompt, must be far less sure than a
//              warm one a token after the last routed position. Thresholds near 1 (0.95-0.999)
//              are this policy's useful range.
// A cost budget (DecodeOptions::cost_budget) caps either: a call that would take the generation's
// calls past it is not made. Prices here are the policy's model of a blocking call (the
// pipeline's lookahead and speculative calls are bounded apart, by PipelineOptions::llm_budget).
// All of it is a function of the context (and of what the LLM held when the generation started),
// so the pipelined decoder makes exactly the blocking loop's choices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace tlr {

enum class RoutePolicy { kThreshold, kCost };

inline std::string_view RoutePolicyName(RoutePolicy p) { return p == RoutePolicy::kCost ? "cost" : "threshold"; }

inline Expected<RoutePolicy> ParseRoutePolicy(std::string_view name) {
  if (name == "threshold") return RoutePolicy::kThreshold;
  if (name == "cost") return RoutePolicy::kCost;
  return Status::Error("unknown routing policy '" + std::string(name) + "' (threshold, cost)");
}

// What a call costs the LLM in input-token units: the context tokens it has not read (at
// least one: the last is always read again) plus `price_ratio` per token it writes.
inline double CallPrice(double price_ratio, int64_t context_len, int64_t held, int n) {
  return static_cast<double>(std::max<int64_t>(context_len - held, 1)) + price_ratio * std::max(n, 1);
}

// The confidence a position must fall below to route: `context_len` tokens before it, `held` of
// them already read by the LLM, `n` tokens asked for.
inline float RouteBar(RoutePolicy policy, float threshold, double price_ratio, int64_t context_len, int64_t held,
                      int n) {
  if (policy == RoutePolicy::kThreshold) return threshold;
  const double cheapest = 1.0 + price_ratio * std::max(n, 1);
  const double cost = CallPrice(price_ratio, context_len, held, n);
  return static_cast<float>(1.0 - (1.0 - static_cast<double>(threshold)) * cost / cheapest);
}

// A generation's running account of its calls under the price model: what the LLM holds and
// what the calls cost so far. Both loops keep one per line of tokens, so a budget cuts routing
// at the same token whether or not the pipeline is on.
struct CallAccount {
  int64_t held = 0;   // context tokens the LLM holds
  double spent = 0;   // CallPrice of the calls so far
  // Whether a call at `context_len` for `n` tokens routes: under the policy's bar, and within
  // `budget` (0: none).
  bool Routes(RoutePolicy policy, float threshold, double price_ratio, double budget, float confidence,
              int64_t context_len, int n) const {
    if (!(confidence < RouteBar(policy, threshold, price_ratio, context_len, held, n))) return false;
    return budget <= 0 || spent + CallPrice(price_ratio, context_len, held, n) <= budget;
  }
  void Call(double price_ratio, int64_t context_len, int n) {
    spent += CallPrice(price_ratio, context_len, held, n);
    held = context_len;
  }
};

}  // namespace tlr
