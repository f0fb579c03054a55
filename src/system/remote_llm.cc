// Remote LLM backends: the native session protocol and OpenAI-compatible engines (see
// remote_llm.h and docs/protocol.md).
#include "system/remote_llm.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "system/protocol.h"

namespace tlr {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

json SamplingJson(const SamplerParams& s) {
  return {{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p},
          {"repeat_penalty", s.repeat_penalty}, {"seed", s.seed & 0x7fffffffffffffffull}};
}

std::string ErrorMessage(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return body.substr(0, 200);
}

}  // namespace

struct RemoteLlm::Http {
  bool sent = false;   // a response came back
  int status = 0;
  std::string body;
  std::string error;   // network error when !sent
  bool tls_failure = false;
};

RemoteLlm::RemoteLlm(const RemoteOptions& opts, const Tokenizer& vocab)
    : opts_(opts), vocab_(vocab), retry_after_s_(opts.retry_after_s), rng_(opts.seed) {
  client_ = std::make_unique<httplib::Client>(opts_.url);
  auto us = [](double s) { return std::chrono::microseconds(static_cast<int64_t>(s * 1e6)); };
  client_->set_connection_timeout(us(opts_.timeout_s));
  client_->set_read_timeout(us(opts_.timeout_s));
  client_->set_write_timeout(us(opts_.timeout_s));
  client_->set_keep_alive(true);
  client_->set_tcp_nodelay(true);
  if (!opts_.api_key.empty()) client_->set_bearer_token_auth(opts_.api_key);
  client_->enable_server_certificate_verification(opts_.verify_tls);
  if (!opts_.ca_file.empty()) client_->set_ca_cert_path(opts_.ca_file.c_str());
  std::random_device rd;
  request_prefix_ = HashHex((static_cast<uint64_t>(rd()) << 32) ^ rd()).substr(0, 12);
}

RemoteLlm::~RemoteLlm() {
  if (!session_.empty() && !down_) {
    client_->set_read_timeout(std::chrono::milliseconds(500));
    client_->Delete(("/tlr/v1/sessions/" + session_).c_str());
  }
}

std::string RemoteLlm::name() const { return opts_.backend + " server " + opts_.url; }

Expected<std::unique_ptr<RemoteLlm>> RemoteLlm::Connect(const RemoteOptions& opts, const Tokenizer& vocab) {
  if (opts.backend != "tlr" && opts.backend != "openai") {
    return Status::Error("unknown backend '" + opts.backend + "' (tlr, openai)");
  }
  if (opts.url.rfind("http://", 0) != 0 && opts.url.rfind("https://", 0) != 0) {
    return Status::Error("server URL '" + opts.url + "' must start with http:// or https://");
  }
  if (opts.timeout_s <= 0 || opts.retries < 0 || opts.sim_rtt_s < 0 || opts.sim_jitter_s < 0) {
    return Status::Error("timeouts, retries and simulated delays must not be negative");
  }
  std::unique_ptr<RemoteLlm> r(new RemoteLlm(opts, vocab));
  if (!r->client_->is_valid()) return Status::Error("cannot use server URL '" + opts.url + "'");
  bool reachable = false;
  TLR_RETURN_IF_ERROR(r->CheckServer(&reachable));
  if (!reachable) {
    r->warning_ = "the LLM server at " + opts.url + " is not reachable now; answering with the SLM "
                  "(FALLBACK) until it is";
  }
  return r;
}

void RemoteLlm::SimulateDelay() {
  if (opts_.sim_rtt_s <= 0 && opts_.sim_jitter_s <= 0) return;
  std::uniform_real_distribution<double> u(-opts_.sim_jitter_s, opts_.sim_jitter_s);
  const double d = std::max(0.0, opts_.sim_rtt_s + u(rng_));
  stats_.sim_delay_s += d;
  std::this_thread::sleep_for(std::chrono::duration<double>(d));
}

