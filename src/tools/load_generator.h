// Load generator for `tlr serve` (tools layer; `tlr loadtest` is its command). N simulated
// devices, one thread and one RemoteLlm each (the real device client: sessions, delta sync,
// retries), talk to one server for a fixed time. A device's SLM is simulated: between routed
// calls it "generates" gen_tokens random ids (taking slm_ms each; by default no time, so devices
// call back to back: the server's worst case), which the next call appends together with the
// LLM's previous token; past max_context the device starts a new conversation (a new random
// prompt from base 0, in the same session). A call the server refuses (429/503, overloaded)
// leaves the device its SLM's token, and the device does not call again before the server's
// Retry-After (with jitter), as real devices do; after any other failure it waits out the
// backend's fail-fast window. A run reports goodput (calls answered, which is within the device's
// timeout, per second), refused, timed-out and otherwise failed calls apart (one per call),
// client latency percentiles, the server's batch-size distribution (from /metrics, scraped
// before and after) and, for a server on this machine (server_pid), its memory.
//
// Thread-safety: RunLoad may be called from any thread; it starts and joins its own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "util/status.h"

namespace tlr {

struct LoadOptions {
  std::string server, api_key;
  // "tlr": the native session protocol (delta sync); "openai": /v1/completions with the whole
  // context as token ids each call (the server's prompt cache decides what is prefilled).
  std::string backend = "tlr";
  int prompt_tokens = 64, gen_tokens = 8;
  // Tokens every conversation of every device begins with before its own prompt_tokens (an
  // app's system prompt: the same random ids for all).
  int shared_prefix = 0;
  // Lookahead tokens asked with each call by every other device (odd ones); the rest ask none,
  // and their latency is reported apart: what others' lookahead costs them.
  int lookahead = 0;
  int64_t max_context = 1024;
  double duration_s = 60, timeout_s = 2, slm_ms = 0, sim_rtt_ms = 0;
  // Devices start evenly spread over the first ramp_s seconds (at most half the run), and
  // calls/s counts the calls that end after it: a fleet arriving at once is a prefill wave
  // (32 x 64 prompt tokens took a 1.5B Q8_0 server on 2 cores ~15 s, past the devices'
  // 10 s timeout: they all fell back, their contexts grew, and the run never reached the
  // steady state it is meant to measure).
  double ramp_s = 0;
  int server_pid = 0;  // > 0: sample this process's memory from /proc
  // Progress lines (every ~5 s) and warnings; null: silent.
  std::function<void(const std::string&)> log;
};

// One scrape of /metrics: "name{labels}" -> value, for every sample line.
using MetricsScrape = std::map<std::string, double>;

// Parses Prometheus text (comments and malformed lines are skipped).
MetricsScrape ParseMetricsText(const std::string& text);

// A bucket of a histogram over a run: (lo, hi], hi = inf for the last.
struct LoadBucket {
  double lo = 0, hi = 0;
  double count = 0;
};

// Per-bucket counts of an unlabelled histogram between two scrapes (Prometheus buckets are
// cumulative; these are not).
std::vector<LoadBucket> HistogramDelta(const MetricsScrape& before, const MetricsScrape& after, const std::string& name);

// "1", "3-4", "129+" for integer-valued (lo, hi] buckets.
std::string BucketLabel(const LoadBucket& b);

// The p-th percentile (0..100) of sorted values, nearest rank; 0 for none.
float Percentile(const std::vector<float>& sorted, double p);

// VmRSS / VmHWM of a process, in KiB (0 when unreadable).
struct ProcMemory {
  int64_t rss_kib = 0, hwm_kib = 0;
};
ProcMemory ReadProcMemory(int pid);

struct LoadRun {
  int sessions = 0;
  std::string error;  // the run could not start (e.g. the server took no connections); all else 0
  double wall_s = 0;
  // calls: answered; errors: failed calls of every kind, which are refused (429/503: the server
  // shed them at once), quota_refused (429 session_quota: the client holds as many sessions as
  // the server's --session-quota allows; not overload), timed_out (no answer within the device's
  // timeout) and failed (the rest).
  int64_t calls = 0, errors = 0, refused = 0, quota_refused = 0, partial = 0, timed_out = 0, failed = 0;
  int64_t conversations = 0, resyncs = 0, retries = 0, http_requests = 0, tokens_sent = 0;
  double waited_s = 0;       // devices' time spent waiting out Retry-After (summed)
  std::vector<float> refused_ms;  // sorted: how long a refusal took to arrive
  double ramp_s = 0;         // the ramp-up used
  int64_t steady_calls = 0;  // successful calls that ended after it
  std::vector<std::string> error_samples;  // of timeouts and failures
  std::string refusal_sample, quota_sample;
  std::vector<float> latency_ms;  // sorted
  std::vector<float> latency_plain_ms;  // sorted: of devices that ask no lookahead
  bool have_metrics = false;
  std::vector<LoadBucket> batch_sequences;
  double passes = 0, batch_seq_sum = 0, batch_tok_sum = 0, batch_tok_count = 0, prefill = 0, decode = 0,
         generated = 0, server_resyncs = 0, evictions = 0, server_refused = 0, server_dropped = 0, server_late = 0, server_cancelled = 0, queue_sum = 0, queue_count = 0, next_s_sum = 0,
         next_count = 0, kv_bytes = 0, new_tokens = 0, server_paced = 0, copied = 0;
  bool have_pacer = false;  // the server exports the pacer's metrics (new_tokens, server_paced)
  ProcMemory mem_before, mem_after;
  int64_t rss_peak_kib = 0;  // sampled during the run
  // Goodput: calls answered (within the device's timeout) per second after the ramp-up.
  double calls_per_s() const { return wall_s > ramp_s ? steady_calls / (wall_s - ramp_s) : 0; }
};

// Connects `sessions` devices (vocab must be the server model's), runs them for
// opts.duration_s and returns what happened. Errors: the server is unreachable or has another
// vocabulary; failed calls during the run are counted, not returned.
Expected<LoadRun> RunLoad(const LoadOptions& opts, const Tokenizer& vocab, int sessions, uint64_t seed);

// The human-readable report of one run (several lines, ending in a newline).
std::string FormatLoadRun(const LoadRun& r, const LoadOptions& opts);

// Every number of one run, for --json.
nlohmann::json LoadRunJson(const LoadRun& r);

// The vocabulary of a GGUF (only its tokenizer metadata is read) or a tokenizer.json.
Expected<Tokenizer> LoadVocabulary(const std::string& path);

}  // namespace tlr
