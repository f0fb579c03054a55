// The remote backends' common part: connecting, the call workers, the fail-fast window and the
// statistics (see remote_llm.h). The protocols are remote_tlr.cc and remote_openai.cc.
#include "device/remote/remote_llm.h"

#include <cstdio>
#include <random>

#include "device/remote/remote_protocols.h"
#include "device/remote/remote_replies.h"
#include "net/protocol.h"

namespace tlr {

using Clock = std::chrono::steady_clock;

Expected<RemoteProtocol> ParseRemoteProtocol(std::string_view name) {
  if (name == "tlr") return RemoteProtocol::kTlr;
  if (name == "openai") return RemoteProtocol::kOpenAi;
  return Status::Error("unknown backend '" + std::string(name) + "' (tlr, openai)");
}

std::string_view RemoteProtocolName(RemoteProtocol p) { return p == RemoteProtocol::kTlr ? "tlr" : "openai"; }

RemoteLlm::RemoteLlm(const RemoteOptions& opts, const Tokenizer& vocab)
    : opts_(opts), vocab_(vocab), http_(opts.http), retry_after_s_(opts.retry_after_s) {
  std::random_device rd;
  jitter_state_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

RemoteLlm::~RemoteLlm() { StopWorkers(); }

void RemoteLlm::StartWorkers() {
  exec_ = std::make_unique<CallExecutor>(
      opts_.max_in_flight, [this](const LlmRequest& req, LlmCall& call) { return Run(req, call); });
}

void RemoteLlm::StopWorkers() { exec_.reset(); }

std::string RemoteLlm::name() const {
  return std::string(RemoteProtocolName(opts_.protocol)) + " server " + opts_.http.url;
}

std::string RemoteLlm::ErrorMessage(const std::string& body) { return remote::ErrorMessage(body); }

std::string_view CallFailureName(CallFailure f, bool plural) {
  switch (f) {
    case CallFailure::kUnreachable: return "unreachable";
    case CallFailure::kTimeout: return plural ? "timeouts" : "timeout";
    case CallFailure::kServerError: return plural ? "server errors" : "server error";
    case CallFailure::kMalformed: return plural ? "malformed replies" : "malformed reply";
    case CallFailure::kFailFast: return "skipped while the server was down";
    case CallFailure::kUnsendable: return plural ? "contexts not sendable as text" : "context not sendable as text";
    case CallFailure::kRefused: return plural ? "refused (server overloaded)" : "refused (server overloaded)";
    case CallFailure::kDeferred: return "skipped until the server's Retry-After";
    case CallFailure::kPartial: return plural ? "contexts taken in part (prefill longer than --llm-timeout)" : "context taken in part (prefill longer than --llm-timeout)";
    case CallFailure::kQuota: return "refused (this client's session quota)";
  }
  return "?";
}

RemoteStats RemoteStats::operator-(const RemoteStats& e) const {
  RemoteStats d = *this;
  d.calls -= e.calls;
  d.failed_calls -= e.failed_calls;
  d.cancelled_calls -= e.cancelled_calls;
  d.http_requests -= e.http_requests;
  d.retries -= e.retries;
  d.resyncs -= e.resyncs;
  d.sessions_created -= e.sessions_created;
  d.tokens_sent -= e.tokens_sent;
  d.lookahead_tokens -= e.lookahead_tokens;
  d.sim_delay_s -= e.sim_delay_s;
  for (int k = 0; k < kCallFailureKinds; ++k) d.failures[k] -= e.failures[k];
  if (d.failed_calls == 0) d.first_failure.clear();
  return d;
}

std::string RemoteStats::FailureSummary() const {
  std::string out;
  for (int k = 0; k < kCallFailureKinds; ++k) {
    if (failures[k] == 0) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(failures[k]) + " " + std::string(CallFailureName(static_cast<CallFailure>(k), failures[k] != 1));
  }
  if (!out.empty() && !first_failure.empty()) out += ": " + first_failure;
  return out;
}

Status RemoteLlm::NoReply(const HttpResult& h, CallError* err) {
  err->outage = !h.too_large;
  err->kind = h.timed_out ? CallFailure::kTimeout : h.too_large ? CallFailure::kMalformed : CallFailure::kUnreachable;
  if (h.timed_out || h.too_large) return Status::Error("LLM call failed: " + h.error);
  return Status::Error("LLM server unreachable: " + h.error);
}

Status RemoteLlm::ErrorStatus(const HttpResult& h, const std::string& what, CallError* err) {
  // Shedding load: 429, or 503 with a Retry-After (a 503 without one is an outage: a proxy with
  // no server behind it).
  if (h.status == 429 || (h.status == 503 && h.retry_after_s >= 0)) {
    err->outage = false;
    const std::string code = remote::ErrorCode(h.body);
    err->kind = h.status == 503 && code == "prefill_partial" ? CallFailure::kPartial
                : h.status == 429 && code == "session_quota" ? CallFailure::kQuota
                                                              : CallFailure::kRefused;
    // Trusted up to a minute: a proxy's or rate limiter's hours would silence the LLM for good.
    err->retry_after_s = h.retry_after_s >= 0 ? std::min(h.retry_after_s, 60.0) : 1.0;
    if (err->kind == CallFailure::kQuota) {
      return Status::Error("the LLM server refused a new session (429 session_quota, retry after " +
                           std::to_string(static_cast<int>(err->retry_after_s * 1e3)) + " ms): " + ErrorMessage(h.body));
    }
    return Status::Error("the LLM server is overloaded (" + std::to_string(h.status) + ", retry after " +
                         std::to_string(static_cast<int>(err->retry_after_s * 1e3)) + " ms): " + ErrorMessage(h.body));
  }
  err->outage = h.status >= 500;
  err->kind = CallFailure::kServerError;
  return Status::Error(what + " (" + std::to_string(h.status) + "): " + ErrorMessage(h.body));
}

double RemoteLlm::deferred_s() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  const auto now = Clock::now();
  auto until = busy_until_;
  if (down_) until = std::max(until, retry_at_);
  return until > now ? std::chrono::duration<double>(until - now).count() : 0;
}

Status RemoteLlm::VocabularyMismatch(const std::string& theirs) const {
  const std::string what = "the server's LLM uses a different vocabulary (fingerprint " + theirs + ") than ";
  if (!opts_.vocab_source.empty()) {
    return Status::Error(what + "the --llm-tokenizer given (" + opts_.vocab_source + ", " +
                         HashHex(vocab_.Fingerprint()) + "): give that LLM's own tokenizer, or 'server' for tlr serve");
  }
  return Status::Error(what + "the SLM (" + HashHex(vocab_.Fingerprint()) +
                       "): give the LLM's tokenizer (--llm-tokenizer FILE, or server for tlr serve) to route across "
                       "vocabularies");
}

Status RemoteLlm::NotTheServer(Status why, bool* reachable) {
  // A captive portal's page, a proxy's error, a server still starting: for an app that may start
  // offline, the server is not reachable now (its tokens fall back until it is); for the
  // command line, which was asked to use this server, an error.
  if (why.ok() || opts_.require_reachable) return why;
  *reachable = false;
  if (first_check_error_.empty()) first_check_error_ = why.message();
  return Status::Ok();
}

Status RemoteLlm::GetForCheck(const std::string& path, const std::string& not_200, bool* reachable,
                              std::string* body) {
  LlmCall watch(nullptr, connect_cancel_);  // cancelled with Connect's flag
  HttpResult h = http_.Request("GET", path, "", connect_cancel_ ? &watch : nullptr);
  if (h.cancelled) return Status::Error("cancelled");
  *reachable = h.sent;
  body->clear();
  if (!h.sent && first_check_error_.empty()) first_check_error_ = h.error;
  if (!h.sent && h.tls_failure) {
    return Status::Error("TLS with " + opts_.http.url + " failed (" + h.error +
                         "): the certificate is not trusted or not for this host; give its CA (--ca-file; C API: ca_file)");
  }
  if (!h.sent) return Status::Ok();
  if (h.status == 401 || h.status == 403) {
    return Status::Error("the server at " + opts_.http.url + " refused the API key (" + ErrorMessage(h.body) +
                         "): give the key it accepts (--server-key or $TLR_SERVER_KEY; C API: api_key)");
  }
  if (h.status != 200) {
    return NotTheServer(Status::Error("the server at " + opts_.http.url + " answered " + std::to_string(h.status) +
                                      " to " + path + " (" + not_200 + ")"),
                        reachable);
  }
  *body = std::move(h.body);
  return Status::Ok();
}

void RemoteLlm::CountStat(int64_t RemoteStats::*field, int64_t by) {
  std::lock_guard<std::mutex> l(stats_mu_);
  stats_.*field += by;
}

void RemoteLlm::AddCallWork(const LlmWork& w) {
  std::lock_guard<std::mutex> l(stats_mu_);
  work_ = work_ + w;
}

void RemoteLlm::NoteSessionWork(uint64_t generation, const LlmWork& totals) {
  std::lock_guard<std::mutex> l(stats_mu_);
  if (generation != work_generation_) {
    work_ = work_ + session_work_;
    session_work_ = LlmWork{};
    work_generation_ = generation;
  }
  session_work_.prefilled = std::max(session_work_.prefilled, totals.prefilled);
  session_work_.generated = std::max(session_work_.generated, totals.generated);
  session_work_.forward_s = std::max(session_work_.forward_s, std::max(0.0, totals.forward_s));
}

LlmWork RemoteLlm::work() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  return work_ + session_work_;
}

