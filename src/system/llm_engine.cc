// LlmEngine: sessions, delta ingest and continuous batching (see llm_engine.h).
#include "system/llm_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "ops/thread_pool.h"
#include "system/protocol.h"

namespace tlr {

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string NewSessionId() {
  static std::mutex mu;
  static std::random_device rd;
  std::lock_guard<std::mutex> l(mu);
  const uint64_t a = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  const uint64_t b = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return "s-" + HashHex(a) + HashHex(b);
}

EngineResult Fail(EngineCode code, std::string message) {
  EngineResult r;
  r.code = code;
  r.message = std::move(message);
  return r;
}

// Log-softmax of the chosen token and, when asked, the top k.
void LogProbs(const float* logits, int64_t n, int32_t tok, int k, float* lp, std::vector<TopLogprob>* top) {
  const float lse = LogSumExp(logits, n);
  *lp = logits[tok] - lse;
  top->clear();
  if (k <= 0) return;
  std::vector<int32_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
  k = static_cast<int>(std::min<int64_t>(k, n));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int i = 0; i < k; ++i) top->push_back({idx[i], logits[idx[i]] - lse});
}

}  // namespace

struct LlmEngine::Session {
  std::string id;
  std::mutex mu;                       // held by the call using the session
  std::unique_ptr<KvCache> cache;      // null until used or after eviction
  std::vector<int32_t> tokens;         // what the cache holds
  std::atomic<int64_t> high_water{0};  // positions ever written since (re)creation
  Clock::time_point last_used = Clock::now();
  int64_t version = 0;                 // counts the calls that changed what the session holds
  std::deque<std::pair<std::string, EngineReply>> recent;  // request_id -> reply
};

struct LlmEngine::Job {
  Session* s = nullptr;
  std::vector<int32_t> feed;    // tokens to ingest
  size_t fed = 0;
  int remaining = 0;            // tokens still to generate
  bool decoding = false;
  SamplerParams sampling;
  std::unique_ptr<Sampler> sampler;
  int top_logprobs = 0;
  const TokenCallback* on_token = nullptr;
  std::vector<float> logits;
  size_t take = 0;              // tokens in the current pass
  EngineReply reply;
  std::string error;
  Clock::time_point enqueued, started;
  bool started_set = false;
  bool done = false;
  bool shutdown = false;       // failed because the server stops or is overloaded (503)
  bool has_deadline = false;
  Clock::time_point deadline;
  std::mutex mu;
  std::condition_variable cv;
};

int HttpStatusOf(EngineCode code) {
  switch (code) {
    case EngineCode::kOk: return 200;
    case EngineCode::kBadRequest: return 400;
    case EngineCode::kNotFound: return 404;
    case EngineCode::kConflict: return 409;
    case EngineCode::kOverloaded: return 503;
    case EngineCode::kInternal: return 500;
  }
  return 500;
}

std::string_view EngineCodeName(EngineCode code) {
  switch (code) {
    case EngineCode::kOk: return "ok";
    case EngineCode::kBadRequest: return "invalid_request";
    case EngineCode::kNotFound: return "unknown_session";
    case EngineCode::kConflict: return "resync";
    case EngineCode::kOverloaded: return "overloaded";
    case EngineCode::kInternal: return "internal";
  }
  return "internal";
}

