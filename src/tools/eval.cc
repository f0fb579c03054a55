// Evaluation runs and their tables (see eval.h).
#include "tools/eval.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "model/chat_template.h"

namespace tlr {

Expected<std::vector<EvalRow>> RunEval(const Model& slm, Router* router, LlmBackend* llm,
                                       const std::vector<QaRow>& rows, const EvalOptions& opts,
                                       ThreadPool* pool, std::vector<std::vector<EvalAnswer>>* answers) {
  std::vector<EvalRow> out;
  if (opts.small_only) out.push_back({DecodeMode::kSmallOnly, std::nullopt});
  if (opts.large_only) out.push_back({DecodeMode::kLargeOnly, std::nullopt});
  for (float t : opts.thresholds) out.push_back({DecodeMode::kJoint, t});
  for (float t : opts.cost_thresholds) out.push_back({DecodeMode::kJoint, t, RoutePolicy::kCost});
  if (out.empty()) return Status::Error("nothing to evaluate: no thresholds and no baselines");
  if (rows.empty()) return Status::Error("no questions");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].labels.size() < 2) {
      return Status::Error("row " + std::to_string(i + 1) + " is a chat row without a question and choices: evaluation "
                           "grades multiple-choice questions");
    }
  }
  const Tokenizer& tok = slm.tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  auto tmpl = ChatTemplate::ForModel(slm);
  if (opts.chat && !tmpl.ok()) return tmpl.status();
  for (const QaRow& r : rows) {
    ChatTemplateOptions co;
    co.enable_thinking = opts.enable_thinking;
    auto text = opts.chat ? tmpl->Apply({{"user", QaInstructPrompt(r)}}, co) : Expected<std::string>(QaPrompt(r));
    if (!text.ok()) return text.status().WithPrefix("question '" + r.id + "'");
    prompts.push_back(opts.chat ? tok.Encode(*text, false, true) : tok.Encode(*text));
    if (prompts.back().empty()) return Status::Error("question '" + r.id + "' has an empty prompt");
    if (opts.n_ctx > 0 && static_cast<int64_t>(prompts.back().size()) + opts.max_tokens > opts.n_ctx) {
      return Status::Error("question '" + r.id + "': its prompt of " + std::to_string(prompts.back().size()) +
                           " tokens + max tokens " + std::to_string(opts.max_tokens) + " exceed the context of " +
                           std::to_string(opts.n_ctx) + " tokens (raise --ctx)");
    }
  }
  if (answers) answers->assign(out.size(), {});
  const int64_t total = static_cast<int64_t>(out.size() * rows.size());
  int64_t done = 0;
  CollabDecoder dec(slm, router, llm, pool);
  for (size_t k = 0; k < out.size(); ++k) {
    EvalRow& row = out[k];
    DecodeOptions d;
    d.mode = row.mode;
    d.threshold = row.threshold.value_or(0.0f);
    d.policy = row.policy;
    d.price_ratio = opts.price_ratio;
    d.cost_budget = opts.cost_budget;
    d.max_tokens = opts.max_tokens;
    d.route_span = opts.route_span;
    d.sampling = opts.sampling;
    d.pipeline = opts.pipeline;
    d.sim_slm_s = opts.sim_slm_s;
    row.price_ratio = opts.price_ratio;
    for (size_t q = 0; q < rows.size(); ++q) {
      if (llm) llm->Reset();
      std::vector<int32_t> ids, all;
      std::vector<TokenSource> sources;
      std::vector<float> confidences;
      auto st = dec.Generate(prompts[q], d, [&](const TokenEvent& ev) {
        if (!ev.end) ids.push_back(ev.id);
        all.push_back(ev.id);
        sources.push_back(ev.source);
        confidences.push_back(ev.confidence);
        return true;
      });
      if (!st.ok()) {
        return st.status().WithPrefix(std::string(DecodeModeName(d.mode)) + " on question '" + rows[q].id + "'");
      }
      const std::string text = tok.Decode(ids);
      const auto choice = ExtractChoice(text, rows[q]);
      const bool right = choice && *choice == rows[q].answer_key;
      ++row.n;
      row.correct += right;
      row.well_formed += choice.has_value();
      row.generated += st->generated;
      row.routed += st->routed;
      row.fallbacks += st->fallbacks;
      row.llm_calls += st->llm_calls;
      row.slm_steps += st->slm_steps;
      row.slm_rows += st->slm_rows;
      row.ttft_s += st->ttft_s;
      row.slm_s += st->slm_prefill_s + st->slm_decode_s;
      row.slm_decode_s += st->slm_decode_s;
      row.router_s += st->router_s;
      row.llm_s += st->llm_s;
      row.total_s += st->total_s;
      row.stall_s += st->stall_s;
      row.spec_resolved += st->spec_resolved;
      row.spec_kept += st->spec_hits + st->spec_branch_hits;
      row.lookahead_used += st->lookahead_used;
      row.wasted_slm_steps += st->wasted_slm_steps;
      row.cancelled_calls += st->cancelled_calls;
      row.prompt_tokens += st->prompt_tokens;
      row.llm_prefilled += st->llm_work.prefilled;
      row.llm_generated += st->llm_work.generated;
      row.llm_forward_s = row.llm_forward_s < 0 || st->llm_work.forward_s < 0 ? -1 : row.llm_forward_s + st->llm_work.forward_s;
      if (answers) {
        (*answers)[k].push_back({rows[q].id, text, choice.value_or(""), right, std::move(all), std::move(sources),
                                 std::move(confidences), st->llm_work.prefilled, st->llm_work.generated,
                                 st->prompt_tokens});
      }
      if (opts.on_progress) opts.on_progress(++done, total);
    }
  }
  return out;
}

