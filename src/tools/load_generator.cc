// The load generator for `tlr serve` (tools layer). See load_generator.h.
#include "tools/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "device/remote/remote_llm.h"
#include "model/gguf/gguf_reader.h"

namespace tlr {

namespace {

// printf into a std::string.
std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[512];
  const int n = std::vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return {};
  if (static_cast<size_t>(n) < sizeof small) return std::string(small, static_cast<size_t>(n));
  std::string s(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(s.data(), s.size(), fmt, ap);
  va_end(ap);
  s.resize(static_cast<size_t>(n));
  return s;
}

template <typename... Args>
void Appendf(std::string* out, const char* fmt, Args... args) {
  *out += Format(fmt, args...);
}

void Log(const LoadOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

}  // namespace

MetricsScrape ParseMetricsText(const std::string& text) {
  MetricsScrape s;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    // A counter the server declared but has not counted yet has no sample line: it is 0 (so a
    // server with the pacer that paced nothing is told from a server without it).
    if (line.rfind("# TYPE ", 0) == 0 && line.size() > 8 && line.compare(line.size() - 8, 8, " counter") == 0) {
      s.emplace(line.substr(7, line.size() - 15), 0.0);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    s[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- Server-side numbers --------------------------------------------------------------------

Expected<MetricsScrape> ScrapeMetrics(const LoadOptions& o) {
  httplib::Client c(o.server);
  c.set_connection_timeout(std::chrono::seconds(5));
  c.set_read_timeout(std::chrono::seconds(10));
  if (!o.api_key.empty()) c.set_bearer_token_auth(o.api_key);
  auto res = c.Get("/metrics");
  if (!res) return Status::Error("GET /metrics: " + httplib::to_string(res.error()));
  if (res->status != 200) return Status::Error("GET /metrics answered " + std::to_string(res->status));
  return ParseMetricsText(res->body);
}

double Delta(const MetricsScrape& before, const MetricsScrape& after, const std::string& key) {
  auto get = [&](const MetricsScrape& s) {
    auto it = s.find(key);
    return it == s.end() ? 0.0 : it->second;
  };
  return get(after) - get(before);
}

// Sum of the deltas of every series of `name` (all label sets), e.g. a counter per endpoint.
double DeltaFamily(const MetricsScrape& before, const MetricsScrape& after, const std::string& name, const std::string& must_contain) {
  double d = 0;
  for (const auto& [key, v] : after) {
    if (key.rfind(name, 0) != 0 || (key.size() > name.size() && key[name.size()] != '{')) continue;
    if (!must_contain.empty() && key.find(must_contain) == std::string::npos) continue;
    d += Delta(before, after, key);
  }
  return d;
}

}  // namespace

std::vector<LoadBucket> HistogramDelta(const MetricsScrape& before, const MetricsScrape& after, const std::string& name) {
  const std::string prefix = name + "_bucket{le=\"";
  std::vector<std::pair<double, double>> cum;  // (le, cumulative count)
  for (const auto& [key, v] : after) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string le = key.substr(prefix.size(), key.size() - prefix.size() - 2);
    cum.push_back({le == "+Inf" ? INFINITY : std::strtod(le.c_str(), nullptr), Delta(before, after, key)});
  }
  std::sort(cum.begin(), cum.end());
  std::vector<LoadBucket> out;
  double lo = 0, prev = 0;
  for (const auto& [le, c] : cum) {
    out.push_back({lo, le, c - prev});
    lo = le;
    prev = c;
  }
  return out;
}

std::string BucketLabel(const LoadBucket& b) {
  const long long first = static_cast<long long>(std::floor(b.lo)) + 1;
  if (std::isinf(b.hi)) return std::to_string(first) + "+";
  const long long last = static_cast<long long>(b.hi);
  return first >= last ? std::to_string(last) : std::to_string(first) + "-" + std::to_string(last);
}

ProcMemory ReadProcMemory(int pid) {
  ProcMemory m;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) m.rss_kib = std::atoll(line.c_str() + 6);
    if (line.rfind("VmHWM:", 0) == 0) m.hwm_kib = std::atoll(line.c_str() + 6);
  }
  return m;
}

namespace {

// ---- The simulated devices ------------------------------------------------------------------

struct DeviceResult {
  std::vector<float> latency_ms;  // of each successful call
  std::vector<float> refused_ms;  // of each refused call
  bool lookahead = false;         // this device asked for lookahead
  int64_t calls = 0, errors = 0, refused = 0, quota_refused = 0, partial = 0, timed_out = 0, failed = 0, conversations = 0,
          steady_calls = 0;
  double waited_s = 0;
  std::string first_error, first_quota, first_timeout, first_failure;
  RemoteStats stats;
};

}  // namespace

float Percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::min(sorted.size() - 1, i == 0 ? 0 : i - 1)];
}