RemoteLlm::Http RemoteLlm::Request(const std::string& method, const std::string& path, const std::string& body) {
  SimulateDelay();
  ++stats_.http_requests;
  Http h;
  httplib::Result res = method == "GET" ? client_->Get(path.c_str())
                                        : client_->Post(path.c_str(), body, "application/json");
  if (!res) {
    h.error = httplib::to_string(res.error());
    h.tls_failure = res.error() == httplib::Error::SSLServerVerification ||
                    (res.error() == httplib::Error::SSLConnection && opts_.url.rfind("https://", 0) == 0);
    return h;
  }
  h.sent = true;
  h.status = res->status;
  h.body = res->body;
  return h;
}

// POSTs until a response that is not a server-side transient error comes back.
RemoteLlm::Http RemoteLlm::RequestWithRetries(const std::string& path, const std::string& body) {
  double wait = opts_.backoff_s;
  Http h;
  for (int attempt = 0; attempt <= opts_.retries; ++attempt) {
    if (attempt > 0) {
      ++stats_.retries;
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      wait *= 2;
    }
    h = Request("POST", path, body);
    // 503 is the server shedding load: answer with the SLM now rather than add to it.
    if (h.sent && h.status != 500 && h.status != 502 && h.status != 504) return h;
  }
  return h;
}

Status RemoteLlm::CheckServer(bool* reachable) {
  const bool tlr = opts_.backend == "tlr";
  Http h = Request("GET", tlr ? "/tlr/v1/info" : "/v1/models", "");
  *reachable = h.sent;
  if (!h.sent && h.tls_failure) {
    return Status::Error("TLS with " + opts_.url + " failed (" + h.error +
                         "): the certificate is not trusted or not for this host; give its CA with --ca-file");
  }
  if (!h.sent) return Status::Ok();
  if (h.status == 401 || h.status == 403) {
    return Status::Error("the server at " + opts_.url + " refused the API key (" + ErrorMessage(h.body) + ")");
  }
  if (h.status != 200) {
    return Status::Error("the server at " + opts_.url + " answered " + std::to_string(h.status) + " to " +
                         (tlr ? "/tlr/v1/info (is it `tlr serve`? for other engines use the openai backend)"
                              : "/v1/models (is it OpenAI-compatible?)"));
  }
  json j = json::parse(h.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("the server's answer is not JSON");
  std::string fp;
  if (tlr) {
    fp = j.value("vocab_fingerprint", "");
  } else {
    const json data = j.value("data", json::array());
    if (!data.is_array() || data.empty() || !data[0].is_object()) return Status::Error("the server lists no models");
    if (opts_.model.empty()) opts_.model = data[0].value("id", "");
    for (const json& m : data) {
      if (m.is_object() && m.value("id", "") == opts_.model) fp = m.value("tlr_vocab_fingerprint", "");
    }
    if (fp.empty()) {
      warning_ = "the server does not report its vocabulary; make sure its model uses the SLM's tokenizer";
    }
  }
  if (!fp.empty() && fp != HashHex(vocab_.Fingerprint())) {
    return Status::Error("the server's LLM uses a different vocabulary (fingerprint " + fp + ", the SLM's is " +
                         HashHex(vocab_.Fingerprint()) + "): token routing needs one tokenizer");
  }
  return Status::Ok();
}

Status RemoteLlm::CreateSession() {
  Http h = RequestWithRetries("/tlr/v1/sessions", "{}");
  if (!h.sent) {
    transient_ = true;
    return Status::Error("LLM server unreachable: " + h.error);
  }
  if (h.status != 201) return Status::Error("creating a session failed (" + std::to_string(h.status) + "): " + ErrorMessage(h.body));
  json j = json::parse(h.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("session") || !j["session"].is_string()) {
    return Status::Error("the server's session reply is malformed");
  }
  if (j.value("vocab_fingerprint", "") != HashHex(vocab_.Fingerprint())) {
    return Status::Error("the server's LLM uses a different vocabulary: token routing needs one tokenizer");
  }
  session_ = j["session"].get<std::string>();
  held_.clear();
  ++stats_.sessions_created;
  return Status::Ok();
}

void RemoteLlm::Reset() {
  // The session stays: the next call's prefix match decides what the server keeps.
}

Expected<LlmReply> RemoteLlm::Next(std::span<const int32_t> context, int n, const SamplerParams& sampling) {
  if (context.empty()) return Status::Error("the LLM needs at least one context token");
  if (n < 1) return Status::Error("ask the LLM for at least one token");
  ++stats_.calls;
  if (down_ && Clock::now() < retry_at_) {
    ++stats_.failed_calls;
    return Status::Error("LLM server unavailable (retrying soon)");
  }
  transient_ = false;
  auto r = opts_.backend == "tlr" ? NextTlr(context, n, sampling) : NextOpenAi(context, n, sampling);
  if (r.ok()) {
    down_ = false;
    retry_after_s_ = opts_.retry_after_s;
  } else {
    ++stats_.failed_calls;
    // Only an outage (no answer, 5xx) makes the next calls fail fast; a refused call does not.
    if (transient_) {
      if (down_) retry_after_s_ = std::min(retry_after_s_ * 2, 30.0);
      down_ = true;
      retry_at_ = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(retry_after_s_ * 1e6));
    }
  }
  return r;
}