namespace {
std::string ModeLabel(const EvalRow& r) {
  if (r.mode != DecodeMode::kJoint) return std::string(DecodeModeName(r.mode));
  char b[32];
  if (r.policy == RoutePolicy::kCost) {
    std::snprintf(b, sizeof b, "cost @ %.3f", *r.threshold);
  } else {
    // Two decimals, more where a threshold has them (0.995 must not read 1.00).
    std::snprintf(b, sizeof b, "joint @ %.2f", *r.threshold);
    if (std::fabs(std::strtod(b + 8, nullptr) - *r.threshold) > 1e-6) std::snprintf(b, sizeof b, "joint @ %.4g", *r.threshold);
  }
  return b;
}
}  // namespace

std::optional<double> CostVsLlmAlone(const EvalRow& row, const std::vector<EvalRow>& rows) {
  for (const EvalRow& r : rows) {
    if (r.mode == DecodeMode::kLargeOnly && r.n == row.n && r.llm_cost() > 0) return row.llm_cost() / r.llm_cost();
  }
  return std::nullopt;
}

std::string EvalMarkdown(const std::vector<EvalRow>& rows) {
  std::string s =
      "| mode | n | accuracy | well formed | routed tokens | routed % | LLM prefilled / q | LLM generated / q | "
      "LLM generated / routed | LLM cost vs alone | SLM time (s) | TTFT (ms) | "
      "TBT SLM (ms) | comm + LLM (s) | router (ms) | overall (s) | fallbacks | stall (s) | stall / routed (ms) | "
      "spec hit % | lookahead used | wasted SLM steps |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const EvalRow& r : rows) {
    const std::optional<double> cost = CostVsLlmAlone(r, rows);
    char c[32] = "-";
    if (cost) std::snprintf(c, sizeof c, "%.1f%%", 100 * *cost);
    char b[1024];
    std::snprintf(b, sizeof b,
                  "| %s | %lld | %.1f%% | %.1f%% | %lld / %lld | %.1f%% | %.1f | %.1f | %.2f | %s | %.4f | %.2f | %.3f | %.4f | %.3f | "
                  "%.4f | %lld | %.4f | %.1f | %.1f | %lld | %lld |\n",
                  ModeLabel(r).c_str(), static_cast<long long>(r.n), 100 * r.accuracy(), r.well_formed_pct(),
                  static_cast<long long>(r.routed), static_cast<long long>(r.generated), r.routed_pct(),
                  r.mean(static_cast<double>(r.llm_prefilled)), r.mean(static_cast<double>(r.llm_generated)),
                  r.llm_generated_per_routed(), c,
                  r.mean(r.slm_s), 1e3 * r.mean(r.ttft_s), 1e3 * r.tbt_slm_s(), r.mean(r.llm_s),
                  1e3 * r.mean(r.router_s), r.mean(r.total_s), static_cast<long long>(r.fallbacks),
                  r.mean(r.stall_s), 1e3 * r.stall_per_routed_s(), r.spec_hit_pct(),
                  static_cast<long long>(r.lookahead_used), static_cast<long long>(r.wasted_slm_steps));
    s += b;
  }
  s += "\nTimes are per question (means); TBT SLM is SLM decode time per SLM step. comm + LLM sums the "
       "round trips of the LLM calls used (with the pipeline they overlap SLM work); stall is the time the "
       "device had nothing to do but wait for the LLM. spec hit %: routed tokens answered by a call whose "
       "speculation stood (the LLM chose a speculated candidate). LLM prefilled and generated: the tokens the "
       "LLM read and wrote per question (generated includes lookahead and the work of calls whose answers "
       "were cancelled or missed); LLM cost vs alone: (prefilled + R x generated) against the same for the "
       "LLM alone on the same questions, with output tokens priced at R = ";
  char r[32];
  std::snprintf(r, sizeof r, "%g", rows.empty() ? 4.0 : rows[0].price_ratio);
  s += r;
  s += " input tokens.\n";
  return s;
}