namespace {

// One device: conversations of random tokens until `deadline`.
// It starts at `start`; calls that end at or after `steady` count as steady-state ones.
void RunDevice(RemoteLlm* llm, const LoadOptions& o, int32_t n_vocab, uint64_t seed, Clock::time_point start,
               Clock::time_point steady, Clock::time_point deadline, std::atomic<int64_t>* calls,
               std::atomic<int64_t>* errors, DeviceResult* r) {
  std::this_thread::sleep_until(start);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, n_vocab - 1);
  SamplerParams sampling;  // greedy, as a router's LLM token usually is
  sampling.seed = seed;
  std::vector<int32_t> context;
  const int n = 1;
  while (Clock::now() < deadline) {
    if (context.empty() || static_cast<int64_t>(context.size()) + o.gen_tokens + n > o.max_context) {
      context.clear();
      std::mt19937_64 shared_rng(0x5157e3);  // the same system prompt on every device
      for (int i = 0; i < o.shared_prefix; ++i) context.push_back(id(shared_rng));
      for (int i = 0; i < o.prompt_tokens; ++i) context.push_back(id(rng));
      ++r->conversations;
    }
    for (int i = 0; i < o.gen_tokens; ++i) context.push_back(id(rng));  // the SLM's tokens
    if (o.slm_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.slm_ms * o.gen_tokens));
    const Clock::time_point t0 = Clock::now();
    const RemoteStats before = llm->stats();
    auto reply = llm->Next(context, n, sampling, r->lookahead ? o.lookahead : 0);
    const double ms = Seconds(t0) * 1e3;
    ++r->calls;
    if (reply.ok()) {
      r->latency_ms.push_back(static_cast<float>(ms));
      if (Clock::now() >= steady) ++r->steady_calls;
      context.insert(context.end(), reply->tokens.begin(), reply->tokens.end());
      calls->fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    ++r->errors;
    errors->fetch_add(1, std::memory_order_relaxed);
    const RemoteStats d = llm->stats() - before;
    const std::string& why = reply.status().message();
    if (d.failures[static_cast<int>(CallFailure::kPartial)] > 0) {
      ++r->partial;
    } else if (d.failures[static_cast<int>(CallFailure::kQuota)] > 0) {
      ++r->quota_refused;  // the client's session count, not the server's load
      if (r->first_quota.empty()) r->first_quota = why;
    } else if (d.failures[static_cast<int>(CallFailure::kRefused)] > 0) {
      ++r->refused;
      r->refused_ms.push_back(static_cast<float>(ms));
      if (r->first_error.empty()) r->first_error = why;
    } else if (d.failures[static_cast<int>(CallFailure::kTimeout)] > 0) {
      ++r->timed_out;
      if (r->first_timeout.empty()) r->first_timeout = why;
    } else {
      ++r->failed;
      if (r->first_failure.empty()) r->first_failure = why;
    }
    context.push_back(id(rng));  // the device keeps its SLM's token (FALLBACK)
    // Not before the server's Retry-After (or the end of the backend's fail-fast window): a
    // device's SLM goes on meanwhile without calling.
    const double wait = std::min(llm->deferred_s(), std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()));
    if (wait > 0) {
      r->waited_s += wait;
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
  }
  r->stats = llm->stats();
}

}  // namespace

