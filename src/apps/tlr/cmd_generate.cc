// `tlr generate`: collaborative generation (SLM + router + LLM), streaming the text with the
// LLM's tokens in red, then a summary of where the tokens and the time went (apps layer).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "device/decode/token_json.h"
#include "device/session/device_session.h"
#include "model/chat_messages.h"
#include "model/model.h"
#include "ops/thread_pool.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace {

constexpr const char* kRed = "\x1b[31m";
constexpr const char* kYellowUnderline = "\x1b[33;4m";
constexpr const char* kReset = "\x1b[0m";

std::string Ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f ms", s * 1000);
  return b;
}

std::string FormatNumber(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

std::string FormatDecodeSummary(const DecodeStats& st) {
  char b[1536];
  std::snprintf(b, sizeof b,
                "tokens: %lld generated, %lld routed to the LLM (%.1f%%) in %lld calls, %lld fallbacks; "
                "prompt %lld tokens; stop: %s\n"
                "LLM work: %lld tokens prefilled, %lld generated (%.2f per routed token), forward %s\n"
                "time: TTFT %s, TBT %s (SLM part %s/step); SLM %s (prefill %s), router %s, LLM %s; "
                "total %s; waiting for the LLM (stall) %s\n"
                "pipeline: speculation stood at %lld of %lld answered routed tokens (%.1f%%: %lld own guess, "
                "%lld branch), %lld routed tokens from LLM lookahead, %lld SLM steps wasted, %lld calls "
                "cancelled, up to %lld in flight\n",
                static_cast<long long>(st.generated), static_cast<long long>(st.routed), st.routed_pct(),
                static_cast<long long>(st.llm_calls), static_cast<long long>(st.fallbacks),
                static_cast<long long>(st.prompt_tokens), st.stop.c_str(),
                static_cast<long long>(st.llm_work.prefilled), static_cast<long long>(st.llm_work.generated),
                st.llm_generated_per_routed(), st.llm_work.forward_s < 0 ? "not reported" : Ms(st.llm_work.forward_s).c_str(),
                Ms(st.ttft_s).c_str(),
                Ms(st.tbt_s).c_str(), Ms(st.tbt_slm_s()).c_str(),
                Ms(st.slm_prefill_s + st.slm_decode_s).c_str(), Ms(st.slm_prefill_s).c_str(),
                Ms(st.router_s).c_str(), Ms(st.llm_s).c_str(), Ms(st.total_s).c_str(), Ms(st.stall_s).c_str(),
                static_cast<long long>(st.spec_hits + st.spec_branch_hits), static_cast<long long>(st.spec_resolved),
                st.spec_hit_pct(), static_cast<long long>(st.spec_hits), static_cast<long long>(st.spec_branch_hits),
                static_cast<long long>(st.lookahead_used), static_cast<long long>(st.wasted_slm_steps),
                static_cast<long long>(st.cancelled_calls), static_cast<long long>(st.max_in_flight));
  return b;
}

namespace {

struct GenerateOwn {
  std::string prompt, prompt_file, messages_file, trace;
  bool quiet = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GenerateOwn, prompt, prompt_file, messages_file, trace, quiet)

}  // namespace

Command AddGenerateCommand(CLI::App& root) {
  auto [app, o, p] = NewCommand<GenerateOwn>(
      &root, "generate", "Generate with the SLM, routing uncertain tokens to the LLM (token-level routing)");
  CLI::Option* prompt_opt = Example(app->add_option("-p,--prompt", o->prompt, "Prompt text"), "hello");
  Example(app->add_option("-f,--file", o->prompt_file, "Read the prompt from a file ('-' = stdin)")->excludes(prompt_opt),
          "-");
  Example(app->add_option("--messages", o->messages_file,
                          "A conversation to continue: a JSON file holding an OpenAI message array (or an object with "
                          "\"messages\"); the SLM's chat template renders it and the next assistant message is "
                          "generated ('-' = stdin)"),
          "-");
  Example(app->add_option("--trace", o->trace,
                          "Write a JSONL trace: per token id, text, source (SLM/LLM/FALLBACK), confidence, what became "
                          "of its speculation (hit/branch/miss/draft), discarded SLM steps, times and stall"),
          "t.jsonl");
  Example(app->add_flag("-q,--quiet", o->quiet, "Print only the text, no summary"), "");
  AddOptions(app, kCmdGenerate, p.get());
  app->footer(
      "LLM tokens print in red, FALLBACK tokens (LLM unavailable: the SLM's own) in underlined yellow.\n"
      "Examples:\n"
      "  tlr generate -f question.txt                      # bundled demo pair and router\n"
      "  tlr generate --slm qwen2.5-0.5b.gguf --llm qwen2.5-7b.gguf --router r.gguf --chat -p \"...\"\n"
      "  tlr generate --threshold 0.9 --trace trace.jsonl -p \"Question: ...\"\n"
      "  tlr generate --server http://gpu-box:8080 --server-key \"$KEY\" -f q.txt   # LLM on `tlr serve`");
  return MakeCommand(app, p, o, [o = o, p = p, prompt_opt](const std::string& cmd) -> int {
            auto text = PromptText(o->prompt, o->prompt_file);
            if (!text.ok()) return ReportError(cmd, text.status().message());
            std::string prompt = std::move(text).value();
            if (p->think.has_value() && !p->chat && o->messages_file.empty()) {
              return ReportError(cmd, std::string(*p->think ? "--think" : "--no-think") +
                                          " needs the chat template: give --chat (or a conversation with --messages)");
            }
            std::optional<std::vector<ChatMessage>> messages;
            if (!o->messages_file.empty()) {
              if (!prompt.empty()) return ReportError(cmd, "give either --messages or a prompt (-p, -f), not both");
              if (p->chat) {
                return ReportError(cmd, "--chat does nothing with --messages (a conversation is always rendered with "
                                        "the chat template)");
              }
              auto text = ReadTextArg(o->messages_file);
              if (!text.ok()) return ReportError(cmd, text.status().message());
              const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
              if (j.is_discarded()) {
                return ReportError(cmd, "--messages: " + o->messages_file + " is not JSON (" + JsonErrorIn(*text) + ")");
              }
              const nlohmann::json& arr = j.is_object() && j.contains("messages") ? j["messages"] : j;
              auto parsed = ParseChatMessages(arr);
              if (!parsed.ok()) return ReportError(cmd, "--messages: " + parsed.status().message());
              messages = std::move(parsed).value();
            } else if (prompt.empty()) {
              if (!o->prompt_file.empty()) return ReportError(cmd, "the prompt file " + o->prompt_file + " is empty");
              if (prompt_opt->count() > 0) return ReportError(cmd, "the prompt (-p) is empty");
              return ReportError(cmd, "give a prompt with -p or -f, or a conversation with --messages");
            }
            const DecodeMode mode = p->decode.mode;
            PairNeeds needs = NeedsForMode(mode);
            needs.slm = mode != DecodeMode::kLargeOnly || p->remote();  // large_only in process: the LLM's tokenizer
            auto pair = LoadPair(*p, needs);
            if (!pair.ok()) return ReportError(cmd, pair.status().message());
            const Model& main_model = pair->slm ? *pair->slm : *pair->llm.model;
            Router* router = pair->router.get();
            auto ids = messages ? EncodeMessages(main_model, *messages, p->think)
                                : EncodePrompt(main_model, prompt, p->chat, p->think);
            if (!ids.ok()) return ReportError(cmd, ids.status().message());
            if (static_cast<int64_t>(ids->size()) + p->decode.max_tokens > p->ctx) {
              return ReportError(cmd, "the prompt of " + std::to_string(ids->size()) + " tokens + max tokens " +
                                          std::to_string(p->decode.max_tokens) + " exceed the context of " +
                                          std::to_string(p->ctx) + " tokens (raise --ctx)");
            }
            WarnPastTrainedContext(static_cast<int64_t>(ids->size()) + p->decode.max_tokens,
                                   main_model.config().n_ctx_train, pair->slm ? p->slm : p->llm);
            ThreadPool pool(p->threads);
            const DecodeOptions& d = pair->decode;
            const bool color = !p->no_color && isatty(STDOUT_FILENO);
            nlohmann::json trace = nlohmann::json::array();
            bool printed = false;
            auto run = RunDeviceGeneration(main_model, router, &pair->llm, &pool, *ids, d, [&](const TokenEvent& ev) {
              if (!ev.text.empty()) {
                printed = true;
                const char* on = ev.source == TokenSource::kLlm      ? kRed
                                 : ev.source == TokenSource::kFallback ? kYellowUnderline
                                                                       : nullptr;
                if (color && on) std::cout << on << ev.text << kReset;
                else std::cout << ev.text;
                std::cout.flush();
              }
              if (!o->trace.empty()) {
                nlohmann::json t = TokenEventJson(ev, /*timing=*/true);
                t["i"] = trace.size();
                trace.push_back(std::move(t));
              }
              return true;
            }, [](const std::string& w) { std::fprintf(stderr, "warning: %s\n", w.c_str()); });
            if (run.ok() || printed) std::cout << "\n" << std::flush;  // nothing on stdout when it never started
            if (!run.ok()) return ReportError(cmd, run.status().message());
            const DecodeStats* stats = &run->stats;
            if (!o->trace.empty()) {
              std::string lines;
              for (const auto& t : trace) lines += t.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
              TLR_CLI_CHECK(cmd, WriteFileAtomic(o->trace, {reinterpret_cast<const uint8_t*>(lines.data()), lines.size()}));
            }
            if (!o->quiet) {
              const bool joint = d.mode == DecodeMode::kJoint;
              char thr[32] = "-";
              if (joint) std::snprintf(thr, sizeof thr, "%.3f", d.threshold);
              std::fprintf(stderr, "\nmode %s, threshold %s, router %s, pipeline %s%s\n%s", p->mode.c_str(), thr,
                           // small_only still scores every token (the trace's confidences): name its router
                           d.mode != DecodeMode::kLargeOnly && router ? std::string(RouterKindName(router->kind())).c_str() : "-",
                           p->pipeline.c_str(),
                           d.sim_slm_s > 0 ? (", SIMULATED SLM pace >= " + FormatNumber(p->sim_slm_ms) + " ms/step").c_str() : "",
                           FormatDecodeSummary(*stats).c_str());
              if (run->setup_s > 0) {
                std::fprintf(stderr, "LLM setup before decoding (%s) %s; with it %s in all\n",
                             run->remote ? "checking the server" : "its KV cache", Ms(run->setup_s).c_str(),
                             Ms(run->setup_s + stats->total_s).c_str());
              }
              if (run->remote) {
                const RemoteStats& rs = run->remote_stats;
                std::fprintf(stderr, "server: %lld calls (%lld failed), %lld HTTP requests, %lld retries, %lld resyncs, "
                             "%lld tokens sent, simulated network %.1f ms (setup included)\n",
                             static_cast<long long>(rs.calls), static_cast<long long>(rs.failed_calls),
                             static_cast<long long>(rs.http_requests), static_cast<long long>(rs.retries),
                             static_cast<long long>(rs.resyncs), static_cast<long long>(rs.tokens_sent), rs.sim_delay_s * 1e3);
                if (rs.failed_calls > 0) {
                  std::fprintf(stderr, "%lld fallbacks: %s\n", static_cast<long long>(stats->fallbacks),
                               rs.FailureSummary().c_str());
                }
              }
            }
            return 0;
          });
}

}  // namespace tlr::cli
