// `tlr loadtest`: a load generator for `tlr serve` (apps layer). N simulated devices, one
// thread and one RemoteLlm each (the real device client: sessions, delta sync, retries),
// talk to one server for a fixed time. A device's SLM is simulated: between routed calls it
// "generates" --gen-tokens random ids (taking --slm-ms each; by default no time, so devices call
// back to back: the server's worst case), which the next call appends together with the LLM's
// previous token; past --max-context the device starts a new conversation (a new random
// prompt from base 0, in the same session). The report gives routed calls/s, errors, client
// latency percentiles, the server's batch-size distribution (from /metrics, scraped before
// and after each run) and, for a server on this machine (--server-pid), its memory.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/tlr/commands.h"
#include "apps/tlr/model_args.h"
#include "model/gguf/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "system/remote_llm.h"

namespace tlr::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct LoadOptions {
  std::string server, api_key, vocab, json_path;
  int sessions = 32, prompt_tokens = 64, gen_tokens = 8;
  int64_t max_context = 1024;
  double duration_s = 60, timeout_s = 10, slm_ms = 0, sim_rtt_ms = 0;
  bool compare_single = false;
  int server_pid = 0;
  uint64_t seed = 1;
};

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- Server-side numbers --------------------------------------------------------------------

// One scrape of /metrics: "name{labels}" -> value, for every sample line.
using Scrape = std::map<std::string, double>;

Expected<Scrape> ScrapeMetrics(const LoadOptions& o) {
  httplib::Client c(o.server);
  c.set_connection_timeout(std::chrono::seconds(5));
  c.set_read_timeout(std::chrono::seconds(10));
  if (!o.api_key.empty()) c.set_bearer_token_auth(o.api_key);
  auto res = c.Get("/metrics");
  if (!res) return Status::Error("GET /metrics: " + httplib::to_string(res.error()));
  if (res->status != 200) return Status::Error("GET /metrics answered " + std::to_string(res->status));
  Scrape s;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    s[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return s;
}

double Delta(const Scrape& before, const Scrape& after, const std::string& key) {
  auto get = [&](const Scrape& s) {
    auto it = s.find(key);
    return it == s.end() ? 0.0 : it->second;
  };
  return get(after) - get(before);
}

// Sum of the deltas of every series of `name` (all label sets), e.g. a counter per endpoint.
double DeltaFamily(const Scrape& before, const Scrape& after, const std::string& name, const std::string& must_contain) {
  double d = 0;
  for (const auto& [key, v] : after) {
    if (key.rfind(name, 0) != 0 || (key.size() > name.size() && key[name.size()] != '{')) continue;
    if (!must_contain.empty() && key.find(must_contain) == std::string::npos) continue;
    d += Delta(before, after, key);
  }
  return d;
}

struct Bucket {
  double lo = 0, hi = 0;  // (lo, hi]; hi = inf for the last
  double count = 0;
};

// Per-bucket counts of an unlabelled histogram over the run (Prometheus buckets are cumulative).
std::vector<Bucket> HistogramDelta(const Scrape& before, const Scrape& after, const std::string& name) {
  const std::string prefix = name + "_bucket{le=\"";
  std::vector<std::pair<double, double>> cum;  // (le, cumulative count)
  for (const auto& [key, v] : after) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string le = key.substr(prefix.size(), key.size() - prefix.size() - 2);
    cum.push_back({le == "+Inf" ? INFINITY : std::strtod(le.c_str(), nullptr), Delta(before, after, key)});
  }
  std::sort(cum.begin(), cum.end());
  std::vector<Bucket> out;
  double lo = 0, prev = 0;
  for (const auto& [le, c] : cum) {
    out.push_back({lo, le, c - prev});
    lo = le;
    prev = c;
  }
  return out;
}

// "1", "3-4", "129+" for integer-valued (lo, hi] buckets.
std::string BucketLabel(const Bucket& b) {
  const long long first = static_cast<long long>(std::floor(b.lo)) + 1;
  if (std::isinf(b.hi)) return std::to_string(first) + "+";
  const long long last = static_cast<long long>(b.hi);
  return first >= last ? std::to_string(last) : std::to_string(first) + "-" + std::to_string(last);
}

