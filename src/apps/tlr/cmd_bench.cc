// `tlr bench`: prompt-processing and generation speed of a model, next to this machine's
// memory-bandwidth roofline, measured in the same run (apps layer).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "model/model.h"
#include "model/sampler.h"
#include "ops/bandwidth.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "routing/router.h"
#include "util/resident_memory.h"

namespace tlr::cli {
namespace {

// Bytes of the short bandwidth probes beside each generation run (far past the caches).
constexpr size_t kProbeBytes = size_t{256} << 20;
struct Stat {
  double median = 0, min = 0, max = 0;
};
Stat Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

struct BenchOwn {
  std::string router, router_type = "f32";
  int pp = 128, tg = 64, reps = 5;
  int64_t depth = 0;
  bool json = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(BenchOwn, router, router_type, pp, tg, reps, depth, json)

}  // namespace

Command AddBenchCommand(CLI::App& root) {
  auto [app, o, p] = NewCommand<BenchOwn>(
      &root, "bench", "Measure prompt processing and generation speed against the memory roofline");
  Example(app->add_option("--pp", o->pp, "Prompt tokens per prompt-processing run")->default_val(128)
      ->check(CLI::Range(1, 1 << 16)), "8");
  Example(app->add_option("--tg", o->tg, "Tokens per generation run")->default_val(64)->check(CLI::Range(1, 1 << 16)), "4");
  Example(app->add_option("-r,--reps", o->reps, "Repetitions (median and range are reported)")
      ->default_val(5)->check(CLI::Range(1, 1000)), "1");
  Example(app->add_option("--depth", o->depth,
                  "Also measure generation after DEPTH tokens of context (long-context decode), as tok/s and as a"
                  " share of the speed at the start (runs alternated, median step times)")
      ->default_val(0)->check(CLI::Range(0, 1 << 24)), "16");
  Example(app->add_flag("--json", o->json, "One JSON object on stdout"), "");
  Example(app->add_option("--router", o->router,
                  "Also time a router per generated token: a router GGUF, or citer / colm for an "
                  "untrained one of the model's width (its cost is what matters here)"), "citer");
  CLI::Option* router_type = app->add_option("--router-type", o->router_type,
                                             "Weight type of an untrained --router citer/colm (a router file has its own)")
                                 ->default_val("f32")->check(CLI::IsMember({"f32", "f16", "q8_0"}));
  Example(router_type, "f16", "--router citer");
  // No --ctx: each test sizes its cache to its own tokens.
  AddOptions(app, kCmdBench, p.get(), "-m @demo/slm.gguf");
  app->footer(
      "Roofline: generation must read every weight once per token, so tok/s cannot exceed\n"
      "bandwidth / bytes per token. tg_roofline_pct is generation speed as a percentage of that;\n"
      "tg_roofline_pct_paired takes each run against a short bandwidth probe taken beside it;\n"
      "tg_roofline_pct_interleaved follows every generation step with a read pass over 256 MiB and\n"
      "takes the median step against the median pass (the stable figure on a shared host).");
  return MakeCommand(app, p, o, [o = o, p = p, router_type](const std::string& cmd) -> int {
            const auto t_load = std::chrono::steady_clock::now();
            auto loaded = Model::Load(p->model, ModelOptions(p->kv_type));
            if (!loaded.ok()) return ReportError(cmd, loaded.status().message());
            const double load_s = SecondsSince(t_load);
            const Model& model = **loaded;
            const Expected<ResidentMemory> mem_loaded = ReadResidentMemory();
            const int64_t V = model.config().n_vocab;
            const int64_t need_ctx = std::max<int64_t>(o->pp, o->depth + o->tg) + o->tg + 8;
            ThreadPool pool(p->threads);
            ForwardContext fctx(&pool);
            std::vector<float> logits(V);
            const bool tty = isatty(2) && !o->json;
            auto say = [&](const char* what) {
              if (tty) std::fprintf(stderr, "\r%-60s", what);
            };
            // The router first: a wrong one is an error before the measurements (seconds).
            std::unique_ptr<Router> router;
            if (router_type->count() > 0 && o->router != "citer" && o->router != "colm") {
              return ReportError(cmd, "--router-type is for an untrained --router citer or colm (a router file keeps "
                                      "the type it was stored in)");
            }
            if (!o->router.empty()) {
              Expected<Router> r = Status::Error("");
              if (o->router == "citer" || o->router == "colm") {
                const RouterKind kind = o->router == "citer" ? RouterKind::kCiter : RouterKind::kColm;
                RouterInfo info;
                info.kind = kind;
                const GgmlType t = o->router_type == "q8_0" ? GgmlType::kQ8_0
                                   : o->router_type == "f16" ? GgmlType::kF16 : GgmlType::kF32;
                r = Router::FromLayers(info, RandomRouterLayers(kind, model.config().n_embd, 1), t);
              } else {
                r = Router::LoadOrBuiltin(o->router);
              }
              if (!r.ok()) return ReportError(cmd, r.status().message());
              router = std::make_unique<Router>(std::move(r).value());
              TLR_CLI_CHECK(cmd, router->CheckCompatible(model));
            }
            say("measuring memory bandwidth...");
            const BandwidthResult bw = MeasureReadBandwidth(&pool);
            say("measuring peak FMA throughput...");
            const double peak = MeasurePeakGflops(&pool);
            say("measuring peak int8 dot throughput...");
            const double peak_int8 = MeasurePeakInt8Gops(&pool);
            // Prompt tokens: a fixed pseudo-random sequence over the vocabulary.
            std::vector<int32_t> prompt(std::max<int64_t>(o->pp, o->depth));
            uint64_t st = 12345;
            for (auto& t : prompt) {
              st = st * 6364136223846793005ull + 1442695040888963407ull;
              t = static_cast<int32_t>((st >> 33) % static_cast<uint64_t>(model.tokenizer().n_vocab()));
            }
            std::vector<float> hidden(model.config().n_embd);
            std::vector<double> router_us;
            // Times the model steps; a router, when given, runs after each step on its outputs
            // and is timed on its own.
            auto run_tg = [&](KvCache& cache, int n, double* secs, std::vector<double>* steps = nullptr) -> Status {
              int32_t tok = prompt[0];
              double model_s = 0, router_s = 0;
              for (int i = 0; i < n; ++i) {
                SequenceInput in{&cache, {&tok, 1}, OutputRows::kLast, logits.data(), router ? hidden.data() : nullptr};
                const auto t0 = std::chrono::steady_clock::now();
                TLR_RETURN_IF_ERROR(model.Forward({&in, 1}, &fctx));
                const double step = SecondsSince(t0);
                model_s += step;
                if (steps) steps->push_back(step);
                if (router) {
                  const auto t1 = std::chrono::steady_clock::now();
                  volatile float conf = router->Confidence(hidden.data(), logits.data(), model.config().n_vocab, &pool);
                  (void)conf;
                  router_s += SecondsSince(t1);
                }
                tok = ArgMax(logits.data(), static_cast<int64_t>(logits.size()));
              }
              *secs = model_s;
              if (router) router_us.push_back(1e6 * router_s / n);
              return Status::Ok();
            };
            std::vector<double> pp_rates, tg_rates;
            for (int r = 0; r < o->reps + 1; ++r) {  // the first repetition warms up
              say(("prompt processing, repetition " + std::to_string(r) + "...").c_str());
              auto cache = model.NewCache(need_ctx);
              if (!cache.ok()) return ReportError(cmd, cache.status().message());
              SequenceInput in{&*cache, {prompt.data(), static_cast<size_t>(o->pp)}, OutputRows::kLast,
                               logits.data(), nullptr};
              const auto t0 = std::chrono::steady_clock::now();
              TLR_CLI_CHECK(cmd, model.Forward({&in, 1}, &fctx));
              if (r > 0) pp_rates.push_back(o->pp / SecondsSince(t0));
            }
            // Each generation run sits between two short bandwidth probes, and its share of the
            // roofline is taken against the faster of the two: on a machine whose speed drifts
            // (shared hosts), a run is compared with the memory speed of its own moment.
            const double bytes_per_token = static_cast<double>(model.weight_bytes_per_token());
            // One 256 MiB buffer for every probe below (each probe allocated, filled and faulted
            // in a buffer of its own: ~0.5 s apiece here), its pages all different: identical
            // pages can be merged by the host (KSM), and reading one shared page reads a cache.
            std::unique_ptr<uint8_t[]> probe_buf(new uint8_t[kProbeBytes]);
            for (size_t i = 0; i < kProbeBytes; i += sizeof(uint64_t)) {
              const uint64_t v = (i + 1) * 0x9e3779b97f4a7c15ull;
              std::memcpy(probe_buf.get() + i, &v, sizeof v);
            }
            auto probe_gbps = [&](int passes) {
              double best = 0;
              for (int k = 0; k < passes; ++k) best = std::max(best, ReadPassGbps(&pool, probe_buf.get(), kProbeBytes));
              return best;
            };
            std::vector<double> paired_pct;
            double probe_before = 0;
            for (int r = 0; r < o->reps + 1; ++r) {
              say(("generation, repetition " + std::to_string(r) + "...").c_str());
              auto cache = model.NewCache(need_ctx);
              if (!cache.ok()) return ReportError(cmd, cache.status().message());
              double s = 0;
              TLR_CLI_CHECK(cmd, run_tg(*cache, o->tg, &s));
              const double probe_after = probe_gbps(3);
              if (r > 0) {
                tg_rates.push_back(o->tg / s);
                const double bw_here = std::max(probe_before, probe_after);
                paired_pct.push_back(100.0 * (o->tg / s) / (bw_here * 1e9 / bytes_per_token));
              }
              probe_before = probe_after;
            }
            // Interleaved: every generation step is followed by one read pass over a 256 MiB
            // buffer, so that steps and probes sample the same moments, milliseconds apart; each
            // repetition's share is bytes per token / its median step time against the median
            // pass. On a shared host whose memory speed moves within seconds this is the stable
            // figure (the run-beside-probe one takes the faster probe of two against a whole run).
            std::vector<double> interleaved_pct;
            {
              for (int r = 0; r < o->reps; ++r) {
                say(("generation interleaved with bandwidth probes, repetition " + std::to_string(r + 1) + "...")
                        .c_str());
                auto cache = model.NewCache(need_ctx);
                if (!cache.ok()) return ReportError(cmd, cache.status().message());
                std::vector<double> steps, probes;
                int32_t tok = prompt[0];
                for (int i = 0; i < o->tg; ++i) {
                  SequenceInput in{&*cache, {&tok, 1}, OutputRows::kLast, logits.data(), nullptr};
                  const auto t0 = std::chrono::steady_clock::now();
                  TLR_CLI_CHECK(cmd, model.Forward({&in, 1}, &fctx));
                  steps.push_back(SecondsSince(t0));
                  tok = ArgMax(logits.data(), static_cast<int64_t>(logits.size()));
                  probes.push_back(ReadPassGbps(&pool, probe_buf.get(), kProbeBytes));
                }
                std::nth_element(steps.begin(), steps.begin() + steps.size() / 2, steps.end());
                std::nth_element(probes.begin(), probes.begin() + probes.size() / 2, probes.end());
                const double rate = 1.0 / steps[steps.size() / 2];
                interleaved_pct.push_back(100.0 * rate / (probes[probes.size() / 2] * 1e9 / bytes_per_token));
              }
            }
            probe_buf.reset();  // not in the memory measured after the runs
            // Long context: generation after `depth` tokens against generation from the start,
            // alternated repetition by repetition so that both see the same machine. Each run's
            // speed is 1 / its median step time (a step the OS interrupted does not move it), and
            // the ratio is the median of the per-repetition ratios.
            Stat depth_stat, depth_ratio, start_stat;
            if (o->depth > 0) {
              std::vector<double> rates, ratios, start_rates;
              auto median_rate = [](std::vector<double> steps) {
                std::nth_element(steps.begin(), steps.begin() + steps.size() / 2, steps.end());
                return 1.0 / steps[steps.size() / 2];
              };
              for (int r = 0; r < o->reps; ++r) {
                say(("generation at depth " + std::to_string(o->depth) + ", repetition " + std::to_string(r + 1) +
                     "...").c_str());
                auto start = model.NewCache(need_ctx);
                auto deep = model.NewCache(need_ctx);
                if (!start.ok()) return ReportError(cmd, start.status().message());
                if (!deep.ok()) return ReportError(cmd, deep.status().message());
                SequenceInput in{&*deep, {prompt.data(), static_cast<size_t>(o->depth)}, OutputRows::kNone,
                                 nullptr, nullptr};
                TLR_CLI_CHECK(cmd, model.Forward({&in, 1}, &fctx));
                std::vector<double> start_steps, deep_steps;
                double s = 0;
                TLR_CLI_CHECK(cmd, run_tg(*start, o->tg, &s, &start_steps));
                TLR_CLI_CHECK(cmd, run_tg(*deep, o->tg, &s, &deep_steps));
                const double deep_rate = median_rate(deep_steps);
                rates.push_back(deep_rate);
                start_rates.push_back(median_rate(start_steps));
                ratios.push_back(deep_rate / start_rates.back());
              }
              depth_stat = Summarize(rates);
              depth_ratio = Summarize(ratios);
              start_stat = Summarize(start_rates);
            }
            if (tty) std::fprintf(stderr, "\r%-60s\r", "");
            const Stat pp = Summarize(pp_rates), tg = Summarize(tg_rates), paired = Summarize(paired_pct),
                       interleaved = Summarize(interleaved_pct);
            const double roofline = bw.best_gbps * 1e9 / bytes_per_token;
            const double pct = 100.0 * tg.median / roofline;
            // Matrix FLOPs per token: 2 per weight of every matrix read for a token.
            double params = 0;
            const auto& c = model.config();
            params = static_cast<double>(c.n_layers) *
                         (c.n_embd * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * c.n_embd + 3.0 * c.n_embd * c.n_ff) +
                     static_cast<double>(c.n_embd) * c.n_vocab;
            const double pp_gflops = pp.median * 2 * params / 1e9;
            const Stat rt = router ? Summarize(router_us) : Stat{};
            const double step_us = 1e6 / tg.median;
            const Expected<ResidentMemory> mem_after = ReadResidentMemory();  // weights, KV cache, scratch in use
            if (o->json) {
              nlohmann::json j = {
                  {"model", p->model}, {"arch", c.arch_name}, {"threads", pool.n_threads()}, {"kv_type", p->kv_type},
                  {"simd", ActiveSimdTarget()}, {"model_bytes", model.total_weight_bytes()},
                  {"bytes_per_token", bytes_per_token}, {"pp", o->pp}, {"tg", o->tg}, {"reps", o->reps},
                  {"pp_tok_s", pp.median}, {"pp_tok_s_min", pp.min}, {"pp_tok_s_max", pp.max},
                  {"tg_tok_s", tg.median}, {"tg_tok_s_min", tg.min}, {"tg_tok_s_max", tg.max},
                  {"bandwidth_gbps", bw.best_gbps}, {"bandwidth_median_gbps", bw.median_gbps},
                  {"tg_roofline_tok_s", roofline}, {"tg_roofline_pct", pct},
                  {"tg_roofline_pct_paired", paired.median}, {"tg_roofline_pct_paired_min", paired.min},
                  {"tg_roofline_pct_paired_max", paired.max},
                  {"tg_roofline_pct_interleaved", interleaved.median},
                  {"tg_roofline_pct_interleaved_min", interleaved.min},
                  {"tg_roofline_pct_interleaved_max", interleaved.max},
                  {"pp_gflops", pp_gflops}, {"peak_fma_gflops", peak},
                  {"pp_peak_pct", 100.0 * pp_gflops / peak}, {"peak_int8_gops", peak_int8},
                  {"pp_int8_peak_pct", 100.0 * pp_gflops / peak_int8}, {"load_s", load_s}};
              if (mem_loaded.ok() && mem_after.ok()) {
                j["resident_after_load_bytes"] = mem_loaded->total;
                j["resident_file_bytes"] = mem_after->file;
                j["resident_anonymous_bytes"] = mem_after->anonymous;
                j["resident_bytes"] = mem_after->total;
                j["resident_peak_bytes"] = mem_after->peak;
              }
              if (router) {
                j["router"] = o->router;
                j["router_params"] = router->n_params();
                j["router_us_per_token"] = rt.median;
                j["router_pct_of_step"] = 100.0 * rt.median / step_us;
              }
              if (o->depth > 0) {
                j["depth"] = o->depth;
                j["tg_at_depth_tok_s"] = depth_stat.median;
                j["tg_at_start_median_step_tok_s"] = start_stat.median;
                j["tg_at_depth_tok_s_min"] = depth_stat.min;
                j["tg_at_depth_tok_s_max"] = depth_stat.max;
                j["tg_at_depth_pct_of_start"] = 100.0 * depth_ratio.median;
                j["tg_at_depth_pct_of_start_min"] = 100.0 * depth_ratio.min;
                j["tg_at_depth_pct_of_start_max"] = 100.0 * depth_ratio.max;
              }
              std::cout << j.dump(2) << "\n";
              return 0;
            }
            std::printf("model       %s (%s, %.1f MiB, %s)\n", p->model.c_str(), c.arch_name.c_str(),
                        model.total_weight_bytes() / 1048576.0, ActiveSimdTarget().c_str());
            std::printf("threads     %d\n", pool.n_threads());
            std::printf("load        %.2f s%s%s\n", load_s, mem_loaded.ok() ? ", then " : "",
                        mem_loaded.ok() ? mem_loaded->Describe().c_str() : "");
            if (mem_after.ok()) {
              std::printf("memory      after the runs: %.0f MiB resident (file-backed %.0f MiB, anonymous %.0f MiB; the peak "
                          "includes the bandwidth probes)\n",
                          mem_after->total / 1048576.0, mem_after->file / 1048576.0, mem_after->anonymous / 1048576.0);
            }
            std::printf("kv cache    %s\n", p->kv_type.c_str());
            std::printf("bandwidth   %.1f GB/s (best of 7; median %.1f)\n", bw.best_gbps, bw.median_gbps);
            std::printf("pp%-4d      %8.1f tok/s  (range %.1f-%.1f)  %.1f GFLOP/s = %.0f%% of %.0f GFLOP/s FP32 FMA peak,"
                        " %.0f%% of %.0f GOP/s int8 dot peak\n",
                        o->pp, pp.median, pp.min, pp.max, pp_gflops, 100.0 * pp_gflops / peak, peak,
                        100.0 * pp_gflops / peak_int8, peak_int8);
            std::printf("tg%-4d      %8.1f tok/s  (range %.1f-%.1f)\n", o->tg, tg.median, tg.min, tg.max);
            std::printf("roofline    %8.1f tok/s  (%.1f MiB read per token)  -> generation at %.0f%%\n",
                        roofline, bytes_per_token / 1048576.0, pct);
            std::printf("            each run against a bandwidth probe beside it: %.0f%% (range %.0f-%.0f%%)\n",
                        paired.median, paired.min, paired.max);
            std::printf("            each step against a read pass right after it: %.0f%% (range %.0f-%.0f%%; median"
                        " step / median pass)\n",
                        interleaved.median, interleaved.min, interleaved.max);
            if (router) {
              std::printf("router      %8.1f us/token (%s, %lld parameters, %s) = %.2f%% of a %.0f us generation step\n",
                          rt.median, std::string(RouterKindName(router->kind())).c_str(),
                          static_cast<long long>(router->n_params()), GgmlTraits(router->weight_type()).name.data(),
                          100.0 * rt.median / step_us, step_us);
            }
            if (o->depth > 0) {
              // Both from median step times (not the tg line's tokens / total time, which counts the
              // first step's start-up too).
              std::printf("tg at %-5lld %8.1f tok/s  (%.0f%% of %.1f tok/s at the start, range %.0f-%.0f%%; median step"
                          " times, alternated with runs from the start)\n",
                          static_cast<long long>(o->depth), depth_stat.median, 100.0 * depth_ratio.median,
                          start_stat.median, 100.0 * depth_ratio.min, 100.0 * depth_ratio.max);
            }
            return 0;
          });
}

}  // namespace tlr::cli
