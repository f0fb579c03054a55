// Evaluation harness (tools layer): runs multiple-choice questions through the collaborative
// decoder in the baseline modes and at several thresholds, grades the answers (qa.h), and
// aggregates the paper's Table 1 columns.
//
// Per row: accuracy, well-formed share, generated and routed tokens (routed % of generated),
// and per-question means of TTFT, SLM time, communication + LLM time, router time and overall
// time; TBT of the SLM is SLM decode time per SLM step over all questions. Deterministic for
// a given seed (timings aside).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "device/decode/decoder.h"
#include "device/llm/llm_backend.h"
#include "routing/qa.h"
#include "routing/router.h"

namespace tlr {

struct EvalOptions {
  std::vector<float> thresholds = {0.4f, 0.5f, 0.6f, 0.7f, 0.72f, 0.76f, 0.8f, 0.9f};  // threshold policy rows
  std::vector<float> cost_thresholds;  // cost policy rows (route_policy.h), after those
  double cost_budget = 0;              // DecodeOptions::cost_budget of every joint row
  bool small_only = true, large_only = true;  // baseline rows
  int max_tokens = 100;
  int64_t n_ctx = 0;         // > 0: every prompt + max_tokens must fit (the -c of the command)
  int route_span = 1;
  SamplerParams sampling;
  PipelineOptions pipeline;  // joint rows (the baselines never route)
  double sim_slm_s = 0;      // simulated SLM pace (DecodeOptions::sim_slm_s)
  // Instruct models: QaInstructPrompt as the user message of the SLM's chat template
  // (ChatML for Qwen, Llama 3's format for Llama); otherwise QaPrompt as plain text.
  bool chat = false;
  // With chat: the template's enable_thinking (unset: the template's default).
  std::optional<bool> enable_thinking;
  // The price model of the cost columns: an LLM output token costs this many input tokens (API
  // price lists charge output 3-5x input).
  double price_ratio = 4;
  // Progress: runs done, runs total (a run = one question in one mode/threshold).
  std::function<void(int64_t, int64_t)> on_progress;
};

struct EvalRow {
  DecodeMode mode = DecodeMode::kJoint;
  std::optional<float> threshold;  // joint rows only
  RoutePolicy policy = RoutePolicy::kThreshold;  // joint rows
  int64_t n = 0, correct = 0, well_formed = 0;
  int64_t generated = 0, routed = 0, fallbacks = 0, llm_calls = 0, slm_steps = 0, slm_rows = 0;
  int64_t spec_resolved = 0, spec_kept = 0, lookahead_used = 0, wasted_slm_steps = 0, cancelled_calls = 0;
  double ttft_s = 0, slm_s = 0, slm_decode_s = 0, router_s = 0, llm_s = 0, total_s = 0, stall_s = 0;  // sums
  // The LLM's work (LlmWork summed over the questions; llm_forward_s < 0: not reported).
  int64_t prompt_tokens = 0, llm_prefilled = 0, llm_generated = 0;
  double llm_forward_s = 0;
  double price_ratio = 4;  // EvalOptions::price_ratio
  // The LLM's cost in input-token units: prefilled + price_ratio x generated.
  double llm_cost() const { return static_cast<double>(llm_prefilled) + price_ratio * static_cast<double>(llm_generated); }
  double llm_generated_per_routed() const { return routed ? static_cast<double>(llm_generated) / routed : 0; }
  double accuracy() const { return n ? static_cast<double>(correct) / n : 0; }
  double well_formed_pct() const { return n ? 100.0 * well_formed / n : 0; }
  double routed_pct() const { return generated ? 100.0 * routed / generated : 0; }
  double mean(double sum) const { return n ? sum / n : 0; }
  double tbt_slm_s() const { return slm_steps ? slm_decode_s / slm_steps : 0; }
  // SLM decode time per token row (a pipelined pass may read several rows: branches, drafts).
  double slm_row_s() const { return slm_rows ? slm_decode_s / slm_rows : 0; }
  // Stall (waiting for the LLM with nothing else to do) per routed token.
  double stall_per_routed_s() const { return routed ? stall_s / routed : 0; }
  double spec_hit_pct() const { return spec_resolved ? 100.0 * spec_kept / spec_resolved : 0; }
};

struct EvalAnswer {  // one graded answer (for inspection)
  std::string id, text, chosen;
  bool correct = false;
  std::vector<int32_t> ids;            // the generated tokens (the end token included)
  std::vector<TokenSource> sources;    // and where each came from
  std::vector<float> confidences;      // the router's per token (-1 where it did not run)
  int64_t llm_prefilled = 0, llm_generated = 0;  // the LLM's work for this answer
  int64_t prompt_tokens = 0;
};

// `router` is needed for joint rows, `llm` for joint and large_only rows.
Expected<std::vector<EvalRow>> RunEval(const Model& slm, Router* router, LlmBackend* llm,
                                       const std::vector<QaRow>& rows, const EvalOptions& opts,
                                       ThreadPool* pool, std::vector<std::vector<EvalAnswer>>* answers = nullptr);

// The LLM's cost of `row` relative to the LLM alone on the same questions (the large_only row of
// `rows`); nullopt without that row or when it cost nothing.
std::optional<double> CostVsLlmAlone(const EvalRow& row, const std::vector<EvalRow>& rows);

// The Markdown table (the paper's Table 1 columns plus router time and fallbacks; the
// pipeline's stall, speculation and lookahead columns when a joint row used it; the LLM's
// work: tokens prefilled and generated, and the cost against the LLM alone).
std::string EvalMarkdown(const std::vector<EvalRow>& rows);
// The columns a terminal has room for (under 120 characters a line): mode, n, accuracy, routed
// share, the LLM's cost against it alone, time per question, TTFT, fallbacks, speculation hits.
std::string EvalTerminalTable(const std::vector<EvalRow>& rows);
// results.json text: {"rows": [...]} with the documented keys; `meta` is merged in at the top.
std::string EvalJson(const std::vector<EvalRow>& rows, const std::string& meta_json);
std::string EvalCsv(const std::vector<EvalRow>& rows);

}  // namespace tlr