// VmRSS / VmHWM of a process, in KiB (0 when unreadable).
struct ProcMemory {
  int64_t rss_kib = 0, hwm_kib = 0;
};
ProcMemory ReadProcMemory(const std::string& pid) {
  ProcMemory m;
  std::ifstream in("/proc/" + pid + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) m.rss_kib = std::atoll(line.c_str() + 6);
    if (line.rfind("VmHWM:", 0) == 0) m.hwm_kib = std::atoll(line.c_str() + 6);
  }
  return m;
}

// ---- The simulated devices ------------------------------------------------------------------

struct DeviceResult {
  std::vector<float> latency_ms;  // of each successful call
  int64_t calls = 0, errors = 0, conversations = 0;
  std::string first_error;
  RemoteStats stats;
};

struct RunResult {
  int sessions = 0;
  double wall_s = 0;
  int64_t calls = 0, errors = 0, conversations = 0, resyncs = 0, retries = 0, http_requests = 0, tokens_sent = 0;
  std::vector<std::string> error_samples;
  std::vector<float> latency_ms;  // sorted
  bool have_metrics = false;
  std::vector<Bucket> batch_sequences;
  double passes = 0, batch_seq_sum = 0, batch_tok_sum = 0, batch_tok_count = 0, prefill = 0, decode = 0,
         generated = 0, server_resyncs = 0, evictions = 0, queue_sum = 0, queue_count = 0, next_s_sum = 0,
         next_count = 0, kv_bytes = 0;
  ProcMemory mem_before, mem_after;
  int64_t rss_peak_kib = 0;  // sampled during the run
  double calls_per_s() const { return wall_s > 0 ? calls / wall_s : 0; }
};

float Percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::min(sorted.size() - 1, i == 0 ? 0 : i - 1)];
}

// One device: conversations of random tokens until `deadline`.
void RunDevice(RemoteLlm* llm, const LoadOptions& o, int32_t n_vocab, uint64_t seed, Clock::time_point deadline,
               std::atomic<int64_t>* calls, std::atomic<int64_t>* errors, DeviceResult* r) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, n_vocab - 1);
  SamplerParams sampling;  // greedy, as a router's LLM token usually is
  sampling.seed = seed;
  std::vector<int32_t> context;
  const int n = 1;
  while (Clock::now() < deadline) {
    if (context.empty() || static_cast<int64_t>(context.size()) + o.gen_tokens + n > o.max_context) {
      context.clear();
      for (int i = 0; i < o.prompt_tokens; ++i) context.push_back(id(rng));
      ++r->conversations;
    }
    for (int i = 0; i < o.gen_tokens; ++i) context.push_back(id(rng));  // the SLM's tokens
    if (o.slm_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.slm_ms * o.gen_tokens));
    const Clock::time_point t0 = Clock::now();
    auto reply = llm->Next(context, n, sampling);
    const double ms = Seconds(t0) * 1e3;
    ++r->calls;
    if (reply.ok()) {
      r->latency_ms.push_back(static_cast<float>(ms));
      context.insert(context.end(), reply->tokens.begin(), reply->tokens.end());
      calls->fetch_add(1, std::memory_order_relaxed);
    } else {
      ++r->errors;
      errors->fetch_add(1, std::memory_order_relaxed);
      if (r->first_error.empty()) r->first_error = reply.status().message();
      context.push_back(id(rng));  // the device keeps its SLM's token (FALLBACK)
      // A failed client fails fast for a while; do not spin on it.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  r->stats = llm->stats();
}