Expected<LoadRun> RunLoad(const LoadOptions& o, const Tokenizer& vocab, int sessions, uint64_t seed) {
  LoadRun run;
  run.sessions = sessions;
  if (o.server_pid > 0 && ::access(("/proc/" + std::to_string(o.server_pid) + "/status").c_str(), R_OK) != 0) {
    return Status::Error("--server-pid " + std::to_string(o.server_pid) + ": no such process on this machine (its "
                         "memory is read from /proc)");
  }
  RemoteOptions ro;
  ro.http.url = o.server;
  ro.http.api_key = o.api_key;
  ro.http.timeout_s = o.timeout_s;
  ro.http.sim_rtt_s = o.sim_rtt_ms / 1e3;
  ro.max_in_flight = 1;  // a simulated device makes one call at a time
  ro.require_reachable = true;  // an unreachable server is an error that says why
  TLR_ASSIGN_OR_RETURN(ro.protocol, ParseRemoteProtocol(o.backend));
  std::vector<std::unique_ptr<RemoteLlm>> devices;
  for (int d = 0; d < sessions; ++d) {
    ro.http.seed = seed + static_cast<uint64_t>(d);
    auto llm = RemoteLlm::Connect(ro, vocab);
    if (!llm.ok()) {
      const std::string& m = llm.status().message();
      if (m.find("vocabulary") == std::string::npos) return llm.status();
      return Status::Error(m + " (pass the server's model file as --vocab)");
    }
    if (!(*llm)->warning().empty()) return Status::Error((*llm)->warning());
    devices.push_back(std::move(llm).value());
  }
  const int pid = o.server_pid;
  MetricsScrape before;
  if (auto s = ScrapeMetrics(o); s.ok()) {
    before = std::move(s).value();
    run.have_metrics = true;
  } else {
    Log(o, "warning: no server metrics: " + s.status().message());
  }
  if (o.server_pid > 0) run.mem_before = ReadProcMemory(pid);
  run.rss_peak_kib = run.mem_before.rss_kib;

  std::atomic<int64_t> calls{0}, errors{0};
  std::vector<DeviceResult> results(static_cast<size_t>(sessions));
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point deadline = t0 + std::chrono::microseconds(static_cast<int64_t>(o.duration_s * 1e6));
  run.ramp_s = std::clamp(o.ramp_s, 0.0, o.duration_s / 2);
  const auto at = [&](double s) { return t0 + std::chrono::microseconds(static_cast<int64_t>(s * 1e6)); };
  std::vector<std::thread> threads;
  for (int d = 0; d < sessions; ++d) {
    results[d].lookahead = o.lookahead > 0 && d % 2 == 1;
    threads.emplace_back(RunDevice, devices[d].get(), std::cref(o), vocab.n_vocab(),
                         seed * 1000003ull + static_cast<uint64_t>(d), at(run.ramp_s * d / sessions), at(run.ramp_s),
                         deadline, &calls, &errors, &results[d]);
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
      Log(o, Format("loadtest: %d session%s  %5.1f s  answered %lld  %.1f/s (last 5 s: %.1f/s)  not answered %lld",
                   sessions, sessions == 1 ? "" : "s", el, static_cast<long long>(c), c / el, (c - last_calls) / 5.0,
                   static_cast<long long>(errors.load())));
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
      Log(o, "warning: no server metrics after the run: " + s.status().message());
    } else {
      const MetricsScrape& after = *s;
      run.batch_sequences = HistogramDelta(before, after, "tlr_batch_sequences");
      run.passes = Delta(before, after, "tlr_batch_sequences_count");
      run.batch_seq_sum = Delta(before, after, "tlr_batch_sequences_sum");
      run.batch_tok_sum = Delta(before, after, "tlr_batch_tokens_sum");
      run.batch_tok_count = Delta(before, after, "tlr_batch_tokens_count");
      run.prefill = Delta(before, after, "tlr_prefill_tokens_total");
      run.copied = Delta(before, after, "tlr_session_copied_tokens_total") +
                   Delta(before, after, "tlr_prompt_cache_copied_tokens_total");
      run.decode = Delta(before, after, "tlr_decode_tokens_total");
      run.generated = Delta(before, after, "tlr_generated_tokens_total");
      run.server_resyncs = Delta(before, after, "tlr_resyncs_total");
      run.evictions = Delta(before, after, "tlr_evictions_total");
      run.server_refused = DeltaFamily(before, after, "tlr_calls_refused_total", "");
      run.server_dropped = Delta(before, after, "tlr_calls_expired_total") + Delta(before, after, "tlr_calls_abandoned_total");
      run.server_cancelled = Delta(before, after, "tlr_calls_cancelled_total");
      run.server_late = Delta(before, after, "tlr_calls_late_total");
      run.have_pacer = after.count("tlr_new_conversations_paced_total") > 0;
      run.new_tokens = Delta(before, after, "tlr_new_conversation_tokens_total");
      run.server_paced = Delta(before, after, "tlr_new_conversations_paced_total");
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
    run.steady_calls += r.steady_calls;
    run.errors += r.errors;
    run.refused += r.refused;
    run.quota_refused += r.quota_refused;
    if (run.quota_sample.empty()) run.quota_sample = r.first_quota;
    run.partial += r.partial;
    run.timed_out += r.timed_out;
    run.failed += r.failed;
    run.waited_s += r.waited_s;
    run.refused_ms.insert(run.refused_ms.end(), r.refused_ms.begin(), r.refused_ms.end());
    for (const std::string* e : {&r.first_timeout, &r.first_failure}) {
      if (!e->empty() && run.error_samples.size() < 5) run.error_samples.push_back(*e);
    }
    run.conversations += r.conversations;
    run.resyncs += r.stats.resyncs;
    run.retries += r.stats.retries;
    run.http_requests += r.stats.http_requests;
    run.tokens_sent += r.stats.tokens_sent;
    if (run.refusal_sample.empty()) run.refusal_sample = r.first_error;
    run.latency_ms.insert(run.latency_ms.end(), r.latency_ms.begin(), r.latency_ms.end());
    if (!r.lookahead) run.latency_plain_ms.insert(run.latency_plain_ms.end(), r.latency_ms.begin(), r.latency_ms.end());
  }
  std::sort(run.latency_ms.begin(), run.latency_ms.end());
  std::sort(run.refused_ms.begin(), run.refused_ms.end());
  std::sort(run.latency_plain_ms.begin(), run.latency_plain_ms.end());
  devices.clear();  // closes the sessions on the server
  return run;
}

