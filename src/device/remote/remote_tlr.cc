// The native session protocol of `tlr serve` on the device side (see remote_llm.h and
// docs/protocol.md): sessions, delta sync with pipelined calls, 409 resync, idempotent retries.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "device/remote/remote_protocols.h"
#include "device/remote/remote_replies.h"
#include "net/protocol.h"

namespace tlr {

using nlohmann::json;

namespace {

json SamplingJson(const SamplerParams& s) {
  return {{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p},
          {"repeat_penalty", s.repeat_penalty}, {"repeat_last_n", s.repeat_last_n},
          {"seed", s.seed & 0x7fffffffffffffffull}};
}

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t c = 0;
  while (c < a.size() && c < b.size() && a[c] == b[c]) ++c;
  return c;
}

}  // namespace

TlrServerLlm::TlrServerLlm(const RemoteOptions& opts, const Tokenizer& vocab) : RemoteLlm(opts, vocab) {
  std::random_device rd;
  request_prefix_ = HashHex((static_cast<uint64_t>(rd()) << 32) ^ rd()).substr(0, 12);
}

TlrServerLlm::~TlrServerLlm() {
  StopWorkers();
  if (!session_.empty() && reachable_) http_.DeleteQuietly("/tlr/v1/sessions/" + session_);
}

int64_t TlrServerLlm::HeldPrefix(std::span<const int32_t> context) const {
  std::lock_guard<std::mutex> l(mu_);
  size_t c = 0;
  while (c < held_.size() && c < context.size() && held_[c] == context[c]) ++c;
  return static_cast<int64_t>(c);
}

Status TlrServerLlm::CheckServer(bool* reachable) {
  std::string body;
  TLR_RETURN_IF_ERROR(GetForCheck("/tlr/v1/info", "is it `tlr serve`? for other engines use the openai backend",
                                  reachable, &body));
  reachable_ = *reachable;
  if (!*reachable) return Status::Ok();
  auto info = remote::ParseInfoReply(body);
  if (!info.ok()) {
    reachable_ = false;
    return NotTheServer(info.status(), reachable);
  }
  spells_prefix_ = std::find(info->features.begin(), info->features.end(), "prefix_bytes") != info->features.end();
  const std::string& fp = info->vocab_fingerprint;
  if (!fp.empty() && fp != HashHex(vocab_.Fingerprint())) {
    return VocabularyMismatch(fp);
  }
  return Status::Ok();
}

void TlrServerLlm::Prepare(LlmCall* call) {
  std::string id;
  uint64_t generation = 0;
  CallError err;
  (void)EnsureSession(0, &id, &generation, &err, call);  // a failure is retried by the first call
}

Status TlrServerLlm::EnsureSession(uint64_t stale, std::string* id, uint64_t* generation, CallError* err,
                                   LlmCall* call) {
  std::lock_guard<std::mutex> create(session_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!session_.empty() && session_generation_ != stale) {
      *id = session_;
      *generation = session_generation_;
      return Status::Ok();
    }
  }
  HttpResult h = http_.PostWithRetries("/tlr/v1/sessions", "{}", call);
  if (!h.sent) return NoReply(h, err);
  if (h.status != 201) return ErrorStatus(h, "creating a session failed", err);
  auto reply = remote::ParseSessionReply(h.body);
  if (!reply.ok()) return reply.status();
  if (reply->vocab_fingerprint != HashHex(vocab_.Fingerprint())) {
    err->kind = CallFailure::kServerError;
    return Status::Error("the server's LLM uses a different vocabulary than the one this device expects");
  }
  CountStat(&RemoteStats::sessions_created);
  std::lock_guard<std::mutex> l(mu_);
  reachable_ = true;
  session_ = reply->session;
  ++session_generation_;
  held_.clear();
  held_version_ = -1;
  // Calls given up on in the old session cannot touch the new one.
  std::erase_if(in_flight_, [](const auto& e) { return e.second.until != HttpTransport::Clock::time_point::max(); });
  *id = session_;
  *generation = session_generation_;
  return Status::Ok();
}