Expected<RunResult> RunLoad(const LoadOptions& o, const Tokenizer& vocab, int sessions, uint64_t seed) {
  RunResult run;
  run.sessions = sessions;
  RemoteOptions ro;
  ro.http.url = o.server;
  ro.http.api_key = o.api_key;
  ro.http.timeout_s = o.timeout_s;
  ro.http.sim_rtt_s = o.sim_rtt_ms / 1e3;
  ro.max_in_flight = 1;  // a simulated device makes one call at a time
  std::vector<std::unique_ptr<RemoteLlm>> devices;
  for (int d = 0; d < sessions; ++d) {
    ro.http.seed = seed + static_cast<uint64_t>(d);
    auto llm = RemoteLlm::Connect(ro, vocab);
    if (!llm.ok()) {
      const std::string& m = llm.status().message();
      if (m.find("vocabulary") == std::string::npos) return llm.status();
      return Status::Error(m + " (pass the server's model file as --vocab)");
    }
    if (!(*llm)->warning().empty()) return Status::Error("the server at " + o.server + " is not reachable");
    devices.push_back(std::move(llm).value());
  }
  const std::string pid = std::to_string(o.server_pid);
  Scrape before;
  if (auto s = ScrapeMetrics(o); s.ok()) {
    before = std::move(s).value();
    run.have_metrics = true;
  } else {
    std::fprintf(stderr, "warning: no server metrics: %s\n", s.status().message().c_str());
  }
  if (o.server_pid > 0) run.mem_before = ReadProcMemory(pid);
  run.rss_peak_kib = run.mem_before.rss_kib;

  std::atomic<int64_t> calls{0}, errors{0};
  std::vector<DeviceResult> results(static_cast<size_t>(sessions));
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point deadline = t0 + std::chrono::microseconds(static_cast<int64_t>(o.duration_s * 1e6));
  std::vector<std::thread> threads;
  for (int d = 0; d < sessions; ++d) {
    threads.emplace_back(RunDevice, devices[d].get(), std::cref(o), vocab.n_vocab(),
                         seed * 1000003ull + static_cast<uint64_t>(d), deadline, &calls, &errors, &results[d]);
  }
  // Progress every ~5 s; server memory sampled every 0.25 s.
  double next_report = 5;
  int64_t last_calls = 0;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    if (o.server_pid > 0) run.rss_peak_kib = std::max(run.rss_peak_kib, ReadProcMemory(pid).rss_kib);
    const double el = Seconds(t0);
    if (el >= next_report) {
      const int64_t c = calls.load();
      std::fprintf(stderr, "loadtest: %d session%s  %5.1f s  calls %lld  %.1f/s (last 5 s: %.1f/s)  errors %lld\n",
                   sessions, sessions == 1 ? "" : "s", el, static_cast<long long>(c), c / el, (c - last_calls) / 5.0,
                   static_cast<long long>(errors.load()));
      last_calls = c;
      next_report += 5;
    }
  }
  for (auto& t : threads) t.join();
  run.wall_s = Seconds(t0);

  if (run.have_metrics) {
    auto s = ScrapeMetrics(o);
    if (!s.ok()) {
      run.have_metrics = false;
      std::fprintf(stderr, "warning: no server metrics after the run: %s\n", s.status().message().c_str());
    } else {
      const Scrape& after = *s;
      run.batch_sequences = HistogramDelta(before, after, "tlr_batch_sequences");
      run.passes = Delta(before, after, "tlr_batch_sequences_count");
      run.batch_seq_sum = Delta(before, after, "tlr_batch_sequences_sum");
      run.batch_tok_sum = Delta(before, after, "tlr_batch_tokens_sum");
      run.batch_tok_count = Delta(before, after, "tlr_batch_tokens_count");
      run.prefill = Delta(before, after, "tlr_prefill_tokens_total");
      run.decode = Delta(before, after, "tlr_decode_tokens_total");
      run.generated = Delta(before, after, "tlr_generated_tokens_total");
      run.server_resyncs = Delta(before, after, "tlr_resyncs_total");
      run.evictions = Delta(before, after, "tlr_evictions_total");
      run.queue_sum = Delta(before, after, "tlr_queue_seconds_sum");
      run.queue_count = Delta(before, after, "tlr_queue_seconds_count");
      run.next_s_sum = DeltaFamily(before, after, "tlr_http_request_seconds_sum", "/tlr/v1/next");
      run.next_count = DeltaFamily(before, after, "tlr_http_request_seconds_count", "/tlr/v1/next");
      auto kv = after.find("tlr_kv_bytes");
      run.kv_bytes = kv == after.end() ? 0 : kv->second;
    }
  }
  if (o.server_pid > 0) {
    run.mem_after = ReadProcMemory(pid);
    run.rss_peak_kib = std::max(run.rss_peak_kib, run.mem_after.rss_kib);
  }

  for (auto& r : results) {
    run.calls += r.calls - r.errors;
    run.errors += r.errors;
    run.conversations += r.conversations;
    run.resyncs += r.stats.resyncs;
    run.retries += r.stats.retries;
    run.http_requests += r.stats.http_requests;
    run.tokens_sent += r.stats.tokens_sent;
    if (!r.first_error.empty() && run.error_samples.size() < 5) run.error_samples.push_back(r.first_error);
    run.latency_ms.insert(run.latency_ms.end(), r.latency_ms.begin(), r.latency_ms.end());
  }
  std::sort(run.latency_ms.begin(), run.latency_ms.end());
  devices.clear();  // closes the sessions on the server
  return run;
}

