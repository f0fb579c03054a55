// Remote LLM backends (device layer): the decoder's LLM over the network, one class per wire
// protocol over one HTTP transport (http_transport.h):
//
//   TlrServerLlm  the native protocol of `tlr serve` (docs/protocol.md): a session on the server
//                 holds this device's KV cache; each call sends only the tokens the server has
//                 not seen (base + prefix hash + append), and a 409 (server evicted or restarted,
//                 a reply was lost) makes the backend resend from what the server still holds.
//   OpenAiLlm     any OpenAI-compatible engine (SGLang, vLLM, llama.cpp server, `tlr serve`):
//                 /v1/completions with the context as token ids and max_tokens = n + lookahead;
//                 the engine's prefix cache keeps resending the context cheap.
//
// Calls are asynchronous (llm_backend.h): up to `max_in_flight` run at once, each on its own
// keep-alive connection, so a device can pipeline calls on one session. The native protocol
// picks each call's base so that it is valid whatever order the server runs the calls in
// flight (the server rewinds a session to a smaller base), and trusts what a reply says the
// session holds only when it is the newest state the server reports (its session version).
//
// Robustness: a timeout per attempt, retries with exponential backoff (a retried call keeps its
// request_id, so the server never appends twice). When the server stays unreachable, calls
// fail fast for a while (the decoder then uses the SLM's token, source FALLBACK) and probe again
// later; the session resyncs when it is back. A server that sheds load (429, or 503 with a
// Retry-After) fails the call at once (FALLBACK) and is not called again before its Retry-After,
// stretched by a random 0-50% so that refused devices do not all come back at the same moment. --sim-rtt adds a simulated network delay per HTTP
// round trip (for evaluations).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/http/http_transport.h"
#include "device/llm/llm_backend.h"
#include "model/tokenizer/tokenizer.h"
#include "util/status.h"

namespace tlr {

enum class RemoteProtocol { kTlr, kOpenAi };
Expected<RemoteProtocol> ParseRemoteProtocol(std::string_view name);  // "tlr", "openai"
std::string_view RemoteProtocolName(RemoteProtocol p);

struct RemoteOptions {
  HttpOptions http;
  RemoteProtocol protocol = RemoteProtocol::kTlr;
  std::string model;             // openai: the model name (default: the first of /v1/models)
  double retry_after_s = 1.0;    // after giving up: fail fast this long, then probe again
  int max_in_flight = 4;         // calls running at once (one connection each)
  // openai: send the context as text (decoded with the server's vocabulary, its BOS left to the
  // engine) for engines that take no token-id prompts; the engine tokenizes it again. A context
  // that is not whole UTF-8 characters cannot be sent as text: that call fails (FALLBACK; the
  // vocabulary bridge never cuts a context inside a character).
  bool text_prompt = false;
  // Where the vocabulary Connect checks the server against came from, for its error: empty for
  // the SLM's own, else the LLM tokenizer's file (--llm-tokenizer).
  std::string vocab_source;
  // A server that cannot be reached when Connect checks it: an error (what the command line's
  // commands want: they were asked to use it), or not (the device answers with the SLM until it
  // can be reached; what an app that may start offline wants, and the C API's behaviour).
  bool require_reachable = false;
};

// The start of Connect's error when require_reachable and the server cannot be reached.
inline constexpr const char* kCannotReach = "cannot reach the LLM server at ";

// Why a call failed, for the device's summary ("9 fallbacks: 7 timeouts, 2 malformed replies").
// kUnsendable: the request could not be made (a context a text prompt cannot carry).
// kRefused: the server was overloaded and said when to come back (429, 503 with Retry-After);
// kDeferred: not sent, because that time had not come yet; kPartial: the context's prefill takes
// longer than the call's time, and the server took part of it (503 prefill_partial): the next
// call goes on from there. kQuota: the server refused a new session because this client holds
// as many as its --session-quota allows (429 session_quota): the device's count, not the
// server's load; it comes back after the Retry-After as a refused call does.
enum class CallFailure { kUnreachable, kTimeout, kServerError, kMalformed, kFailFast, kUnsendable, kRefused, kDeferred, kPartial, kQuota };
inline constexpr int kCallFailureKinds = 10;
std::string_view CallFailureName(CallFailure f, bool plural);  // "timeout", "malformed replies", ...

// What a failed call's protocol reports to the common part.
struct CallError {
  bool outage = false;  // the server is unreachable or failing (no answer, 5xx): fail fast a while
  CallFailure kind = CallFailure::kMalformed;
  double retry_after_s = -1;  // kRefused, kQuota: the server's Retry-After
};

struct RemoteStats {
  int64_t calls = 0;             // calls submitted
  int64_t failed_calls = 0;      // calls that returned an error (not counting cancelled ones)
  int64_t cancelled_calls = 0;   // calls the decoder cancelled (their replies are not used)
  int64_t http_requests = 0;
  int64_t retries = 0;
  int64_t resyncs = 0;           // 409 / unknown-session recoveries
  int64_t sessions_created = 0;
  int64_t tokens_sent = 0;       // token ids sent to the server
  int64_t lookahead_tokens = 0;  // lookahead tokens received
  double sim_delay_s = 0;        // simulated network time added
  int64_t failures[kCallFailureKinds] = {};  // failed calls by CallFailure
  std::string first_failure;     // the message of the first failed call
  // "7 timeouts, 2 malformed replies: <first message>"; empty when no call failed.
  std::string FailureSummary() const;
  // What happened between two readings of the same backend's stats (`*this` the later one; the
  // first failure's message is the later reading's).
  RemoteStats operator-(const RemoteStats& earlier) const;
};

class RemoteLlm : public LlmBackend {
 public:
  // Connects and checks the server: its vocabulary must match `vocab` (the SLM's tokenizer;
  // the openai backend checks when the server reports it, and uses the tokenizer to read
  // replies from engines that return text only). The URL is normalised (ParseServerUrl; for the
  // openai backend a path ending in /v1, the OpenAI clients' base URL, means the server's root).
  // An unreachable server is an error only with opts.require_reachable (else the device falls
  // back until it appears; see warning()); a wrong URL, scheme, key or vocabulary always is.
  // `cancel` (may be null): set from another thread, it stops the checks (the error then says
  // "cancelled"); read during Connect only.
  static Expected<std::unique_ptr<RemoteLlm>> Connect(const RemoteOptions& opts, const Tokenizer& vocab,
                                                       const std::atomic<bool>* cancel = nullptr);
  ~RemoteLlm() override;

