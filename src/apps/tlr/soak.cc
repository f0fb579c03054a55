// Soak (`make soak`, not in `make test`): SOAK_DEVICES real devices (default 64; the demo SLM,
// a random router, the pipelined decoder over the native protocol) answer question after
// question for SOAK_SECONDS (default 600) against one `tlr serve` whose KV budget holds only
// part of their sessions (so sessions are evicted and resync all the time), while another
// thread sends bad requests (malformed JSON, deep nesting, wrong types, tokens outside the
// vocabulary, unknown sessions, paths that are not UTF-8, oversized and truncated bodies).
// Checked: the server never dies and answers every bad request with a 4xx; every answer equals
// the in-process answer in which the calls that fell back fail (none should); the server's RSS,
// sampled over the run and printed as a curve, is flat after the warm-up (the last quarter's
// mean at most 5% or 4 MiB above the second quarter's). The devices are real decoders, not
// `tlr loadtest`'s simulated ones (whose random tokens have no reference answer to compare
// with); the memory sampling and the /metrics parsing are the load generator's.
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include <httplib.h>

#include "apps/tlr/child_process.h"
#include "apps/tlr/device_run.h"
#include "apps/tlr/raw_http.h"
#include "device/remote/remote_llm.h"
#include "routing/qa.h"
#include "tools/load_generator.h"