Expected<LlmReply> TlrServerLlm::Execute(const LlmRequest& req, LlmCall& call, CallError* err) {
  const std::vector<int32_t>& context = req.context;
  std::string session;
  uint64_t generation = 0;
  TLR_RETURN_IF_ERROR(EnsureSession(0, &session, &generation, err, &call));
  HttpTransport::Clock::time_point deadline = http_.Deadline();  // of the call, all rounds included
  const std::string request_base = [&] {
    std::lock_guard<std::mutex> l(mu_);
    return request_prefix_ + "-" + std::to_string(++request_seq_);
  }();
  for (int round = 0; round < 4; ++round) {
    // The base: what the session surely holds when this call arrives, whatever order the
    // server runs the calls in flight in (each leaves the session holding its own context).
    size_t base;
    uint64_t me;
    {
      std::lock_guard<std::mutex> l(mu_);
      const auto now = HttpTransport::Clock::now();
      std::erase_if(in_flight_, [&](const auto& e) {
        if (e.second.until >= now) return false;
        // Whether or not it ran, held_ may be older than its rewind: keep only what both share.
        held_.resize(CommonPrefix(held_, e.second.context));
        return true;
      });
      base = CommonPrefix(held_, context);
      for (const auto& [other, f] : in_flight_) base = std::min(base, CommonPrefix(f.context, context));
      base = std::min(base, context.size() - 1);
      me = next_call_++;
      in_flight_.emplace(me, InFlight{context});
    }
    const std::span<const int32_t> all(context);
    const std::span<const int32_t> append = all.subspan(base);
    const int64_t timeout_ms =  // what is left of this call's time (earlier rounds used some)
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - HttpTransport::Clock::now()).count());
    json body = {{"session", session},
                 {"request_id", request_base + "." + std::to_string(round)},
                 {"base", base},
                 {"prefix_hash", HashHex(TokenPrefixHash(all.first(base)))},
                 {"append", std::vector<int32_t>(append.begin(), append.end())},
                 {"n", req.n},
                 {"timeout_ms", timeout_ms},
                 {"sampling", SamplingJson(req.sampling)}};
    if (req.lookahead > 0) body["lookahead"] = req.lookahead;
    if (!req.prefix.empty() && spells_prefix_) {  // bytes: the text may end inside a character
      std::vector<int> bytes;
      for (char c : req.prefix) bytes.push_back(static_cast<unsigned char>(c));
      body["prefix_bytes"] = bytes;
    }
    CountStat(&RemoteStats::tokens_sent, static_cast<int64_t>(append.size()));
    HttpResult h = http_.PostWithRetries("/tlr/v1/next", body.dump(), &call, &deadline);
    std::unique_lock<std::mutex> l(mu_);
    // Given up on without the server's own reply (a proxy's 502/504 is not one): it may still
    // run there (InFlight), at the latest timeout_ms after its last retry arrived, which was
    // sent before the deadline.
    if ((h.sent && h.status != 502 && h.status != 504) || !h.attempted) {
      in_flight_.erase(me);
    } else {
      in_flight_[me].until = deadline + std::chrono::milliseconds(timeout_ms) + std::chrono::seconds(1);
    }
    if (h.cancelled) return Status::Error("the call was cancelled");
    if (!h.sent) {
      // Whether or not the call went through, the session still holds the common prefix
      // (the server checks it by hash anyway).
      held_.resize(std::min(held_.size(), base));
      return NoReply(h, err);
    }
    if (h.status == 409) {
      auto resync = remote::ParseResyncReply(h.body);
      if (!resync.ok()) return resync.status();
      CountStat(&RemoteStats::resyncs);
      const int64_t held = resync->held;
      const bool usable = held >= 0 && held <= static_cast<int64_t>(context.size()) && resync->hash_ok &&
                          TokenPrefixHash(all.first(static_cast<size_t>(held))) == resync->held_hash;
      held_.assign(context.begin(), context.begin() + (usable ? held : 0));
      held_version_ = resync->version;
      continue;
    }
    if (h.status == 404) {  // the session is gone (expired, server restarted)
      CountStat(&RemoteStats::resyncs);
      l.unlock();
      TLR_RETURN_IF_ERROR(EnsureSession(generation, &session, &generation, err, &call));
      continue;
    }
    if (h.status != 200) return ErrorStatus(h, "LLM server error", err);
    auto parsed = remote::ParseNextReply(h.body, vocab_.n_vocab());
    if (!parsed.ok()) return parsed.status();
    if (parsed->has_work) NoteSessionWork(generation, parsed->session_work);
    LlmReply reply;
    reply.tokens = std::move(parsed->tokens);
    reply.lookahead = std::move(parsed->lookahead);
    reply.logprobs = std::move(parsed->logprobs);
    reply.ingested = static_cast<int64_t>(append.size());
    // The server holds the context and the returned tokens it fed back (all but the last), if
    // no later call has changed the session since: trust the newest version only.
    const int64_t version = parsed->version;
    if (version < 0 || version > held_version_) {
      held_ = context;
      held_.insert(held_.end(), reply.tokens.begin(), reply.tokens.end());
      held_.insert(held_.end(), reply.lookahead.begin(), reply.lookahead.end());
      const int64_t position = parsed->position;
      if (position < 0 || position > static_cast<int64_t>(held_.size())) {
        held_.clear();
      } else {
        held_.resize(static_cast<size_t>(position));
      }
      held_version_ = version;
    }
    return reply;
  }
  return Status::Error("the LLM server kept rejecting the session's state (resync failed)");
}

}  // namespace tlr