  std::shared_ptr<LlmCall> Submit(LlmRequest request, std::function<void()> on_done) override;
  void Reset() override {}  // the session stays: the next call's prefix match decides what the server keeps
  uint64_t vocab_fingerprint() const override { return vocab_.Fingerprint(); }
  std::string name() const override;
  // Native protocol: the server's own count for this device's sessions (every reply carries its
  // session's totals, so calls cancelled in flight count once a later reply arrives); OpenAI
  // engines: the usage each reply reports (forward time unknown: -1). A call still in flight
  // when this is read counts later.
  LlmWork work() const override;

  RemoteStats stats() const;
  // Seconds until this backend calls the server again: after a refusal, its Retry-After with
  // jitter; after an outage, the fail-fast window. 0 when it would call now.
  double deferred_s() const;
  // Set when Connect could not verify something (server down, engine without a vocabulary
  // fingerprint); empty otherwise.
  const std::string& warning() const { return warning_; }

 protected:
  RemoteLlm(const RemoteOptions& opts, const Tokenizer& vocab);
  // Starts the call workers (the last step of Connect, once the object is complete).
  void StartWorkers();
  // Stops the workers (the first step of a derived destructor).
  void StopWorkers();
  // Checks the server at connect time; sets *reachable.
  virtual Status CheckServer(bool* reachable) = 0;
  // Once the server answered at connect time: work that saves the first call a round trip
  // (the native protocol opens its session). Failures are left for the first call. `call`
  // (may be null) cancels it.
  virtual void Prepare(LlmCall* /*call*/) {}
  // One call, blocking, on a worker thread. On failure sets *err: its kind, and whether it is
  // an outage (the server unreachable or failing: later calls then fail fast for a while).
  virtual Expected<LlmReply> Execute(const LlmRequest& req, LlmCall& call, CallError* err) = 0;
  // The error of a request that got no reply, or a reply with an error status.
  static Status NoReply(const HttpResult& h, CallError* err);
  static Status ErrorStatus(const HttpResult& h, const std::string& what, CallError* err);
  static std::string ErrorMessage(const std::string& body);
  // The server reports another vocabulary (fingerprint `theirs`) than the one given.
  Status VocabularyMismatch(const std::string& theirs) const;
  // GET `path` at connect time: sets *reachable; Ok with *body empty when the server did not
  // answer; an error for TLS, key or status problems (`not_200` explains the last).
  Status GetForCheck(const std::string& path, const std::string& not_200, bool* reachable, std::string* body);
  void CountStat(int64_t RemoteStats::*field, int64_t by = 1);
  // One call's work (engines that report per call).
  void AddCallWork(const LlmWork& w);
  // A session's totals as one of its replies reports them (replies may arrive out of order: the
  // largest count wins); a new `generation` (a new session) keeps the old one's totals.
  void NoteSessionWork(uint64_t generation, const LlmWork& totals);

  RemoteOptions opts_;
  const Tokenizer& vocab_;
  HttpTransport http_;
  std::string warning_;
  // Connect's checks: `why` (a reply that is not the server's) is an error with
  // opts.require_reachable; without it the server counts as not reachable now (*reachable false).
  Status NotTheServer(Status why, bool* reachable);
  std::string first_check_error_;  // the first failed check request's error (Connect's message)
  const std::atomic<bool>* connect_cancel_ = nullptr;  // Connect's `cancel`, during Connect

 private:
  Expected<LlmReply> Run(const LlmRequest& req, LlmCall& call);
  mutable std::mutex stats_mu_;
  RemoteStats stats_;
  LlmWork work_;                  // finished sessions and per-call work (under stats_mu_)
  LlmWork session_work_;          // the current session's totals (under stats_mu_)
  uint64_t work_generation_ = 0;  // the session session_work_ belongs to
  bool down_ = false;  // under stats_mu_
  std::chrono::steady_clock::time_point retry_at_;
  std::chrono::steady_clock::time_point busy_until_;  // after a refusal (under stats_mu_)
  uint64_t jitter_state_ = 0;                         // under stats_mu_
  double retry_after_s_ = 1.0;
  std::unique_ptr<CallExecutor> exec_;
};

}  // namespace tlr