Expected<LlmReply> RemoteLlm::NextTlr(std::span<const int32_t> context, int n, const SamplerParams& sampling) {
  if (session_.empty()) TLR_RETURN_IF_ERROR(CreateSession());
  for (int round = 0; round < 4; ++round) {
    size_t common = 0;
    while (common < held_.size() && common < context.size() && held_[common] == context[common]) ++common;
    common = std::min(common, context.size() - 1);
    const std::span<const int32_t> append = context.subspan(common);
    json body = {{"session", session_},
                 {"request_id", request_prefix_ + "-" + std::to_string(++request_seq_)},
                 {"base", common},
                 {"prefix_hash", HashHex(TokenPrefixHash(context.first(common)))},
                 {"append", std::vector<int32_t>(append.begin(), append.end())},
                 {"n", n},
                 {"timeout_ms", static_cast<int64_t>(opts_.timeout_s * 1e3)},
                 {"sampling", SamplingJson(sampling)}};
    stats_.tokens_sent += static_cast<int64_t>(append.size());
    Http h = RequestWithRetries("/tlr/v1/next", body.dump());
    if (!h.sent) {
      // Whether or not the call went through, the session still holds the common prefix
      // (the server checks it by hash anyway).
      held_.assign(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(common));
      transient_ = true;
      return Status::Error("LLM server unreachable: " + h.error);
    }
    json j = json::parse(h.body, nullptr, false);
    if (h.status == 409 && !j.is_discarded() && j.is_object()) {
      ++stats_.resyncs;
      const int64_t held = j.value("held", int64_t{0});
      uint64_t hash = 0;
      const bool usable = held >= 0 && held <= static_cast<int64_t>(context.size()) &&
                          ParseHashHex(j.value("held_hash", ""), &hash) &&
                          TokenPrefixHash(context.first(static_cast<size_t>(held))) == hash;
      held_.assign(context.begin(), context.begin() + (usable ? held : 0));
      continue;
    }
    if (h.status == 404) {  // the session is gone (expired, server restarted)
      ++stats_.resyncs;
      TLR_RETURN_IF_ERROR(CreateSession());
      continue;
    }
    if (h.status != 200) {
      transient_ = h.status >= 500;
      return Status::Error("LLM server error " + std::to_string(h.status) + ": " + ErrorMessage(h.body));
    }
    if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
      return Status::Error("the LLM server's reply is malformed");
    }
    LlmReply reply;
    for (const json& t : j["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_.n_vocab()) {
        return Status::Error("the LLM server returned a token outside the vocabulary");
      }
      reply.tokens.push_back(t.get<int32_t>());
    }
    if (reply.tokens.empty()) return Status::Error("the LLM server returned no tokens");
    if (j.contains("logprobs") && j["logprobs"].is_array()) {
      for (const json& l : j["logprobs"]) reply.logprobs.push_back(l.is_number() ? l.get<float>() : 0.0f);
    }
    reply.ingested = static_cast<int64_t>(append.size());
    // The server holds the context and the returned tokens it fed back (all but the last).
    held_.assign(context.begin(), context.end());
    held_.insert(held_.end(), reply.tokens.begin(), reply.tokens.end());
    const int64_t position = j.value("position", int64_t{-1});
    if (position < 0 || position > static_cast<int64_t>(held_.size())) {
      held_.clear();
    } else {
      held_.resize(static_cast<size_t>(position));
    }
    return reply;
  }
  return Status::Error("the LLM server kept rejecting the session's state (resync failed)");
}