RemoteStats RemoteLlm::stats() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  RemoteStats s = stats_;
  s.http_requests = http_.http_requests();
  s.retries = http_.retries();
  s.sim_delay_s = http_.sim_delay_s();
  return s;
}

Expected<std::unique_ptr<RemoteLlm>> RemoteLlm::Connect(const RemoteOptions& given, const Tokenizer& vocab,
                                                       const std::atomic<bool>* cancel) {
  TLR_RETURN_IF_ERROR(HttpTransport::Validate(given.http));
  if (given.max_in_flight < 1 || given.max_in_flight > 64) {
    return Status::Error("calls in flight must be in 1..64");
  }
  TLR_ASSIGN_OR_RETURN(ServerUrl url, ParseServerUrl(given.http.url));
  if (given.protocol == RemoteProtocol::kOpenAi && url.prefix.size() >= 3 &&
      url.prefix.compare(url.prefix.size() - 3, 3, "/v1") == 0) {
    url.prefix.resize(url.prefix.size() - 3);  // the endpoints' paths start with /v1
  }
  RemoteOptions opts = given;
  opts.http.url = url.ToString();
  // https to a server that speaks plain HTTP would wait out the whole timeout in the handshake.
  const double probe_s = std::min(opts.http.timeout_s, 2.0);
  // (With the app's own HTTP stack, TLR's sockets tell nothing about the app's network.)
  if (url.scheme == "https" && !opts.http.stack && SpeaksPlainHttp(url, probe_s)) {
    return Status::Error("the LLM server at " + opts.http.url + " speaks plain HTTP, not TLS: use http://" +
                         opts.http.url.substr(8));
  }
  std::unique_ptr<RemoteLlm> r;
  if (opts.protocol == RemoteProtocol::kTlr) {
    r.reset(new TlrServerLlm(opts, vocab));
  } else {
    r.reset(new OpenAiLlm(opts, vocab));
  }
  bool reachable = false;
  r->connect_cancel_ = cancel;
  Status checked = r->CheckServer(&reachable);
  r->connect_cancel_ = nullptr;
  TLR_RETURN_IF_ERROR(checked);
  if (cancel && cancel->load()) return Status::Error("cancelled");
  if (!reachable) {
    std::string why = opts.http.stack ? "" : DiagnoseConnection(url, probe_s);
    if (why.empty()) {
      why = r->first_check_error_;
      if (!opts.http.stack) {  // the probe above got an HTTP answer in time
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", opts.http.timeout_s);
        why += "; a test request there does get an answer: is the timeout of " + std::string(secs) +
               " s (--llm-timeout) too short for this server?";
      }
    }
    if (opts.require_reachable) return Status::Error(kCannotReach + opts.http.url + ": " + why);
    r->warning_ = "the LLM server at " + opts.http.url + " is not reachable now (" + why +
                  "); answering with the SLM (FALLBACK) until it is";
  } else {
    LlmCall watch(nullptr, cancel);  // cancelled with Connect's flag
    r->Prepare(cancel ? &watch : nullptr);
    if (cancel && cancel->load()) return Status::Error("cancelled");
  }
  r->StartWorkers();
  return r;
}

