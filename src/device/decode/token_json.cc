// A generated token as JSON (see token_json.h).
#include "device/decode/token_json.h"

namespace tlr {

nlohmann::json TokenEventJson(const TokenEvent& ev, bool timing) {
  nlohmann::json j = {{"id", ev.id}, {"text", ev.text}, {"source", TokenSourceName(ev.source)},
                      {"confidence", ev.confidence}};
  if (!timing) return j;
  j["end"] = ev.end;
  j["spec"] = SpecOutcomeName(ev.spec);
  j["wasted_slm_steps"] = ev.wasted;
  j["slm_ms"] = ev.slm_s * 1e3;
  j["router_ms"] = ev.router_s * 1e3;
  j["llm_ms"] = ev.llm_s * 1e3;
  j["stall_ms"] = ev.stall_s * 1e3;
  j["at_ms"] = ev.at_s * 1e3;
  if (!ev.llm_error.empty()) j["llm_error"] = ev.llm_error;
  return j;
}

}  // namespace tlr