LlmEngine::LlmEngine(const Model& model, ThreadPool* pool, const EngineLimits& limits, Metrics* metrics)
    : model_(model), pool_(pool), limits_(limits), metrics_(metrics) {
  const ModelConfig& c = model.config();
  bytes_per_token_ = KvCache::BytesPerPosition(c, model.kv_type());
  for (int i = 0; i < limits_.prompt_cache_slots; ++i) {
    auto s = std::make_shared<Session>();
    s->id = "slot-" + std::to_string(i);
    slots_.push_back(std::move(s));
  }
  if (metrics_) {
    metrics_->DeclareCounter("tlr_prefill_tokens_total", "Tokens ingested from requests (delta prefill)");
    metrics_->DeclareCounter("tlr_decode_tokens_total", "Generated tokens fed back into a KV cache");
    metrics_->DeclareCounter("tlr_generated_tokens_total", "Tokens generated");
    metrics_->DeclareCounter("tlr_evictions_total", "Session KV caches evicted under the KV budget");
    metrics_->DeclareCounter("tlr_sessions_expired_total", "Sessions deleted after the idle TTL");
    metrics_->DeclareCounter("tlr_resyncs_total", "Next-token calls answered with a conflict (device resends)");
    metrics_->DeclareCounter("tlr_forward_passes_total", "Batched forward passes");
    metrics_->DeclareCounter("tlr_calls_expired_total", "Calls dropped unstarted after their timeout_ms (overload)");
    metrics_->DeclareCounter("tlr_lookahead_tokens_total", "Lookahead tokens generated for devices' drafts (native protocol)");
    metrics_->DeclareCounter("tlr_rewound_tokens_total", "Tokens dropped from sessions by calls with a smaller base (pipelined or rewinding devices)");
    metrics_->DeclareGauge("tlr_sessions", "Open sessions");
    metrics_->DeclareGauge("tlr_kv_bytes", "KV cache bytes in use (sessions and prompt cache)");
    metrics_->DeclareGauge("tlr_kv_budget_bytes", "KV cache budget");
    metrics_->DeclareHistogram("tlr_batch_sequences", "Sequences per forward pass",
                               {1, 2, 4, 8, 16, 32, 64, 128});
    metrics_->DeclareHistogram("tlr_batch_tokens", "Tokens per forward pass", {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
    metrics_->DeclareHistogram("tlr_queue_seconds", "Time a call waited before its first pass",
                               {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
    for (const char* c : {"tlr_prefill_tokens_total", "tlr_decode_tokens_total", "tlr_generated_tokens_total",
                          "tlr_evictions_total", "tlr_sessions_expired_total", "tlr_resyncs_total", "tlr_forward_passes_total", "tlr_calls_expired_total",
                          "tlr_lookahead_tokens_total", "tlr_rewound_tokens_total"}) {
      metrics_->Add(c, 0);  // present from the start
    }
    metrics_->Set("tlr_kv_budget_bytes", static_cast<double>(limits_.kv_budget_bytes));
    metrics_->Set("tlr_sessions", 0);
    metrics_->Set("tlr_kv_bytes", 0);
  }
  worker_ = std::thread([this] { WorkerLoop(); });
}

LlmEngine::~LlmEngine() {
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  worker_.join();
}

int64_t LlmEngine::session_count() const {
  std::lock_guard<std::mutex> l(store_mu_);
  return static_cast<int64_t>(sessions_.size());
}

bool LlmEngine::HasSession(const std::string& id) const {
  std::lock_guard<std::mutex> l(store_mu_);
  return sessions_.count(id) > 0;
}

uint64_t LlmEngine::kv_bytes() const {
  std::lock_guard<std::mutex> l(store_mu_);
  return KvBytesLocked();
}

uint64_t LlmEngine::KvBytesLocked() const {
  uint64_t n = 0;
  for (const auto& [id, s] : sessions_) n += s->high_water.load();
  for (const auto& s : slots_) n += s->high_water.load();
  for (const auto& s : temps_) n += s->high_water.load();
  return n * bytes_per_token_;
}

void LlmEngine::PublishGauges() {
  if (!metrics_) return;
  metrics_->Set("tlr_sessions", static_cast<double>(session_count()));
  metrics_->Set("tlr_kv_bytes", static_cast<double>(kv_bytes()));
}

EngineResult LlmEngine::CreateSession(SessionInfo* info) {
  SweepExpired();
  auto s = std::make_shared<Session>();
  s->id = NewSessionId();
  {
    std::lock_guard<std::mutex> l(store_mu_);
    if (static_cast<int64_t>(sessions_.size()) >= limits_.max_sessions) {
      return Fail(EngineCode::kOverloaded, "the server holds its maximum of " +
                                               std::to_string(limits_.max_sessions) +
                                               " sessions; delete unused ones or retry later");
    }
    sessions_[s->id] = s;
  }
  info->id = s->id;
  info->max_context = limits_.max_context;
  info->max_tokens_per_call = limits_.max_tokens_per_call;
  info->ttl_s = limits_.session_ttl_s;
  PublishGauges();
  return {};
}

bool LlmEngine::DeleteSession(const std::string& id) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> l(store_mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return false;
    s = it->second;
    sessions_.erase(it);
  }
  // A call in flight keeps its shared_ptr; the memory goes when it finishes.
  PublishGauges();
  return true;
}

void LlmEngine::EvictCache(Session* s) {
  s->cache.reset();
  s->tokens.clear();
  s->high_water = 0;
}

void LlmEngine::SweepExpired() {
  std::vector<std::shared_ptr<Session>> gone;
  {
    std::lock_guard<std::mutex> l(store_mu_);
    const auto now = Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      Session* s = it->second.get();
      std::unique_lock<std::mutex> sl(s->mu, std::try_to_lock);
      if (sl.owns_lock() && std::chrono::duration<double>(now - s->last_used).count() > limits_.session_ttl_s) {
        sl.unlock();
        gone.push_back(it->second);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (!gone.empty()) {
    if (metrics_) metrics_->Add("tlr_sessions_expired_total", static_cast<double>(gone.size()));
    PublishGauges();
  }
}

// Evicts idle caches (least recently used first) until `self` can grow to need_positions.
bool LlmEngine::MakeRoom(Session* self, int64_t need_positions, std::string* why) {
  const int64_t grow = std::max<int64_t>(0, need_positions - self->high_water.load());
  if (grow == 0) return true;
  std::lock_guard<std::mutex> l(store_mu_);
  const uint64_t want = static_cast<uint64_t>(grow) * bytes_per_token_;
  if (want > limits_.kv_budget_bytes) {
    *why = "the call needs more KV memory than the whole budget (--kv-budget)";
    return false;
  }
  uint64_t now = KvBytesLocked();
  while (now + want > limits_.kv_budget_bytes) {
    // Least recently used idle session or slot holding memory.
    std::vector<Session*> all;
    for (const auto& [id, s] : sessions_) all.push_back(s.get());
    for (const auto& s : slots_) all.push_back(s.get());
    Session* victim = nullptr;
    std::unique_lock<std::mutex> victim_lock;
    for (Session* s : all) {
      if (s == self || s->high_water.load() == 0) continue;
      if (victim && s->last_used >= victim->last_used) continue;
      std::unique_lock<std::mutex> sl(s->mu, std::try_to_lock);
      if (!sl.owns_lock()) continue;
      victim = s;
      victim_lock = std::move(sl);
    }
    if (!victim) {
      *why = "the KV budget is in use by calls in progress; retry shortly";
      return false;
    }
    EvictCache(victim);
    if (metrics_) metrics_->Add("tlr_evictions_total", 1);
    now = KvBytesLocked();
  }
  return true;
}

EngineResult LlmEngine::Next(const NextRequest& req) {
  const auto arrived = Clock::now();
  std::shared_ptr<Session> sp;
  {
    std::lock_guard<std::mutex> l(store_mu_);
    auto it = sessions_.find(req.session);
    if (it != sessions_.end()) sp = it->second;
  }
  if (!sp) return Fail(EngineCode::kNotFound, "unknown session '" + req.session + "' (expired, deleted or the server restarted): create a new one");
  Session* s = sp.get();
  std::lock_guard<std::mutex> sl(s->mu);
  s->last_used = Clock::now();
  if (!req.request_id.empty()) {
    for (const auto& [rid, reply] : s->recent) {
      if (rid == req.request_id) {
        EngineResult r;
        r.reply = reply;
        r.reply.replayed = true;
        return r;
      }
    }
  }
  if (req.append.empty()) return Fail(EngineCode::kBadRequest, "'append' must hold at least one token");
  if (req.n < 1 || req.n > limits_.max_tokens_per_call) {
    return Fail(EngineCode::kBadRequest, "'n' must be in 1.." + std::to_string(limits_.max_tokens_per_call));
  }
  const int64_t V = model_.config().n_vocab;
  for (int32_t t : req.append) {
    if (t < 0 || t >= V) return Fail(EngineCode::kBadRequest, "token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
  }
  if (req.top_logprobs < 0 || req.top_logprobs > 20) return Fail(EngineCode::kBadRequest, "'top_logprobs' must be in 0..20");
  const int64_t held = static_cast<int64_t>(s->tokens.size());
  if (req.base < 0 || req.base > held ||
      TokenPrefixHash(std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(req.base))) != req.prefix_hash) {
    if (metrics_) metrics_->Add("tlr_resyncs_total", 1);
    EngineResult r = Fail(EngineCode::kConflict, "the session holds " + std::to_string(held) +
                                                     " tokens that do not match base " + std::to_string(req.base) +
                                                     " and its prefix hash; resend from what it holds");
    r.held = held;
    r.held_hash = TokenPrefixHash(s->tokens);
    r.version = s->version;
    return r;
  }
  if (req.lookahead < 0) return Fail(EngineCode::kBadRequest, "'lookahead' must not be negative");
  // The session ends up holding base + append + n - 1 tokens (the last one is not fed back).
  const int64_t need = req.base + static_cast<int64_t>(req.append.size()) + req.n - 1;
  if (need > limits_.max_context) {
    return Fail(EngineCode::kBadRequest, "context of " + std::to_string(need + 1) + " tokens (base + append + n) exceeds the server's limit of " + std::to_string(limits_.max_context) + " + 1");
  }
  // Lookahead is a hint: as much as the per-call and context limits leave.
  const int lookahead = static_cast<int>(std::max<int64_t>(
      0, std::min<int64_t>({req.lookahead, limits_.max_tokens_per_call - req.n, limits_.max_context - need})));
  if (metrics_ && held > req.base) metrics_->Add("tlr_rewound_tokens_total", static_cast<double>(held - req.base));
  if (s->cache) s->cache->Truncate(req.base);
  s->tokens.resize(static_cast<size_t>(req.base));
  ++s->version;
  // Time already spent waiting for the session (an earlier call of the same device) counts.
  const double left = req.timeout_s > 0 ? std::max(1e-6, req.timeout_s - Since(arrived)) : 0;
  EngineResult r = Run(s, req.append, req.n + lookahead, req.sampling, req.top_logprobs, nullptr, left);
  s->last_used = Clock::now();
  if (r.ok()) {
    // The first n tokens answer the call; the rest is the lookahead draft.
    EngineReply& rep = r.reply;
    if (static_cast<int>(rep.tokens.size()) > req.n) {
      rep.lookahead.assign(rep.tokens.begin() + req.n, rep.tokens.end());
      rep.tokens.resize(static_cast<size_t>(req.n));
      rep.logprobs.resize(std::min(rep.logprobs.size(), static_cast<size_t>(req.n)));
      if (rep.top.size() > static_cast<size_t>(req.n)) rep.top.resize(static_cast<size_t>(req.n));
      if (metrics_) metrics_->Add("tlr_lookahead_tokens_total", static_cast<double>(rep.lookahead.size()));
    }
    rep.version = s->version;
  }
  if (r.ok() && !req.request_id.empty()) {
    s->recent.emplace_back(req.request_id, r.reply);
    while (static_cast<int>(s->recent.size()) > limits_.recent_replies) s->recent.pop_front();
  }
  return r;
}

EngineResult LlmEngine::Complete(std::span<const int32_t> prompt, int max_tokens, const SamplerParams& sampling,
                                 int top_logprobs, const TokenCallback& on_token) {
  if (prompt.empty()) return Fail(EngineCode::kBadRequest, "the prompt is empty");
  if (max_tokens < 1 || max_tokens > limits_.max_tokens_per_call) {
    return Fail(EngineCode::kBadRequest, "'max_tokens' must be in 1.." + std::to_string(limits_.max_tokens_per_call));
  }
  const int64_t V = model_.config().n_vocab;
  for (int32_t t : prompt) {
    if (t < 0 || t >= V) return Fail(EngineCode::kBadRequest, "token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
  }
  if (static_cast<int64_t>(prompt.size()) + max_tokens - 1 > limits_.max_context) {
    return Fail(EngineCode::kBadRequest, "prompt of " + std::to_string(prompt.size()) + " tokens + max_tokens " + std::to_string(max_tokens) + " exceeds the server's context limit of " + std::to_string(limits_.max_context));
  }
  // The free slot with the longest common prefix (else a temporary cache).
  std::shared_ptr<Session> best;
  std::unique_lock<std::mutex> best_lock;
  size_t best_common = 0;
  {
    std::lock_guard<std::mutex> l(store_mu_);
    for (const auto& s : slots_) {
      std::unique_lock<std::mutex> sl(s->mu, std::try_to_lock);
      if (!sl.owns_lock()) continue;
      size_t c = 0;
      while (c < s->tokens.size() && c < prompt.size() && s->tokens[c] == prompt[c]) ++c;
      if (!best || c > best_common || (c == best_common && s->last_used < best->last_used)) {
        best = s;
        best_lock = std::move(sl);
        best_common = c;
      }
    }
  }
  const bool temporary = !best;
  if (temporary) {
    // Every slot is busy: a cache for this call only, counted in the budget while it lives.
    best = std::make_shared<Session>();
    std::lock_guard<std::mutex> l(store_mu_);
    temps_.push_back(best);
  }
  Session* s = best.get();
  s->last_used = Clock::now();
  const size_t common = std::min(best_common, prompt.size() - 1);
  if (s->cache) s->cache->Truncate(static_cast<int64_t>(common));
  s->tokens.resize(common);
  std::vector<int32_t> feed(prompt.begin() + static_cast<std::ptrdiff_t>(common), prompt.end());
  EngineResult r = Run(s, std::move(feed), max_tokens, sampling, top_logprobs, on_token);
  s->last_used = Clock::now();
  if (temporary) {
    std::lock_guard<std::mutex> l(store_mu_);
    temps_.erase(std::find(temps_.begin(), temps_.end(), best));
  }
  return r;
}

// Runs one call on a locked session through the batch loop and waits for it.
EngineResult LlmEngine::Run(Session* s, std::vector<int32_t> feed, int n, const SamplerParams& sampling,
                            int top_logprobs, const TokenCallback& on_token, double deadline_s) {
  Status valid = sampling.Validate();
  if (!valid.ok()) return Fail(EngineCode::kBadRequest, valid.message());
  std::string why;
  const int64_t need = static_cast<int64_t>(s->tokens.size() + feed.size()) + n - 1;
  if (!MakeRoom(s, need, &why)) return Fail(EngineCode::kOverloaded, why);
  if (!s->cache) {
    auto c = model_.NewCache(limits_.max_context);
    if (!c.ok()) return Fail(EngineCode::kOverloaded, c.status().message());
    s->cache = std::make_unique<KvCache>(std::move(c).value());
  }
  Job job;
  job.s = s;
  job.feed = std::move(feed);
  job.remaining = n;
  job.sampling = sampling;
  if (sampling.temperature > 0) {
    // Counter-based draws (keyed by seed and position): a context gets the same tokens
    // whichever calls came before it, and the same as the device's SLM would draw there.
    job.sampler = std::make_unique<Sampler>(sampling, static_cast<int32_t>(model_.config().n_vocab));
  }
  job.top_logprobs = top_logprobs;
  job.on_token = on_token ? &on_token : nullptr;
  job.logits.resize(static_cast<size_t>(model_.config().n_vocab));
  job.reply.prefilled = static_cast<int64_t>(job.feed.size());
  job.enqueued = Clock::now();
  if (deadline_s > 0) {
    job.has_deadline = true;
    job.deadline = job.enqueued + std::chrono::microseconds(static_cast<int64_t>(deadline_s * 1e6));
  }
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (stop_) return Fail(EngineCode::kOverloaded, "the server is shutting down");
    queue_.push_back(&job);
  }
  queue_cv_.notify_one();
  std::unique_lock<std::mutex> jl(job.mu);
  job.cv.wait(jl, [&] { return job.done; });
  PublishGauges();
  if (!job.error.empty()) {
    // A started call may have partly written the cache: forget it (the device resyncs).
    if (job.started_set) EvictCache(s);
    return Fail(job.shutdown ? EngineCode::kOverloaded : EngineCode::kInternal, job.error);
  }
  EngineResult r;
  r.reply = std::move(job.reply);
  r.reply.position = static_cast<int64_t>(s->tokens.size());
  return r;
}

void LlmEngine::WorkerLoop() {
  ctx_ = std::make_unique<ForwardContext>(pool_);  // scratch reused by every pass
  std::vector<Job*> active;
  auto last_sweep = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> l(queue_mu_);
      queue_cv_.wait_for(l, std::chrono::seconds(1), [&] { return stop_ || !queue_.empty() || !active.empty(); });
      if (stop_) {
        for (Job* j : queue_) active.push_back(j);
        queue_.clear();
        l.unlock();
        for (Job* j : active) {
          std::lock_guard<std::mutex> jl(j->mu);
          j->error = "the server is shutting down";
          j->shutdown = true;
          j->done = true;
          j->cv.notify_all();
        }
        return;
      }
      while (!queue_.empty()) {
        active.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    if (!active.empty()) Step(active);
    if (Since(last_sweep) > 5.0) {
      SweepExpired();
      last_sweep = Clock::now();
    }
  }
}

void LlmEngine::Step(std::vector<Job*>& active) {
  // Calls whose device has given up before their first pass are dropped, not computed.
  const auto now = Clock::now();
  for (size_t i = 0; i < active.size();) {
    Job* j = active[i];
    if (j->started_set || !j->has_deadline || now < j->deadline) {
      ++i;
      continue;
    }
    active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
    if (metrics_) metrics_->Add("tlr_calls_expired_total", 1);
    std::lock_guard<std::mutex> jl(j->mu);
    j->error = "the call waited " + std::to_string(std::chrono::duration<double>(now - j->enqueued).count()) +
               " s in the queue, past its timeout: the server is overloaded";
    j->shutdown = true;
    j->done = true;
    j->cv.notify_all();
  }
  if (active.empty()) return;
  std::vector<SequenceInput> ins;
  std::vector<Job*> batch;
  int64_t budget = limits_.max_batch_tokens;
  int64_t tokens = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (Job* j : active) {
      if (j->decoding != (pass == 0)) continue;
      const size_t rest = j->feed.size() - j->fed;
      size_t take = std::min<size_t>(rest, static_cast<size_t>(std::max<int64_t>(budget, 0)));
      if (take == 0 && batch.empty()) take = std::min<size_t>(rest, 1);  // always progress
      if (take == 0) continue;
      j->take = take;
      budget -= static_cast<int64_t>(take);
      tokens += static_cast<int64_t>(take);
      const bool last = j->fed + take == j->feed.size();
      ins.push_back({j->s->cache.get(), std::span<const int32_t>(j->feed.data() + j->fed, take),
                     last ? OutputRows::kLast : OutputRows::kNone, last ? j->logits.data() : nullptr, nullptr});
      batch.push_back(j);
      if (!j->started_set) {
        j->started = Clock::now();
        j->started_set = true;
        j->reply.queue_s = std::chrono::duration<double>(j->started - j->enqueued).count();
        if (metrics_) metrics_->Observe("tlr_queue_seconds", j->reply.queue_s);
      }
    }
  }
  Status st = model_.Forward(ins, ctx_.get());
  if (metrics_) {
    metrics_->Add("tlr_forward_passes_total", 1);
    metrics_->Observe("tlr_batch_sequences", static_cast<double>(batch.size()));
    metrics_->Observe("tlr_batch_tokens", static_cast<double>(tokens));
  }
  std::vector<Job*> finished;
  for (Job* j : batch) {
    if (!st.ok()) {
      j->error = "forward pass failed: " + st.message();
      finished.push_back(j);
      continue;
    }
    Session* s = j->s;
    s->tokens.insert(s->tokens.end(), j->feed.begin() + static_cast<std::ptrdiff_t>(j->fed),
                     j->feed.begin() + static_cast<std::ptrdiff_t>(j->fed + j->take));
    s->high_water = std::max<int64_t>(s->high_water.load(), static_cast<int64_t>(s->tokens.size()));
    (j->decoding ? decode_tokens_ : prefill_tokens_) += static_cast<int64_t>(j->take);
    if (metrics_) metrics_->Add(j->decoding ? "tlr_decode_tokens_total" : "tlr_prefill_tokens_total", static_cast<double>(j->take));
    j->fed += j->take;
    if (j->fed < j->feed.size()) continue;
    const int64_t V = model_.config().n_vocab;
    const int32_t tok = j->sampler ? j->sampler->Sample(j->logits.data(), s->tokens)
                                   : ArgMax(j->logits.data(), V);
    float lp = 0;
    std::vector<TopLogprob> top;
    LogProbs(j->logits.data(), V, tok, j->top_logprobs, &lp, &top);
    j->reply.tokens.push_back(tok);
    j->reply.logprobs.push_back(lp);
    if (j->top_logprobs > 0) j->reply.top.push_back(top);
    --j->remaining;
    if (metrics_) metrics_->Add("tlr_generated_tokens_total", 1);
    bool go_on = true;
    if (j->on_token && !(*j->on_token)(tok, lp, top)) {
      j->reply.finish = "stop";
      go_on = false;
    } else if (model_.tokenizer().IsEndOfGeneration(tok)) {
      j->reply.finish = "eos";
      go_on = false;
    } else if (j->remaining <= 0) {
      j->reply.finish = "length";
      go_on = false;
    }
    if (!go_on) {
      finished.push_back(j);
      continue;
    }
    j->feed.assign(1, tok);
    j->fed = 0;
    j->decoding = true;
  }
  for (Job* j : finished) {
    j->reply.compute_s = Since(j->started);
    active.erase(std::find(active.begin(), active.end(), j));
    std::lock_guard<std::mutex> jl(j->mu);
    j->done = true;
    j->cv.notify_all();
  }
}

}  // namespace tlr