std::shared_ptr<LlmCall> RemoteLlm::Submit(LlmRequest request, std::function<void()> on_done) {
  CountStat(&RemoteStats::calls);
  return exec_->Submit(std::move(request), std::move(on_done));
}

Expected<LlmReply> RemoteLlm::Run(const LlmRequest& req, LlmCall& call) {
  if (req.context.empty()) return Status::Error("the LLM needs at least one context token");
  if (req.n < 1) return Status::Error("ask the LLM for at least one token");
  if (req.lookahead < 0) return Status::Error("lookahead must not be negative");
  bool probe = false;  // the first call after a fail-fast window: it tests the server again
  {
    std::lock_guard<std::mutex> l(stats_mu_);
    if (down_ && Clock::now() < retry_at_) {
      Status s = Status::Error("LLM server unavailable (retrying soon)");
      ++stats_.failed_calls;
      ++stats_.failures[static_cast<int>(CallFailure::kFailFast)];
      if (stats_.first_failure.empty()) stats_.first_failure = s.message();
      return s;
    }
    if (Clock::now() < busy_until_) {
      Status s = Status::Error("the LLM server is overloaded: not calling it before its Retry-After");
      ++stats_.failed_calls;
      ++stats_.failures[static_cast<int>(CallFailure::kDeferred)];
      if (stats_.first_failure.empty()) stats_.first_failure = s.message();
      return s;
    }
    probe = down_;
  }
  CallError err;
  auto r = Execute(req, call, &err);
  const bool outage = err.outage;
  std::lock_guard<std::mutex> l(stats_mu_);
  if (r.ok()) {
    down_ = false;
    retry_after_s_ = opts_.retry_after_s;
    stats_.lookahead_tokens += static_cast<int64_t>(r->lookahead.size());
  }
  if (!r.ok() && (err.kind == CallFailure::kRefused || err.kind == CallFailure::kPartial || err.kind == CallFailure::kQuota)) {
    // Not before the server's Retry-After, plus 0-50% of it and up to 20 ms (jitter): refused
    // devices spread out instead of coming back together. (A call the decoder cancelled in
    // flight was refused all the same: its wait holds for the next ones.)
    jitter_state_ = jitter_state_ * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(jitter_state_ >> 11) / 9007199254740992.0;
    const double wait = err.retry_after_s * (1 + 0.5 * u) + 0.02 * u;
    busy_until_ = std::max(busy_until_, Clock::now() + std::chrono::microseconds(static_cast<int64_t>(wait * 1e6)));
  }
  if (!r.ok() && call.cancelled()) {
    ++stats_.cancelled_calls;
  } else if (!r.ok()) {
    ++stats_.failed_calls;
    ++stats_.failures[static_cast<int>(err.kind)];
    if (stats_.first_failure.empty()) stats_.first_failure = r.status().message();
    // Only an outage (no answer, 5xx) makes the next calls fail fast; a refused call does not.
    // A failed probe doubles the window; calls that were already on their way when the server
    // went down fail together and open it once.
    if (outage && (!down_ || probe)) {
      if (down_) retry_after_s_ = std::min(retry_after_s_ * 2, 30.0);
      down_ = true;
      retry_at_ = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(retry_after_s_ * 1e6));
    }
  }
  if (r.ok() && call.cancelled()) ++stats_.cancelled_calls;
  return r;
}

}  // namespace tlr