// ---- Report ---------------------------------------------------------------------------------

double Mib(int64_t kib) { return kib / 1024.0; }

void PrintRun(const RunResult& r, const LoadOptions& o) {
  const std::vector<float>& l = r.latency_ms;
  double mean = 0;
  for (float v : l) mean += v;
  mean = l.empty() ? 0 : mean / l.size();
  std::printf("\n== %d session%s, %.2f s ==\n", r.sessions, r.sessions == 1 ? "" : "s", r.wall_s);
  std::printf("routed calls     %lld  (%.1f calls/s, %.1f per session)\n", static_cast<long long>(r.calls),
              r.calls_per_s(), r.calls_per_s() / r.sessions);
  std::printf("errors           %lld", static_cast<long long>(r.errors));
  for (const auto& e : r.error_samples) std::printf("\n  e.g. %s", e.c_str());
  std::printf("\nresyncs          %lld  (retries %lld, conversations %lld, tokens sent %lld, HTTP requests %lld)\n",
              static_cast<long long>(r.resyncs), static_cast<long long>(r.retries),
              static_cast<long long>(r.conversations), static_cast<long long>(r.tokens_sent),
              static_cast<long long>(r.http_requests));
  std::printf("latency ms       p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f\n", Percentile(l, 50),
              Percentile(l, 90), Percentile(l, 99), l.empty() ? 0.0f : l.back(), mean);
  if (r.have_metrics) {
    if (r.next_count > 0) {
      std::printf("server           /tlr/v1/next mean %.2f ms in the server (queue %.2f ms before the first pass)\n",
                  1e3 * r.next_s_sum / r.next_count, r.queue_count > 0 ? 1e3 * r.queue_sum / r.queue_count : 0.0);
    }
    std::printf("server batches   %.0f forward passes (%.1f/s); sequences per pass mean %.2f; tokens per pass mean %.1f\n",
                r.passes, r.passes / r.wall_s, r.passes > 0 ? r.batch_seq_sum / r.passes : 0.0,
                r.batch_tok_count > 0 ? r.batch_tok_sum / r.batch_tok_count : 0.0);
    std::printf("  sequences  passes       %%\n");
    for (const Bucket& b : r.batch_sequences) {
      if (b.count <= 0) continue;
      std::printf("  %-9s %7.0f  %5.1f%%\n", BucketLabel(b).c_str(), b.count, r.passes > 0 ? 100 * b.count / r.passes : 0.0);
    }
    std::printf("server tokens    prefill %.0f  decode %.0f  generated %.0f; server resyncs %.0f, evictions %.0f; "
                "KV in use after %.1f MiB\n",
                r.prefill, r.decode, r.generated, r.server_resyncs, r.evictions, r.kv_bytes / 1048576.0);
  }
  if (o.server_pid > 0) {
    std::printf("server memory    VmRSS %.1f -> %.1f MiB (peak sampled %.1f MiB), VmHWM %.1f MiB\n",
                Mib(r.mem_before.rss_kib), Mib(r.mem_after.rss_kib), Mib(r.rss_peak_kib), Mib(r.mem_after.hwm_kib));
  }
}