// ---- Report ---------------------------------------------------------------------------------

namespace {

double Mib(int64_t kib) { return kib / 1024.0; }

}  // namespace

std::string FormatLoadRun(const LoadRun& r, const LoadOptions& o) {
  std::string out;
  const std::vector<float>& l = r.latency_ms;
  double mean = 0;
  for (float v : l) mean += v;
  mean = l.empty() ? 0 : mean / l.size();
  Appendf(&out, "\n== %d session%s, %.2f s ==\n", r.sessions, r.sessions == 1 ? "" : "s", r.wall_s);
  Appendf(&out, "answered         %lld  (goodput %.1f calls/s, %.1f per session", static_cast<long long>(r.calls),
              r.calls_per_s(), r.calls_per_s() / r.sessions);
  if (r.ramp_s > 0) Appendf(&out, "; after the %.1f s ramp-up", r.ramp_s);
  Appendf(&out, ")\n");
  Appendf(&out, "refused          %lld  (429/503 overloaded; answered in p50 %.1f ms, p99 %.1f ms; devices waited "
                "out Retry-After %.1f s in all)",
          static_cast<long long>(r.refused), Percentile(r.refused_ms, 50), Percentile(r.refused_ms, 99), r.waited_s);
  if (!r.refusal_sample.empty()) Appendf(&out, "\n  e.g. %s", r.refusal_sample.c_str());
  if (r.quota_refused > 0) {
    Appendf(&out, "\nquota refused    %lld  (429 session_quota: sessions per client at the server's --session-quota; "
                  "not overload)\n  e.g. %s",
            static_cast<long long>(r.quota_refused), r.quota_sample.c_str());
  }
  Appendf(&out, "\npartial          %lld  (a context's prefill longer than the timeout, taken in part: the next call goes on)",
          static_cast<long long>(r.partial));
  Appendf(&out, "\ntimed out        %lld  (no answer within the device's %.1f s timeout)\n", static_cast<long long>(r.timed_out),
          o.timeout_s);
  Appendf(&out, "failed           %lld", static_cast<long long>(r.failed));
  for (const auto& e : r.error_samples) Appendf(&out, "\n  e.g. %s", e.c_str());
  Appendf(&out, "\nresyncs          %lld  (retries %lld, conversations %lld, tokens sent %lld, HTTP requests %lld)\n",
              static_cast<long long>(r.resyncs), static_cast<long long>(r.retries),
              static_cast<long long>(r.conversations), static_cast<long long>(r.tokens_sent),
              static_cast<long long>(r.http_requests));
  Appendf(&out, "latency ms       p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f\n", Percentile(l, 50),
              Percentile(l, 90), Percentile(l, 99), l.empty() ? 0.0f : l.back(), mean);
  if (o.lookahead > 0) {
    const std::vector<float>& p = r.latency_plain_ms;
    Appendf(&out, "  devices without lookahead (half; the others ask %d per call): p50 %.2f  p90 %.2f  p99 %.2f\n",
            o.lookahead, Percentile(p, 50), Percentile(p, 90), Percentile(p, 99));
  }
  if (r.have_metrics) {
    if (r.next_count > 0) {
      Appendf(&out, "server           /tlr/v1/next mean %.2f ms in the server (queue %.2f ms before the first pass)\n",
                  1e3 * r.next_s_sum / r.next_count, r.queue_count > 0 ? 1e3 * r.queue_sum / r.queue_count : 0.0);
    }
    Appendf(&out, "server batches   %.0f forward passes (%.1f/s); sequences per pass mean %.2f; tokens per pass mean %.1f\n",
                r.passes, r.passes / r.wall_s, r.passes > 0 ? r.batch_seq_sum / r.passes : 0.0,
                r.batch_tok_count > 0 ? r.batch_tok_sum / r.batch_tok_count : 0.0);
    Appendf(&out, "  sequences  passes       %%\n");
    for (const LoadBucket& b : r.batch_sequences) {
      if (b.count <= 0) continue;
      Appendf(&out, "  %-9s %7.0f  %5.1f%%\n", BucketLabel(b).c_str(), b.count, r.passes > 0 ? 100 * b.count / r.passes : 0.0);
    }
    const std::string new_tokens = r.have_pacer ? Format(" (of new conversations %.0f)", r.new_tokens) : "";
    const std::string paced = r.have_pacer ? Format(" (new conversations paced %.0f)", r.server_paced) : "";
    Appendf(&out, "server tokens    prefill %.0f%s, copied from shared prefixes %.0f  decode %.0f  generated %.0f; server "
                "resyncs %.0f, evictions %.0f; KV in use after %.1f MiB\n",
                r.prefill, new_tokens.c_str(), r.copied, r.decode, r.generated, r.server_resyncs, r.evictions,
                r.kv_bytes / 1048576.0);
    Appendf(&out, "server shedding  refused %.0f at once%s; admitted but dropped past their deadline %.0f; answered past "
                "their deadline %.0f; dropped for a closed connection %.0f\n",
                r.server_refused, paced.c_str(), r.server_dropped, r.server_late, r.server_cancelled);
  }
  if (o.server_pid > 0) {
    Appendf(&out, "server memory    VmRSS %.1f -> %.1f MiB (peak sampled %.1f MiB), VmHWM %.1f MiB\n",
                Mib(r.mem_before.rss_kib), Mib(r.mem_after.rss_kib), Mib(r.rss_peak_kib), Mib(r.mem_after.hwm_kib));
  }
  return out;
}

