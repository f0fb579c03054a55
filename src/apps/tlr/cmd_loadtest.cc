// `tlr loadtest`: load-tests a `tlr serve` server with many simulated devices (apps layer): parses
// the flags and runs the load generator (tools/load_generator.h), once, twice (--compare-single)
// or once per device count (--sweep: goodput against offered load), printing each run's report
// and optionally writing them all as JSON.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "tools/load_generator.h"

namespace tlr::cli {

using nlohmann::json;

namespace {

struct LoadtestOwn : LoadOptions {
  std::string vocab, json_path, sweep;
  int sessions = 32;
  bool compare_single = false;
  uint64_t seed = 1;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LoadtestOwn, vocab, json_path, sweep, sessions, compare_single, seed,
                                   prompt_tokens, shared_prefix, gen_tokens, lookahead, max_context, duration_s, slm_ms, ramp_s,
                                   server_pid)

}  // namespace

Command AddLoadtestCommand(CLI::App& root) {
  auto [app, o, p] = NewCommand<LoadtestOwn>(
      &root, "loadtest",
      "Load-test a `tlr serve` server with many simulated devices (routed calls/s, latency, batching)");
  Example(app->add_option("--vocab", o->vocab,
                  "GGUF (or tokenizer.json) with the server model's vocabulary; only the tokenizer is "
                  "read (default: the bundled demo SLM, whose vocabulary the demo LLM shares)"), "@demo/llm.gguf");
  Example(app->add_option("--sessions", o->sessions, "Concurrent devices (one thread and one server session each; all come from this address, so "
                  "the server's --session-quota must allow them: by default a quarter of its --max-sessions)")
      ->default_val(32)->check(CLI::Range(1, 4096)), "3");
  Example(app->add_option("--duration", o->duration_s, "Seconds to run")->default_val(60)->check(CLI::Range(0.1, 86400.0)), "5");
  Example(app->add_option("--prompt-tokens", o->prompt_tokens, "Random prompt tokens per conversation")->default_val(64)
      ->check(CLI::Range(1, 1 << 20)), "9");
  Example(app->add_option("--shared-prefix", o->shared_prefix,
                  "Tokens every conversation begins with before its own --prompt-tokens, the same on every device "
                  "(an app's system prompt; the server copies a prefix it holds instead of prefilling it)")
      ->default_val(0)->check(CLI::Range(0, 1 << 20)), "4");
  Example(app->add_option("--gen-tokens", o->gen_tokens,
                  "Tokens the simulated SLM produces between routed calls (random ids, appended with the next call)")
      ->default_val(8)->check(CLI::Range(0, 1 << 20)), "3");
  Example(app->add_option("--lookahead", o->lookahead,
                  "Every other device asks for this many lookahead tokens per call (native protocol); the latency "
                  "of the devices that ask none is reported apart (what others' lookahead costs them)")
      ->default_val(0)->check(CLI::Range(0, 256)), "2");
  Example(app->add_option("--max-context", o->max_context,
                  "Past this many tokens a device starts a new conversation (from base 0, same session)")
      ->default_val(1024)->check(CLI::Range(int64_t{2}, int64_t{1} << 24)), "99");
  Example(app->add_option("--slm-ms", o->slm_ms,
                  "Simulated SLM time per token on the device (sleeps --gen-tokens x this between calls; "
                  "0: devices call back to back, the server's worst case)")
      ->default_val(0)->check(CLI::Range(0.0, 60000.0)), "5");
  Example(app->add_option("--sweep", o->sweep,
                  "Device counts to run one after another, e.g. 4,8,16,32,64,128 (each for --duration): the goodput "
                  "curve against offered load, printed as a table and written with --json (replaces --sessions)"), "1,2");
  Example(app->add_flag("--compare-single", o->compare_single,
                "First run 1 session for the same duration and report calls/s(N) / calls/s(1)"), "");
  Example(app->add_option("--server-pid", o->server_pid, "Report the server's memory (VmRSS, VmHWM) from /proc/PID")
      ->check(CLI::Range(1, 1 << 30)), "1");
  Example(app->add_option("--ramp-up", o->ramp_s,
                  "Devices start spread over this many seconds (at most half of --duration) and calls/s counts the "
                  "calls after it: all at once, their prompts arrive as one prefill wave that a slow server cannot "
                  "finish within --llm-timeout (0: all at once)")
      ->default_val(10)->check(CLI::Range(0.0, 86400.0)), "1");
  Example(app->add_option("--json", o->json_path, "Also write every number to this JSON file"), "j.json");
  Example(app->add_option("--seed", o->seed, "Seed of the random tokens")->default_val(1)->check(WholeNumberU64()), "3");
  app->footer(
      "Example (demo LLM):\n"
      "  tlr serve --port 8080 -t 2 &\n"
      "  tlr loadtest --server http://127.0.0.1:8080 --sessions 32 --duration 60 --compare-single --server-pid $!\n"
      "  tlr loadtest --server http://127.0.0.1:8080 --sweep 4,8,16,32,64,128 --duration 20 --ramp-up 0 --json sweep.json\n"
      "Exit status 1 when a call timed out or failed; refused calls (the server shedding load) are not failures.");
  AddOptions(app, kCmdLoadtest, p.get(), "--server http://127.0.0.1:9");
  CLI::Option* sessions_opt = app->get_option("--sessions");
  return MakeCommand(app, p, o, [o = o, p = p, sessions_opt](const std::string& cmd) -> int {
            o->server = p->server.url;
            o->api_key = p->server.key;
            o->backend = p->server.backend;
            o->sim_rtt_ms = p->server.sim_rtt_ms;
            o->timeout_s = p->server.timeout_s;
            if (int64_t{o->shared_prefix} + o->prompt_tokens + o->gen_tokens + 1 > o->max_context) {
              return ReportError(cmd, "--max-context must exceed --shared-prefix + --prompt-tokens + --gen-tokens + 1");
            }
            if (o->vocab.empty()) o->vocab = DemoFile("slm.gguf");
            auto vocab = LoadVocabulary(o->vocab);
            if (!vocab.ok()) return ReportError(cmd, vocab.status().message());
            std::vector<int> plan;
            if (!o->sweep.empty()) {
              if (o->compare_single) return ReportError(cmd, "--sweep and --compare-single do not go together");
              if (sessions_opt->count() > 0) {
                return ReportError(cmd, "--sweep gives the device counts: --sessions does nothing with it");
              }
              std::string item;
              std::istringstream in(o->sweep);
              while (std::getline(in, item, ',')) {
                char* end = nullptr;
                const long v = std::strtol(item.c_str(), &end, 10);
                if (item.empty() || *end != '\0' || v < 1 || v > 4096) {
                  return ReportError(cmd, "--sweep: '" + item + "' is not a device count in 1..4096 (e.g. 4,8,16,32)");
                }
                plan.push_back(static_cast<int>(v));
              }
            } else {
              if (o->compare_single) plan.push_back(1);
              plan.push_back(o->sessions);
            }
            if (o->backend == "openai" && o->lookahead > 0) {
              return ReportError(cmd, "--lookahead is for the native protocol: the openai backend asks none");
            }
            const std::string devices = !o->sweep.empty() ? o->sweep + " devices"
                                        : std::to_string(o->sessions) + (o->sessions == 1 ? " session" : " sessions");
            std::printf("tlr loadtest: %s (%s protocol), %s x %.0f s; prompts of %d tokens (+%d shared), %d SLM tokens per routed call, "
                        "contexts up to %lld; vocabulary of %d tokens; SLM %.1f ms/token, network RTT %.1f ms\n",
                        o->server.c_str(), o->backend.c_str(), devices.c_str(), o->duration_s, o->prompt_tokens,
                        o->shared_prefix, o->gen_tokens, static_cast<long long>(o->max_context), vocab->n_vocab(), o->slm_ms,
                        o->sim_rtt_ms);
            std::fflush(stdout);
            o->log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
            std::vector<LoadRun> runs;
            for (size_t i = 0; i < plan.size(); ++i) {
              auto r = RunLoad(*o, *vocab, plan[i], o->seed + 7919 * i);
              if (!r.ok() && !o->sweep.empty() && i > 0) {
                // A server that collapsed under the previous point may not even take connections:
                // that point is a result too (no goodput), and the sweep goes on.
                std::fprintf(stderr, "tlr loadtest: %d devices: %s\n", plan[i], r.status().message().c_str());
                LoadRun none;
                none.sessions = plan[i];
                none.error = r.status().message();
                runs.push_back(std::move(none));
                continue;
              }
              if (!r.ok()) return ReportError(cmd, r.status().message());
              std::fputs(FormatLoadRun(*r, *o).c_str(), stdout);
              std::fflush(stdout);
              runs.push_back(std::move(r).value());
            }
            json out = {{"server", o->server},
                        {"duration_s", o->duration_s},
                        {"ramp_up_s", o->ramp_s},
                        {"prompt_tokens", o->prompt_tokens},
                        {"shared_prefix_tokens", o->shared_prefix},
                        {"gen_tokens", o->gen_tokens},
                        {"max_context", o->max_context},
                        {"slm_ms_per_token", o->slm_ms},
                        {"sim_rtt_ms", o->sim_rtt_ms},
                        {"n_vocab", vocab->n_vocab()},
                        {"seed", o->seed},
                        {"runs", json::array()}};
            for (const LoadRun& r : runs) out["runs"].push_back(LoadRunJson(r));
            int64_t refused = 0, quota_refused = 0, failed = 0;
            for (const LoadRun& r : runs) {
              refused += r.refused;
              quota_refused += r.quota_refused;
              failed += r.timed_out + r.failed + (r.error.empty() ? 0 : r.sessions);
            }
            if (plan.size() > 1 && !o->sweep.empty()) {
              double peak = 0;
              for (const LoadRun& r : runs) peak = std::max(peak, r.calls_per_s());
              std::printf("\n== goodput against offered load (%.0f s per point) ==\n", o->duration_s);
              std::printf("devices  goodput/s  of peak  answered  refused  partial  timed out  failed  p50 ms  p99 ms  refusal p99 ms\n");
              json curve = json::array();
              for (const LoadRun& r : runs) {
                std::printf("%7d  %9.1f  %6.2fx  %8lld  %7lld  %7lld  %9lld  %6lld  %6.0f  %6.0f  %14.1f\n", r.sessions, r.calls_per_s(),
                            peak > 0 ? r.calls_per_s() / peak : 0.0, static_cast<long long>(r.calls),
                            static_cast<long long>(r.refused), static_cast<long long>(r.partial), static_cast<long long>(r.timed_out),
                            static_cast<long long>(r.failed), Percentile(r.latency_ms, 50), Percentile(r.latency_ms, 99),
                            Percentile(r.refused_ms, 99));
                curve.push_back({{"devices", r.sessions}, {"goodput_per_s", r.calls_per_s()},
                                 {"of_peak", peak > 0 ? r.calls_per_s() / peak : 0.0}, {"refused", r.refused},
                                 {"partial", r.partial},
                                 {"timed_out", r.timed_out}, {"failed", r.failed}});
              }
              out["sweep"] = curve;
              out["peak_goodput_per_s"] = peak;
            }
            if (runs.size() == 2 && o->compare_single) {
              const double ratio = runs[0].calls_per_s() > 0 ? runs[1].calls_per_s() / runs[0].calls_per_s() : 0;
              std::printf("\nscaling          %d sessions / 1 session: %.2fx routed calls/s (%.1f vs %.1f; goal >= 8x)\n",
                          o->sessions, ratio, runs[1].calls_per_s(), runs[0].calls_per_s());
              out["speedup_vs_single"] = ratio;
            }
            std::printf("%s; %lld refused (shed by the server)%s\n",
                        failed == 0 ? "no call timed out or failed" : (std::to_string(failed) + " calls timed out or failed").c_str(),
                        static_cast<long long>(refused),
                        quota_refused > 0 ? ("; " + std::to_string(quota_refused) +
                                             " refused by the server's --session-quota (more devices than one client may "
                                             "hold sessions for: give each an --accept-key of its own, or raise the quota)").c_str()
                                          : "");
            if (!o->json_path.empty()) {
              std::ofstream f(o->json_path);
              f << out.dump(2) << "\n";
              if (!f) return ReportError(cmd, "cannot write '" + o->json_path + "'");
            }
            return failed == 0 ? 0 : 1;
          });
}

}  // namespace tlr::cli