json RunJson(const RunResult& r) {
  const std::vector<float>& l = r.latency_ms;
  json j = {{"sessions", r.sessions},
            {"wall_s", r.wall_s},
            {"calls", r.calls},
            {"calls_per_s", r.calls_per_s()},
            {"errors", r.errors},
            {"error_samples", r.error_samples},
            {"resyncs", r.resyncs},
            {"retries", r.retries},
            {"conversations", r.conversations},
            {"tokens_sent", r.tokens_sent},
            {"http_requests", r.http_requests},
            {"latency_ms",
             {{"p50", Percentile(l, 50)},
              {"p90", Percentile(l, 90)},
              {"p99", Percentile(l, 99)},
              {"max", l.empty() ? 0.0f : l.back()}}}};
  if (r.have_metrics) {
    json buckets = json::array();
    for (const Bucket& b : r.batch_sequences) {
      buckets.push_back({{"sequences", BucketLabel(b)}, {"le", std::isinf(b.hi) ? json("+Inf") : json(b.hi)},
                         {"passes", b.count}});
    }
    j["server"] = {{"forward_passes", r.passes},
                   {"batch_sequences", buckets},
                   {"batch_sequences_mean", r.passes > 0 ? r.batch_seq_sum / r.passes : 0.0},
                   {"batch_tokens_mean", r.batch_tok_count > 0 ? r.batch_tok_sum / r.batch_tok_count : 0.0},
                   {"prefill_tokens", r.prefill},
                   {"decode_tokens", r.decode},
                   {"generated_tokens", r.generated},
                   {"resyncs", r.server_resyncs},
                   {"evictions", r.evictions},
                   {"next_mean_ms", r.next_count > 0 ? 1e3 * r.next_s_sum / r.next_count : 0.0},
                   {"queue_mean_ms", r.queue_count > 0 ? 1e3 * r.queue_sum / r.queue_count : 0.0},
                   {"kv_bytes_after", r.kv_bytes}};
  }
  if (r.mem_after.rss_kib > 0) {
    j["server_memory_kib"] = {{"rss_before", r.mem_before.rss_kib},
                              {"rss_after", r.mem_after.rss_kib},
                              {"rss_peak_sampled", r.rss_peak_kib},
                              {"hwm", r.mem_after.hwm_kib}};
  }
  return j;
}

Expected<Tokenizer> LoadVocab(const std::string& path) {
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) return Tokenizer::FromHfJsonFile(path);
  auto f = GgufFile::Open(path);  // mapped: only the tokenizer metadata is read
  if (!f.ok()) return f.status();
  auto t = Tokenizer::FromGguf(*f);
  if (!t.ok()) return t.status().WithPrefix("'" + path + "'");
  return t;
}

}  // namespace