namespace tlr {
namespace {

double EnvOr(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : fallback;
}

// Bad requests, each with the status class it must get (4 = any 4xx).
std::vector<std::string> BadRequests() {
  const std::string next = "/tlr/v1/next";
  return {
      Post(next, "{\"session\": \"s-0\", \"append\": [1, 2"),                       // truncated JSON
      Post(next, Nested("[", "]", 100000)),                                          // deep nesting
      Post(next, "{\"session\": 5, \"append\": [1]}"),                                 // wrong type
      Post(next, "{\"session\": \"s-00000000000000000000000000000000\", \"append\": [1]}"),  // unknown
      Post(next, "{\"session\": \"s-0\", \"append\": [99999999]}"),                    // outside the vocabulary
      Post(next, "{\"session\": \"s-0\", \"append\": [], \"n\": -3}"),                 // out of range
      Post("/v1/completions", "{\"prompt\": " + Nested("[", "]", 50000) + "}"),
      Post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": 7}]}]}"),
      Get("/%FF%FE/\xC3"),                                                           // not UTF-8
      "DELETE /tlr/v1/sessions/s-nonexistent HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
      "POST /tlr/v1/next HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n{}",  // over --max-body
      "POST /tlr/v1/next HTTP/1.1\r\nHost: x\r\n\r\n",                                // no length
  };
}

struct RssSample {
  double t_s = 0;
  int64_t rss_kib = 0;
  double sessions = 0, evictions = 0;
};

TEST(Soak, DevicesAndBadRequestsAgainstServe) {
  const double seconds = EnvOr("SOAK_SECONDS", 600);
  const int n_devices = static_cast<int>(EnvOr("SOAK_DEVICES", 64));
  auto slm = Model::Load(kDemo + "slm.gguf");
  auto llm = Model::Load(kDemo + "llm.gguf");
  ASSERT_TRUE(slm.ok() && llm.ok());
  auto rows = LoadQaJsonl(kDemo + "test.jsonl");
  ASSERT_TRUE(rows.ok());
  const size_t n_questions = std::min<size_t>(rows->size(), 48);
  auto Prompt = [&](size_t q) { return (*slm)->tokenizer().Encode(QaPrompt((*rows)[q])); };

  // A KV budget of 2 MiB: the demo LLM's cache takes 2 KiB per position (4 layers, 2 KV heads
  // of 32, K and V in f32), so 1024 positions, about fifteen answers' worth: the other
  // sessions are evicted and resync.
  ChildProcess server;
  std::string url;
  ASSERT_TRUE(server.Start(kTlrBinary, {"serve", "-m", kDemo + "llm.gguf", "--port", "0", "-t", "1",
                                        "--kv-budget", "2M", "--session-ttl", "60"},
                           &url));
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  std::printf("soak: %d devices for %.0f s against %s (pid %d), KV budget 2 MiB\n", n_devices, seconds, url.c_str(),
              server.pid());

  // The in-process answers, computed once per question and set of failed positions.
  std::mutex ref_mu;
  std::map<std::pair<size_t, std::set<size_t>>, std::vector<int32_t>> refs;
  DecodeOptions d;
  d.threshold = 0.8f;
  d.pipeline.depth = 4;
  d.pipeline.lookahead = 2;
  d.max_tokens = 40;
  d.sim_slm_s = 0.05;  // a device's pace (a 0.5B-class SLM on a phone); the server sees 64 of them
  auto Reference = [&](size_t q, const std::set<size_t>& failed) {
    {
      std::lock_guard<std::mutex> l(ref_mu);
      auto it = refs.find({q, failed});
      if (it != refs.end()) return it->second;
    }
    std::vector<int32_t> ids = ReplayInProcess(**slm, **llm, Prompt(q), d, failed).ids;
    std::lock_guard<std::mutex> l(ref_mu);
    return refs.emplace(std::make_pair(q, failed), ids).first->second;
  };

  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::atomic<int64_t> answers{0}, tokens{0}, llm_tokens{0}, fallbacks{0}, mismatches{0}, bad_sent{0}, bad_wrong{0},
      resyncs{0};
  std::atomic<bool> dead{false};

  std::vector<std::thread> threads;
  for (int i = 0; i < n_devices; ++i) {
    threads.emplace_back([&, i] {
      RemoteOptions o;
      o.http.url = url;
      o.http.timeout_s = 30;
      auto remote = RemoteLlm::Connect(o, (*slm)->tokenizer());
      if (!remote.ok()) {
        ADD_FAILURE() << "device " << i << ": " << remote.status().message();
        return;
      }
      for (size_t k = 0; Clock::now() < end && !dead; ++k) {
        const size_t q = (static_cast<size_t>(i) * 7 + k) % n_questions;
        DeviceRun run = RunDevice(**slm, remote->get(), Prompt(q), d);
        (*remote)->Reset();
        ++answers;
        tokens += static_cast<int64_t>(run.ids.size());
        llm_tokens += run.count(TokenSource::kLlm);
        fallbacks += static_cast<int64_t>(run.failed.size());
        if (run.ids != Reference(q, run.failed)) {
          if (mismatches++ < 5) ADD_FAILURE() << "device " << i << ", question " << q << ": not the reference answer";
        }
      }
      resyncs += (*remote)->stats().resyncs;
    });
  }
  // Bad requests, one after the other, each must get a 4xx.
  threads.emplace_back([&] {
    const std::vector<std::string> bad = BadRequests();
    for (size_t k = 0; Clock::now() < end && !dead; ++k) {
      const RawResponse r = Send(port, bad[k % bad.size()]);
      ++bad_sent;
      if (r.status < 400 || r.status >= 500) {
        if (bad_wrong++ < 5) ADD_FAILURE() << "bad request " << k % bad.size() << " got " << r.status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  // The server's RSS every interval, and whether it is alive.
  std::vector<RssSample> curve;
  const double interval = std::max(1.0, seconds / 40);
  int status = 0;
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    if (server.Exited(&status)) {
      dead = true;
      break;
    }
    if (Clock::now() >= end) break;  // the devices are stopping: not the steady state
    RssSample s;
    s.t_s = std::chrono::duration<double>(Clock::now() - start).count();
    s.rss_kib = ReadProcMemory(server.pid()).rss_kib;
    httplib::Client c(url);
    c.set_connection_timeout(2);
    c.set_read_timeout(5);
    if (auto res = c.Get("/metrics"); res && res->status == 200) {
      const MetricsScrape m = ParseMetricsText(res->body);
      s.sessions = m.count("tlr_sessions") ? m.at("tlr_sessions") : 0;
      s.evictions = m.count("tlr_evictions_total") ? m.at("tlr_evictions_total") : 0;
    }
    curve.push_back(s);
    std::printf("  t=%6.0f s  rss %7.1f MiB  sessions %4.0f  evictions %7.0f  answers %lld\n", s.t_s,
                s.rss_kib / 1024.0, s.sessions, s.evictions, static_cast<long long>(answers.load()));
    std::fflush(stdout);
  }
  for (auto& t : threads) t.join();
  ASSERT_FALSE(dead) << "the server died: "
                     << (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                             : "exit " + std::to_string(WEXITSTATUS(status)));

  // The curve as bars, then the flatness check.
  int64_t top = 1;
  for (const RssSample& s : curve) top = std::max(top, s.rss_kib);
  std::printf("server RSS over the run (MiB):\n");
  for (const RssSample& s : curve) {
    std::printf("  %6.0f s %7.1f %s\n", s.t_s, s.rss_kib / 1024.0,
                std::string(static_cast<size_t>(60 * s.rss_kib / top), '#').c_str());
  }
  std::printf("soak: %lld answers (%lld tokens, %lld from the LLM, %lld fallbacks), %lld not the reference; "
              "%lld resyncs, %.0f evictions; %lld bad requests, %lld without a 4xx; %zu reference answers computed\n",
              static_cast<long long>(answers.load()), static_cast<long long>(tokens.load()),
              static_cast<long long>(llm_tokens.load()), static_cast<long long>(fallbacks.load()),
              static_cast<long long>(mismatches.load()), static_cast<long long>(resyncs.load()),
              curve.empty() ? 0.0 : curve.back().evictions, static_cast<long long>(bad_sent.load()),
              static_cast<long long>(bad_wrong.load()), refs.size());
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(bad_wrong, 0);
  EXPECT_GT(answers, n_devices);
  ASSERT_GE(curve.size(), 8u) << "too few RSS samples";
  auto Mean = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t i = from; i < to; ++i) sum += static_cast<double>(curve[i].rss_kib);
    return sum / static_cast<double>(to - from);
  };
  const size_t n = curve.size();
  const double warm = Mean(n / 4, n / 2), last = Mean(3 * n / 4, n);
  std::printf("RSS after warm-up (2nd quarter) %.1f MiB, last quarter %.1f MiB (%+.1f%%)\n", warm / 1024,
              last / 1024, 100 * (last - warm) / warm);
  EXPECT_LE(last - warm, std::max(4096.0, 0.05 * warm)) << "RSS still growing after the warm-up";
}

}  // namespace
}  // namespace tlr
