// LlmEngine: checks each call and prepares its session; the session store and the batch
// scheduler do the rest (see llm_engine.h).
#include "server/llm_engine.h"

#include <algorithm>
#include <chrono>
#include <new>

#include "net/protocol.h"
#include "server/batch_scheduler.h"
#include "server/session_store.h"
#include "util/clock.h"

namespace tlr {

namespace {

using Clock = std::chrono::steady_clock;

EngineResult Fail(EngineCode code, std::string message) {
  EngineResult r;
  r.code = code;
  r.message = std::move(message);
  return r;
}

// A failed call's result, as the scheduler reports it (its retry time included).
EngineResult FailOf(const BatchOutcome& out) {
  EngineResult r = Fail(out.refused                         ? EngineCode::kBusy
                        : out.overload                      ? EngineCode::kOverloaded
                        : out.bad_request || out.too_long ? EngineCode::kBadRequest
                                                            : EngineCode::kInternal,
                        out.error);
  r.retry_after_s = out.retry_after_s;
  return r;
}

}  // namespace

int HttpStatusOf(EngineCode code) {
  switch (code) {
    case EngineCode::kOk: return 200;
    case EngineCode::kBadRequest: return 400;
    case EngineCode::kNotFound: return 404;
    case EngineCode::kConflict: return 409;
    case EngineCode::kBusy: return 429;
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
    case EngineCode::kBusy: return "overloaded";
    case EngineCode::kOverloaded: return "overloaded";
    case EngineCode::kInternal: return "internal";
  }
  return "internal";
}

LlmEngine::LlmEngine(const Model& model, ThreadPool* pool, const EngineLimits& limits, Metrics* metrics)
    : model_(model), limits_(limits), metrics_(metrics) {
  bytes_per_token_ = KvCache::BytesPerPosition(model.config(), model.kv_type());
  if (metrics_) {
    metrics_->DeclareCounter("tlr_prefill_tokens_total", "Tokens ingested from requests (delta prefill)");
    metrics_->DeclareCounter("tlr_decode_tokens_total", "Generated tokens fed back into a KV cache");
    metrics_->DeclareCounter("tlr_generated_tokens_total", "Tokens generated");
    metrics_->DeclareCounter("tlr_scored_sequences_total", "Sequences scored teacher-forced (router labels: POST /tlr/v1/score)");
    metrics_->DeclareCounter("tlr_evictions_total", "Session KV caches evicted under the KV budget");
    metrics_->DeclareCounter("tlr_sessions_expired_total", "Sessions deleted after the idle TTL");
    metrics_->DeclareCounter("tlr_resyncs_total", "Next-token calls answered with a conflict (device resends)");
    metrics_->DeclareCounter("tlr_forward_passes_total", "Batched forward passes");
    metrics_->DeclareCounter("tlr_forward_seconds_total", "Time spent in batched forward passes (the LLM's compute)");
    metrics_->DeclareCounter("tlr_calls_expired_total", "Admitted calls dropped unstarted past their deadline (the admission model was wrong)");
    metrics_->DeclareCounter("tlr_calls_abandoned_total", "Admitted calls stopped between forward passes past their deadline");
    metrics_->DeclareCounter("tlr_calls_late_total", "Admitted calls answered after their deadline (the pass that finished them ran past the projection)");
    metrics_->DeclareCounter("tlr_calls_refused_total", "Calls refused at once (429) because they could not be answered before their deadline, by class (warm: a few new tokens; cold: a conversation's prefill)");
    metrics_->DeclareCounter("tlr_new_conversation_tokens_total", "Prefill tokens of admitted new or resynced conversations (calls with more of their context to ingest than their session holds)");
    metrics_->DeclareCounter("tlr_new_conversations_paced_total", "New or resynced conversations refused (429) while calls of conversations in progress were being refused (--new-conversation-share)");
    metrics_->DeclareCounter("tlr_calls_cancelled_total", "Calls dropped because their client closed its connection");
    metrics_->DeclareCounter("tlr_calls_partial_total", "Calls whose prefill takes longer than their time, stopped before their deadline with part of it ingested (503; the next call goes on)");
    metrics_->DeclareCounter("tlr_lookahead_tokens_total", "Lookahead tokens generated for devices' drafts (native protocol)");
    metrics_->DeclareCounter("tlr_prompt_cache_copied_tokens_total", "Prompt tokens a new prompt-cache slot copied from another slot's or session's KV instead of prefilling");
    metrics_->DeclareCounter("tlr_session_copied_tokens_total", "Prefill tokens native sessions saved by copying a prefix from another session's or prompt-cache slot's KV of the same client (a prefix shared by conversations)");
    metrics_->DeclareCounter("tlr_lookahead_cut_total", "Lookahead tokens not generated because other calls were waiting (lookahead is low priority)");
    metrics_->DeclareCounter("tlr_rewound_tokens_total", "Tokens dropped from sessions by calls whose context parts from what the session held");
    metrics_->DeclareCounter("tlr_kept_tokens_total", "Tokens a call resent that the session already held past its base (kept, not prefilled again)");
    metrics_->DeclareGauge("tlr_sessions", "Open sessions");
    metrics_->DeclareGauge("tlr_kv_bytes", "KV cache bytes in use (sessions and prompt cache)");
    metrics_->DeclareGauge("tlr_kv_budget_bytes", "KV cache budget");
    metrics_->DeclareHistogram("tlr_batch_sequences", "Sequences per forward pass",
                               {1, 2, 4, 8, 16, 32, 64, 128});
    metrics_->DeclareHistogram("tlr_batch_tokens", "Tokens per forward pass", {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
    metrics_->DeclareHistogram("tlr_queue_seconds", "Time a call waited before its first pass",
                               {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
    for (const char* c : {"tlr_prefill_tokens_total", "tlr_decode_tokens_total", "tlr_generated_tokens_total",
                          "tlr_evictions_total", "tlr_sessions_expired_total", "tlr_resyncs_total", "tlr_forward_passes_total", "tlr_forward_seconds_total", "tlr_calls_expired_total",
                          "tlr_calls_abandoned_total", "tlr_calls_cancelled_total", "tlr_calls_partial_total", "tlr_lookahead_tokens_total", "tlr_rewound_tokens_total",
                          "tlr_kept_tokens_total", "tlr_lookahead_cut_total", "tlr_prompt_cache_copied_tokens_total",
                          "tlr_session_copied_tokens_total"}) {
      metrics_->Add(c, 0);  // present from the start
    }
    metrics_->Set("tlr_kv_budget_bytes", static_cast<double>(limits_.kv_budget_bytes));
    metrics_->Set("tlr_sessions", 0);
    metrics_->Set("tlr_kv_bytes", 0);
  }
  store_ = std::make_unique<SessionStore>(limits_, bytes_per_token_, metrics_);
  SchedulerOptions so;
  so.max_batch_tokens = limits_.max_batch_tokens;
  so.admission.pass_tokens = limits_.max_batch_tokens;
  so.admission.cold_share = limits_.cold_share;
  so.admission.new_share = limits_.new_share;
  so.calibrate = limits_.calibrate;
  so.test_pass_delay_s = limits_.test_pass_delay_s;
  if (metrics_) {
    for (const char* c : {"warm", "cold"}) metrics_->Add("tlr_calls_refused_total", 0, {{"class", c}});
  }
  scheduler_ = std::make_unique<BatchScheduler>(model_, pool, so, metrics_, [this] {
    if (store_->SweepExpired() > 0) PublishGauges();
  });
}

LlmEngine::~LlmEngine() = default;

int64_t LlmEngine::session_count() const { return store_->count(); }
uint64_t LlmEngine::kv_bytes() const { return store_->kv_bytes(); }
int64_t LlmEngine::prefill_tokens() const { return scheduler_->prefill_tokens(); }
int64_t LlmEngine::decode_tokens() const { return scheduler_->decode_tokens(); }
bool LlmEngine::HasSession(const std::string& id) const { return store_->Find(id) != nullptr; }

void LlmEngine::PublishGauges() {
  if (!metrics_) return;
  metrics_->Set("tlr_sessions", static_cast<double>(session_count()));
  metrics_->Set("tlr_kv_bytes", static_cast<double>(kv_bytes()));
}

EngineResult LlmEngine::CreateSession(SessionInfo* info, const std::string& owner) {
  if (store_->SweepExpired() > 0) PublishGauges();
  std::shared_ptr<EngineSession> s = store_->Create(owner);
  if (!s) {
    return Fail(EngineCode::kOverloaded, "the server holds its maximum of " + std::to_string(limits_.max_sessions) +
                                             " sessions; delete unused ones or retry later");
  }
  info->id = s->id;
  info->max_context = limits_.max_context;
  info->max_tokens_per_call = limits_.max_tokens_per_call;
  info->ttl_s = limits_.session_ttl_s;
  PublishGauges();
  return {};
}

bool LlmEngine::DeleteSession(const std::string& id, const std::string& owner) {
  if (!store_->Delete(id, owner)) return false;
  PublishGauges();
  return true;
}

EngineResult LlmEngine::Next(const NextRequest& req) {
  const auto arrived = Clock::now();
  std::shared_ptr<EngineSession> sp = store_->Find(req.session, req.owner);
  if (!sp) return Fail(EngineCode::kNotFound, "unknown session '" + req.session + "' (expired, deleted or the server restarted): create a new one");
  EngineSession* s = sp.get();
  std::lock_guard<std::mutex> sl(s->mu);
  s->last_used = Clock::now();
  if (!req.request_id.empty()) {
    for (const auto& [rid, reply] : s->recent) {
      if (rid == req.request_id) {
        EngineResult r;
        r.reply = reply;
        r.reply.replayed = true;
        r.reply.session_work = s->work;
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
  if (req.heal.size() > 256) return Fail(EngineCode::kBadRequest, "'prefix_bytes' holds more than 256 bytes");
  // The session ends up holding base + append + n - 1 tokens (the last one is not fed back),
  // and up to one more per healed byte.
  const int64_t need =
      req.base + static_cast<int64_t>(req.append.size()) + req.n - 1 + static_cast<int64_t>(req.heal.size());
  if (need > limits_.max_context) {
    return Fail(EngineCode::kBadRequest, "context of " + std::to_string(need + 1) + " tokens (base + append + n" +
                                             (req.heal.empty() ? std::string() : " + one per prefix byte") +
                                             ") exceeds the server's limit of " + std::to_string(limits_.max_context) + " + 1");
  }
  // Lookahead is a hint: as much as the per-call and context limits leave.
  const int lookahead = static_cast<int>(std::max<int64_t>(
      0, std::min<int64_t>({req.lookahead, limits_.max_tokens_per_call - req.n, limits_.max_context - need})));
  // What the session holds past `base` and the call appends again stays in the cache: a device
  // pipelining calls sends a base that is safe whatever order they run in, so it often resends
  // what an earlier call already left here (its context, the reply and the lookahead the device
  // then confirmed). The last appended token is always fed: its outputs answer the call.
  int64_t keep = req.base;
  const int64_t last = req.base + static_cast<int64_t>(req.append.size()) - 1;
  while (keep < held && keep < last && s->tokens[static_cast<size_t>(keep)] == req.append[static_cast<size_t>(keep - req.base)]) {
    ++keep;
  }
  // Time already spent waiting for the session (an earlier call of the same device) counts.
  CallControl control;
  control.timeout_s = req.timeout_s > 0 ? std::max(1e-6, req.timeout_s - SecondsSince(arrived)) : 0;
  control.client_gone = req.client_gone;
  // A context with much to prefill that begins as another idle cache's does (the system prompt
  // of an app every device sends; a device resyncing after its session was evicted) starts
  // from a copy of that cache's prefix: worth it when it saves kMinShared tokens or more, and
  // more than the copy moves again of what this session already holds.
  constexpr int64_t kMinShared = 16;
  std::shared_ptr<EngineSession> from;
  std::unique_lock<std::mutex> from_lock;
  size_t shared = 0;
  if (limits_.share_prefixes && last - keep >= kMinShared) {
    std::vector<int32_t> context(s->tokens.begin(), s->tokens.begin() + req.base);
    context.insert(context.end(), req.append.begin(), req.append.end() - 1);  // the last is fed
    from = store_->FindSharedPrefix(s, context, static_cast<size_t>(std::max(keep + kMinShared, 2 * keep)),
                                    &from_lock, &shared);
  }
  const int64_t start = from ? static_cast<int64_t>(shared) : keep;
  std::vector<int32_t> feed(req.append.begin() + (start - req.base), req.append.end());
  bool admitted = false;
  EngineResult r = Run(s, start, std::move(feed), req.n + lookahead, req.sampling, req.top_logprobs, nullptr, control,
                       lookahead, nullptr, 0, req.heal, &admitted, from.get(), &from_lock);
  if (from_lock.owns_lock()) from_lock.unlock();  // (Run lets it go once the copy is made)
  s->last_used = Clock::now();
  if (admitted) {  // a refused call left the session as it was
    ++s->version;
    if (metrics_ && held > keep) metrics_->Add("tlr_rewound_tokens_total", static_cast<double>(held - keep));
    if (metrics_ && keep > req.base) metrics_->Add("tlr_kept_tokens_total", static_cast<double>(keep - req.base));
    if (metrics_ && from) metrics_->Add("tlr_session_copied_tokens_total", static_cast<double>(start - keep));
  }
  if (r.ok()) {
    // The tokens spelling the healed bytes and the n answer the call; the rest is the
    // lookahead draft.
    EngineReply& rep = r.reply;
    const size_t answer = static_cast<size_t>(req.n + rep.spelled);
    if (rep.tokens.size() > answer) {
      rep.lookahead.assign(rep.tokens.begin() + static_cast<std::ptrdiff_t>(answer), rep.tokens.end());
      rep.tokens.resize(answer);
      rep.logprobs.resize(std::min(rep.logprobs.size(), answer));
      if (rep.top.size() > answer) rep.top.resize(answer);
      if (metrics_) metrics_->Add("tlr_lookahead_tokens_total", static_cast<double>(rep.lookahead.size()));
    }
    rep.version = s->version;
  }
  // Replies (a replayed one too) report the session's work so far, so the device also counts
  // the work of calls whose answers it never read.
  r.reply.session_work = s->work;
  if (r.ok() && !req.request_id.empty()) {
    s->recent.emplace_back(req.request_id, r.reply);
    while (static_cast<int>(s->recent.size()) > limits_.recent_replies) s->recent.pop_front();
  }
  return r;
}

EngineResult LlmEngine::Complete(std::span<const int32_t> prompt, int max_tokens, const SamplerParams& sampling,
                                 int top_logprobs, const TokenCallback& on_token,
                                 std::vector<PromptPosition>* prompt_scores, int prompt_top, const CallControl& control) {
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
  std::shared_ptr<EngineSession> best;
  std::unique_lock<std::mutex> lock;  // best's (declared after it: unlocked before it may go)
  size_t best_common = 0;
  bool temporary = false;
  std::shared_ptr<EngineSession> from;
  std::unique_lock<std::mutex> from_lock;
  best = store_->AcquireSlot(prompt, control.owner, &lock, &best_common, &temporary, &from, &from_lock);
  EngineSession* s = best.get();
  s->last_used = Clock::now();
  s->owner = control.owner;
  // Scoring the prompt reads all of it (a cached prefix has no logits to report).
  size_t common = prompt_scores ? 0 : std::min(best_common, prompt.size() - 1);
  // A new slot starting from another cache's prefix: a copy of its KV (made as for Next), no prefill.
  EngineSession* copy_from = nullptr;
  if (from && from->cache && common > 0) {
    copy_from = from.get();
  } else if (from) {
    from_lock.unlock();
    common = 0;
  }
  std::vector<int32_t> feed(prompt.begin() + static_cast<std::ptrdiff_t>(common), prompt.end());
  bool admitted = false;
  EngineResult r = Run(s, static_cast<int64_t>(common), std::move(feed), max_tokens, sampling, top_logprobs, on_token,
                       control, 0, prompt_scores, prompt_top, {}, &admitted, copy_from, &from_lock);
  if (from_lock.owns_lock()) from_lock.unlock();
  if (metrics_ && copy_from && admitted) metrics_->Add("tlr_prompt_cache_copied_tokens_total", static_cast<double>(common));
  s->last_used = Clock::now();
  if (temporary) store_->ReleaseTemporary(best);
  return r;
}

EngineResult LlmEngine::Score(const std::vector<std::vector<int32_t>>& seqs, int top_logprobs,
                              std::vector<std::vector<PromptPosition>>* out, const CallControl& control) {
  if (seqs.empty()) return Fail(EngineCode::kBadRequest, "no sequences to score");
  const int64_t V = model_.config().n_vocab;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& q = seqs[i];
    const std::string which = "sequence " + std::to_string(i);
    if (q.empty()) return Fail(EngineCode::kBadRequest, which + " is empty");
    if (static_cast<int64_t>(q.size()) > limits_.max_context) {
      return Fail(EngineCode::kBadRequest, which + " has " + std::to_string(q.size()) + " tokens, past the server's context of " +
                                               std::to_string(limits_.max_context));
    }
    for (int32_t t : q) {
      if (t < 0 || t >= V) return Fail(EngineCode::kBadRequest, which + ": token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
    }
  }
  const auto deadline = control.timeout_s > 0
                            ? Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(control.timeout_s))
                            : Clock::time_point::max();
  // One temporary cache per sequence, each counted in the KV budget while the call runs.
  std::vector<std::shared_ptr<EngineSession>> temps;
  std::vector<std::unique_lock<std::mutex>> locks(seqs.size());
  auto release = [&] {
    for (auto& t : temps) store_->ReleaseTemporary(t);
  };
  std::vector<BatchCall> calls;
  out->assign(seqs.size(), {});
  for (size_t i = 0; i < seqs.size(); ++i) {
    temps.push_back(store_->NewTemporary(&locks[i]));
    EngineSession* s = temps.back().get();
    BatchCall call;
    call.session = s;
    call.feed = seqs[i];
    call.n = 0;
    call.prompt_scores = &(*out)[i];
    call.prompt_top = top_logprobs;
    // No deadline for admission: scoring is batch work for a labelling client, not a device's
    // conversation (the cold share and the pacer would refuse what its timeout allows, and a
    // refusal ends a labelling run); its timeout only drops it once passed, as a client gone.
    call.client_gone = [gone = control.client_gone, deadline] { return (gone && gone()) || Clock::now() >= deadline; };
    std::string why;
    if (!store_->MakeRoom(s, static_cast<int64_t>(seqs[i].size()), &why)) {
      release();
      return Fail(EngineCode::kOverloaded, why);
    }
    auto c = model_.NewCache(static_cast<int64_t>(seqs[i].size()), KvMemory::kOnDemand);
    if (!c.ok()) {
      release();
      return Fail(EngineCode::kOverloaded, c.status().message());
    }
    s->cache = std::make_unique<KvCache>(std::move(c).value());
    calls.push_back(std::move(call));
  }
  std::vector<BatchOutcome> outs = scheduler_->RunAll(std::move(calls));
  PublishGauges();
  EngineResult r;
  for (BatchOutcome& o : outs) {
    if (!o.error.empty() && r.ok()) r = FailOf(o);
    r.reply.prefilled += o.reply.prefilled;
    r.reply.queue_s = std::max(r.reply.queue_s, o.reply.queue_s);
    r.reply.compute_s = std::max(r.reply.compute_s, o.reply.compute_s);
  }
  if (!r.ok() && Clock::now() >= deadline) {
    r = Fail(EngineCode::kOverloaded, "scoring ran past its timeout of " + std::to_string(control.timeout_s) +
                                          " s and was dropped: send fewer or shorter sequences, or give more time");
  }
  locks.clear();
  release();
  if (metrics_ && r.ok()) metrics_->Add("tlr_scored_sequences_total", static_cast<double>(seqs.size()));
  return r;
}

// Runs one call on a locked session through the batch scheduler and waits for it.
EngineResult LlmEngine::Run(EngineSession* s, int64_t keep, std::vector<int32_t> feed, int n, const SamplerParams& sampling,
                            int top_logprobs, const TokenCallback& on_token, const CallControl& control, int low_priority,
                            std::vector<PromptPosition>* prompt_scores, int prompt_top, std::string heal, bool* admitted,
                            EngineSession* copy_from, std::unique_lock<std::mutex>* copy_lock) {
  Status valid = sampling.Validate();
  if (!valid.ok()) return Fail(EngineCode::kBadRequest, valid.message());
  const int64_t need = keep + static_cast<int64_t>(feed.size()) + n - 1 + static_cast<int64_t>(heal.size());
  BatchCall call;
  call.session = s;
  call.feed = std::move(feed);
  call.n = n;
  call.low_priority = low_priority;
  call.sampling = sampling;
  call.top_logprobs = top_logprobs;
  call.on_token = on_token ? &on_token : nullptr;
  call.deadline_s = control.timeout_s;
  call.deadline_first_token = control.first_token_only;
  call.keep = keep;
  call.client_gone = control.client_gone;
  call.on_decided = control.on_decided;
  call.prompt_scores = prompt_scores;
  call.prompt_top = prompt_top;
  call.heal = std::move(heal);
  // A call that will be refused must not evict other sessions' caches to make room: ask first
  // (the scheduler decides again when it queues the call).
  if (const AdmissionVerdict v = scheduler_->Check(call); !v.admit) {
    EngineResult r = Fail(v.never ? EngineCode::kBadRequest : EngineCode::kBusy,
                          (v.never ? "the call cannot be answered in its time: " : "the server is overloaded: ") + v.why);
    r.retry_after_s = v.retry_after_s;
    if (metrics_ && !v.never) {  // a 400 (it cannot fit at all) is not a refusal
      metrics_->Add("tlr_calls_refused_total", 1,
                    {{"class", static_cast<int64_t>(call.feed.size()) <= AdmissionPolicy{}.warm_tokens ? "warm" : "cold"}});
    }
    return r;
  }
  std::string why;
  if (!store_->MakeRoom(s, need, &why, copy_from)) return Fail(EngineCode::kOverloaded, why);
  if (copy_from) {
    // The copy is made here, outside the scheduler's lock, and its source freed at once (a call
    // of the source's own device must not wait for this whole call); admission swaps it in.
    try {
      call.copy = std::make_unique<KvCache>(copy_from->cache->Fork(keep));
      call.copy_tokens.assign(copy_from->tokens.begin(), copy_from->tokens.begin() + keep);
    } catch (const std::bad_alloc&) {
      return Fail(EngineCode::kOverloaded, "no memory for a copy of the KV cache");
    }
    if (copy_lock && copy_lock->owns_lock()) copy_lock->unlock();
  } else if (!s->cache) {
    // 4 KiB pages touched as positions are written: the KV budget counts positions in use.
    auto c = model_.NewCache(limits_.max_context, KvMemory::kOnDemand);
    if (!c.ok()) return Fail(EngineCode::kOverloaded, c.status().message());
    s->cache = std::make_unique<KvCache>(std::move(c).value());
  }
  BatchOutcome out = scheduler_->Run(std::move(call));
  if (admitted) *admitted = out.admitted;
  PublishGauges();
  if (!out.error.empty()) {
    // Only a failed forward pass may leave the cache written past the session's tokens: forget
    // it then (the device resyncs). A call dropped between passes leaves them in agreement.
    if (out.failed_pass) SessionStore::EvictCache(s);
    EngineResult r = FailOf(out);
    if (out.partial) r.error_code = "prefill_partial";
    return r;
  }
  EngineResult r;
  r.reply = std::move(out.reply);
  r.reply.position = static_cast<int64_t>(s->tokens.size());
  return r;
}

}  // namespace tlr