Expected<LlmReply> RemoteLlm::NextOpenAi(std::span<const int32_t> context, int n, const SamplerParams& sampling) {
  json body = {{"model", opts_.model},
               {"prompt", std::vector<int32_t>(context.begin(), context.end())},
               {"max_tokens", n},
               {"temperature", sampling.temperature},
               {"top_p", sampling.top_p},
               {"seed", sampling.seed & 0x7fffffffffffffffull},
               {"logprobs", 1},
               {"return_tokens_as_token_ids", true}};
  if (sampling.temperature > 0 && sampling.top_k > 0) body["top_k"] = sampling.top_k;
  stats_.tokens_sent += static_cast<int64_t>(context.size());
  Http h = RequestWithRetries("/v1/completions", body.dump());
  if (!h.sent) {
    transient_ = true;
    return Status::Error("LLM server unreachable: " + h.error);
  }
  if (h.status != 200) {
    transient_ = h.status >= 500;
    return Status::Error("LLM server error " + std::to_string(h.status) + ": " + ErrorMessage(h.body));
  }
  json j = json::parse(h.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
    return Status::Error("the LLM server's completion reply is malformed");
  }
  const json& choice = j["choices"][0];
  LlmReply reply;
  reply.ingested = static_cast<int64_t>(context.size());
  auto valid = [&](int64_t id) { return id >= 0 && id < vocab_.n_vocab(); };
  // 1. tlr serve's token ids; 2. vLLM's "token_id:N" strings; 3. the text, tokenized.
  if (j.contains("tlr") && j["tlr"].is_object() && j["tlr"].contains("token_ids") && j["tlr"]["token_ids"].is_array()) {
    for (const json& t : j["tlr"]["token_ids"]) {
      if (!t.is_number_integer() || !valid(t.get<int64_t>())) return Status::Error("the LLM server returned a token outside the vocabulary");
      reply.tokens.push_back(t.get<int32_t>());
    }
  } else if (choice.contains("logprobs") && choice["logprobs"].is_object() && choice["logprobs"].contains("tokens") &&
             choice["logprobs"]["tokens"].is_array()) {
    for (const json& t : choice["logprobs"]["tokens"]) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s.rfind("token_id:", 0) != 0) {
        reply.tokens.clear();
        break;
      }
      const int64_t id = std::strtoll(s.c_str() + 9, nullptr, 10);
      if (!valid(id)) return Status::Error("the LLM server returned a token outside the vocabulary");
      reply.tokens.push_back(static_cast<int32_t>(id));
    }
  }
  if (reply.tokens.empty()) {
    const std::string text = choice.value("text", "");
    if (text.empty()) {
      // An empty completion: the engine stopped at its end-of-generation token.
      reply.tokens.push_back(vocab_.eos());
    } else {
      reply.tokens = vocab_.Encode(text);
      if (static_cast<int>(reply.tokens.size()) > n) reply.tokens.resize(static_cast<size_t>(n));
    }
  }
  if (choice.contains("logprobs") && choice["logprobs"].is_object() && choice["logprobs"].contains("token_logprobs") &&
      choice["logprobs"]["token_logprobs"].is_array()) {
    for (const json& l : choice["logprobs"]["token_logprobs"]) reply.logprobs.push_back(l.is_number() ? l.get<float>() : 0.0f);
  }
  // Our server reports the end token in token_ids; engines that stop silently ("stop" with
  // fewer tokens than asked) ended at theirs.
  if (static_cast<int>(reply.tokens.size()) < n && choice.value("finish_reason", "") == "stop" &&
      !vocab_.IsEndOfGeneration(reply.tokens.back())) {
    reply.tokens.push_back(vocab_.eos());
  }
  return reply;
}

}  // namespace tlr
