// A generated token and a generation's statistics as JSON (see token_json.h).
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

nlohmann::json DecodeStatsJson(const DecodeStats& st) {
  auto ms = [](double s) { return s * 1e3; };
  return {{"stop", st.stop},
          {"prompt_tokens", st.prompt_tokens},
          {"prompt_reused", st.prompt_reused},
          {"generated", st.generated},
          {"routed", st.routed},
          {"routed_pct", st.routed_pct()},
          {"fallbacks", st.fallbacks},
          {"llm_calls", st.llm_calls},
          {"ttft_ms", ms(st.ttft_s)},
          {"tbt_ms", ms(st.tbt_s)},
          {"total_ms", ms(st.total_s)},
          {"slm_ms", ms(st.slm_prefill_s + st.slm_decode_s)},
          {"slm_prefill_ms", ms(st.slm_prefill_s)},
          {"router_ms", ms(st.router_s)},
          {"llm_ms", ms(st.llm_s)},
          {"stall_ms", ms(st.stall_s)},
          {"spec_resolved", st.spec_resolved},
          {"spec_hits", st.spec_hits},
          {"spec_branch_hits", st.spec_branch_hits},
          {"spec_hit_pct", st.spec_hit_pct()},
          {"lookahead_used", st.lookahead_used},
          {"wasted_slm_steps", st.wasted_slm_steps},
          {"cancelled_calls", st.cancelled_calls},
          {"llm_prefilled", st.llm_work.prefilled},
          {"llm_generated", st.llm_work.generated},
          {"llm_generated_per_routed", st.llm_generated_per_routed()},
          {"llm_forward_ms", st.llm_work.forward_s < 0 ? -1.0 : ms(st.llm_work.forward_s)}};
}

}  // namespace tlr