std::string EvalTerminalTable(const std::vector<EvalRow>& rows) {
  std::string s = "mode            n  accuracy  routed %  LLM cost vs alone  overall (ms)  TTFT (ms)  fallbacks  spec hit %\n";
  for (const EvalRow& r : rows) {
    const std::optional<double> cost = CostVsLlmAlone(r, rows);
    char c[32] = "-";
    if (cost) std::snprintf(c, sizeof c, "%.1f%%", 100 * *cost);
    char b[256];
    std::snprintf(b, sizeof b, "%-12s %4lld  %7.1f%%  %7.1f%%  %17s  %12.2f  %9.2f  %9lld  %10.1f\n", ModeLabel(r).c_str(),
                  static_cast<long long>(r.n), 100 * r.accuracy(), r.routed_pct(), c, 1e3 * r.mean(r.total_s),
                  1e3 * r.mean(r.ttft_s), static_cast<long long>(r.fallbacks), r.spec_hit_pct());
    s += b;
  }
  return s;
}

static nlohmann::ordered_json RowJson(const EvalRow& r) {
  return {{"mode", DecodeModeName(r.mode)},
          {"threshold", r.threshold ? nlohmann::ordered_json(*r.threshold) : nlohmann::ordered_json(nullptr)},
          {"policy", r.mode == DecodeMode::kJoint ? nlohmann::ordered_json(RoutePolicyName(r.policy)) : nlohmann::ordered_json(nullptr)},
          {"n", r.n},
          {"accuracy", r.accuracy()},
          {"well_formed_pct", r.well_formed_pct()},
          {"generated_tokens", r.generated},
          {"routed_tokens", r.routed},
          {"routed_pct", r.routed_pct()},
          {"llm_calls", r.llm_calls},
          {"ttft_s", r.mean(r.ttft_s)},
          {"tbt_slm_s", r.tbt_slm_s()},
          {"slm_steps", r.slm_steps},
          {"slm_rows", r.slm_rows},
          {"slm_row_s", r.slm_row_s()},
          {"slm_time_s", r.mean(r.slm_s)},
          {"router_time_s", r.mean(r.router_s)},
          {"comm_llm_time_s", r.mean(r.llm_s)},
          {"overall_s", r.mean(r.total_s)},
          {"fallbacks", r.fallbacks},
          {"stall_s", r.mean(r.stall_s)},
          {"stall_per_routed_s", r.stall_per_routed_s()},
          {"spec_hit_pct", r.spec_hit_pct()},
          {"lookahead_used", r.lookahead_used},
          {"wasted_slm_steps", r.wasted_slm_steps},
          {"cancelled_calls", r.cancelled_calls},
          {"prompt_tokens", r.prompt_tokens},
          {"llm_prefilled_tokens", r.llm_prefilled},
          {"llm_generated_tokens", r.llm_generated},
          {"llm_generated_per_routed", r.llm_generated_per_routed()},
          {"llm_forward_s", r.llm_forward_s < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.mean(r.llm_forward_s))},
          {"price_ratio", r.price_ratio},
          {"llm_cost", r.mean(r.llm_cost())}};
}

std::string EvalJson(const std::vector<EvalRow>& rows, const std::string& meta_json) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(meta_json.empty() ? "{}" : meta_json, nullptr, false);
  if (!j.is_object()) j = nlohmann::ordered_json::object();
  j["rows"] = nlohmann::ordered_json::array();
  for (const EvalRow& r : rows) {
    nlohmann::ordered_json row = RowJson(r);
    const std::optional<double> cost = CostVsLlmAlone(r, rows);
    row["llm_cost_vs_llm_alone"] = cost ? nlohmann::ordered_json(*cost) : nlohmann::ordered_json(nullptr);
    j["rows"].push_back(std::move(row));
  }
  return j.dump(1) + "\n";
}

std::string EvalCsv(const std::vector<EvalRow>& rows) {
  std::string s;
  bool header = true;
  for (const EvalRow& r : rows) {
    nlohmann::ordered_json j = RowJson(r);
    const std::optional<double> cost = CostVsLlmAlone(r, rows);
    j["llm_cost_vs_llm_alone"] = cost ? nlohmann::ordered_json(*cost) : nlohmann::ordered_json(nullptr);
    if (header) {
      for (auto it = j.begin(); it != j.end(); ++it) s += (it == j.begin() ? "" : ",") + it.key();
      s += "\n";
      header = false;
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      s += it == j.begin() ? "" : ",";
      s += it->is_string() ? it->get<std::string>() : it->dump();
    }
    s += "\n";
  }
  return s;
}

}  // namespace tlr