json LoadRunJson(const LoadRun& r) {
  const std::vector<float>& l = r.latency_ms;
  json j = {{"sessions", r.sessions},
            {"wall_s", r.wall_s},
            {"calls", r.calls},
            {"calls_per_s", r.calls_per_s()},
            {"goodput_per_s", r.calls_per_s()},
            {"ramp_up_s", r.ramp_s},
            {"steady_calls", r.steady_calls},
            {"errors", r.errors},
            {"refused", r.refused},
            {"quota_refused", r.quota_refused},
            {"partial", r.partial},
            {"timed_out", r.timed_out},
            {"failed", r.failed},
            {"refused_ms", {{"p50", Percentile(r.refused_ms, 50)}, {"p99", Percentile(r.refused_ms, 99)},
                            {"max", r.refused_ms.empty() ? 0.0f : r.refused_ms.back()}}},
            {"retry_after_waited_s", r.waited_s},
            {"refusal_sample", r.refusal_sample},
            {"error", r.error},
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
              {"max", l.empty() ? 0.0f : l.back()}}},
            {"latency_plain_ms",
             {{"p50", Percentile(r.latency_plain_ms, 50)},
              {"p90", Percentile(r.latency_plain_ms, 90)},
              {"p99", Percentile(r.latency_plain_ms, 99)}}}};
  if (r.have_metrics) {
    json buckets = json::array();
    for (const LoadBucket& b : r.batch_sequences) {
      buckets.push_back({{"sequences", BucketLabel(b)}, {"le", std::isinf(b.hi) ? json("+Inf") : json(b.hi)},
                         {"passes", b.count}});
    }
    j["server"] = {{"forward_passes", r.passes},
                   {"batch_sequences", buckets},
                   {"batch_sequences_mean", r.passes > 0 ? r.batch_seq_sum / r.passes : 0.0},
                   {"batch_tokens_mean", r.batch_tok_count > 0 ? r.batch_tok_sum / r.batch_tok_count : 0.0},
                   {"prefill_tokens", r.prefill},
                   {"copied_prefix_tokens", r.copied},
                   {"decode_tokens", r.decode},
                   {"generated_tokens", r.generated},
                   {"resyncs", r.server_resyncs},
                   {"evictions", r.evictions},
                   {"refused", r.server_refused},
                   {"dropped_past_deadline", r.server_dropped},
                   {"answered_past_deadline", r.server_late},
                   {"dropped_client_gone", r.server_cancelled},
                   {"next_mean_ms", r.next_count > 0 ? 1e3 * r.next_s_sum / r.next_count : 0.0},
                   {"queue_mean_ms", r.queue_count > 0 ? 1e3 * r.queue_sum / r.queue_count : 0.0},
                   {"kv_bytes_after", r.kv_bytes}};
    if (r.have_pacer) {  // a server before the pacer has neither metric
      j["server"]["new_conversation_tokens"] = r.new_tokens;
      j["server"]["new_conversations_paced"] = r.server_paced;
    }
  }
  if (r.mem_after.rss_kib > 0) {
    j["server_memory_kib"] = {{"rss_before", r.mem_before.rss_kib},
                              {"rss_after", r.mem_after.rss_kib},
                              {"rss_peak_sampled", r.rss_peak_kib},
                              {"hwm", r.mem_after.hwm_kib}};
  }
  return j;
}

Expected<Tokenizer> LoadVocabulary(const std::string& path) {
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) return Tokenizer::FromHfJsonFile(path);
  auto f = GgufFile::Open(path);  // mapped: only the tokenizer metadata is read
  if (!f.ok()) return f.status();
  auto t = Tokenizer::FromGguf(*f);
  if (!t.ok()) return t.status().WithPrefix("'" + path + "'");
  return t;
}


}  // namespace tlr