Command AddLoadtestCommand(CLI::App& root) {
  auto o = std::make_shared<LoadOptions>();
  CLI::App* app = root.add_subcommand(
      "loadtest", "Load-test a `tlr serve` server with many simulated devices (routed calls/s, latency, batching)");
  app->add_option("--server", o->server, "The server (http[s]://host:port)")->required();
  app->add_option("--api-key", o->api_key, "API key for the server (also $TLR_API_KEY)");
  app->add_option("--vocab", o->vocab,
                  "GGUF (or tokenizer.json) with the server model's vocabulary; only the tokenizer is "
                  "read (default: the bundled demo SLM, whose vocabulary the demo LLM shares)");
  app->add_option("--sessions", o->sessions, "Concurrent devices (one thread and one server session each)")
      ->default_val(32)->check(CLI::Range(1, 4096));
  app->add_option("--duration", o->duration_s, "Seconds to run")->default_val(60)->check(CLI::Range(0.1, 86400.0));
  app->add_option("--prompt-tokens", o->prompt_tokens, "Random prompt tokens per conversation")->default_val(64)
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--gen-tokens", o->gen_tokens,
                  "Tokens the simulated SLM produces between routed calls (random ids, appended with the next call)")
      ->default_val(8)->check(CLI::Range(0, 1 << 20));
  app->add_option("--max-context", o->max_context,
                  "Past this many tokens a device starts a new conversation (from base 0, same session)")
      ->default_val(1024)->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  app->add_option("--slm-ms", o->slm_ms,
                  "Simulated SLM time per token on the device (sleeps --gen-tokens x this between calls; "
                  "0: devices call back to back, the server's worst case)")
      ->default_val(0)->check(CLI::Range(0.0, 60000.0));
  app->add_option("--sim-rtt", o->sim_rtt_ms, "Simulated network round trip per HTTP request, in ms (in the latency)")
      ->default_val(0)->check(CLI::Range(0.0, 600000.0));
  app->add_flag("--compare-single", o->compare_single,
                "First run 1 session for the same duration and report calls/s(N) / calls/s(1)");
  app->add_option("--server-pid", o->server_pid, "Report the server's memory (VmRSS, VmHWM) from /proc/PID")
      ->check(CLI::Range(1, 1 << 30));
  app->add_option("--timeout", o->timeout_s, "Seconds per HTTP attempt")->default_val(10)->check(CLI::Range(0.001, 3600.0));
  app->add_option("--json", o->json_path, "Also write every number to this JSON file");
  app->add_option("--seed", o->seed, "Seed of the random tokens")->default_val(1);
  app->footer(
      "Example (demo LLM):\n"
      "  tlr serve --port 8080 -t 2 &\n"
      "  tlr loadtest --server http://127.0.0.1:8080 --sessions 32 --duration 60 --compare-single --server-pid $!");
  return {app, [o]() -> int {
            const char* cmd = "loadtest";
            if (o->api_key.empty()) {
              if (const char* k = std::getenv("TLR_API_KEY"); k && *k) o->api_key = k;
            }
            if (o->prompt_tokens + o->gen_tokens + 1 > o->max_context) {
              return ReportError(cmd, "--max-context must exceed --prompt-tokens + --gen-tokens + 1");
            }
            if (o->vocab.empty()) o->vocab = DemoFile("slm.gguf");
            auto vocab = LoadVocab(o->vocab);
            if (!vocab.ok()) return ReportError(cmd, vocab.status().message());
            std::printf("tlr loadtest: %s, %d session%s x %.0f s; prompts of %d tokens, %d SLM tokens per routed call, "
                        "contexts up to %lld; vocabulary of %d tokens; SLM %.1f ms/token, network RTT %.1f ms\n",
                        o->server.c_str(), o->sessions, o->sessions == 1 ? "" : "s", o->duration_s, o->prompt_tokens,
                        o->gen_tokens, static_cast<long long>(o->max_context), vocab->n_vocab(), o->slm_ms,
                        o->sim_rtt_ms);
            std::fflush(stdout);
            std::vector<RunResult> runs;
            std::vector<int> plan;
            if (o->compare_single) plan.push_back(1);
            plan.push_back(o->sessions);
            for (size_t i = 0; i < plan.size(); ++i) {
              auto r = RunLoad(*o, *vocab, plan[i], o->seed + 7919 * i);
              if (!r.ok()) return ReportError(cmd, r.status().message());
              PrintRun(*r, *o);
              std::fflush(stdout);
              runs.push_back(std::move(r).value());
            }
            json out = {{"server", o->server},
                        {"duration_s", o->duration_s},
                        {"prompt_tokens", o->prompt_tokens},
                        {"gen_tokens", o->gen_tokens},
                        {"max_context", o->max_context},
                        {"slm_ms_per_token", o->slm_ms},
                        {"sim_rtt_ms", o->sim_rtt_ms},
                        {"n_vocab", vocab->n_vocab()},
                        {"seed", o->seed},
                        {"runs", json::array()}};
            for (const RunResult& r : runs) out["runs"].push_back(RunJson(r));
            int64_t errors = 0;
            for (const RunResult& r : runs) errors += r.errors;
            if (runs.size() == 2) {
              const double ratio = runs[0].calls_per_s() > 0 ? runs[1].calls_per_s() / runs[0].calls_per_s() : 0;
              std::printf("\nscaling          %d sessions / 1 session: %.2fx routed calls/s (%.1f vs %.1f; goal >= 8x)\n",
                          o->sessions, ratio, runs[1].calls_per_s(), runs[0].calls_per_s());
              out["speedup_vs_single"] = ratio;
            }
            std::printf("%s\n", errors == 0 ? "zero errors" : (std::to_string(errors) + " errors").c_str());
            if (!o->json_path.empty()) {
              std::ofstream f(o->json_path);
              f << out.dump(2) << "\n";
              if (!f) return ReportError(cmd, "cannot write '" + o->json_path + "'");
            }
            return errors == 0 ? 0 : 1;
          }};
}

}  // namespace tlr::cli
