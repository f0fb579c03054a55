// Parsing the LLM server's replies on the device (see remote_replies.h).
#include "device/remote/remote_replies.h"

#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "net/protocol.h"
#include "util/json_fields.h"
#include "util/utf8.h"

namespace tlr::remote {

using nlohmann::json;

std::string ErrorMessage(std::string_view body) {
  auto j = ParseJson(body);
  if (j.ok() && j->is_object()) {
    const json* error = nullptr;
    std::string message;
    JsonFields f(*j);
    f.Object("error", &error, kRequired);
    if (error) JsonFields(*error).String("message", &message, kRequired);
    if (!message.empty()) return SanitizeUtf8(message.substr(0, 500));
  }
  return SanitizeUtf8(body.substr(0, 200));
}

std::string ErrorCode(std::string_view body) {
  auto j = ParseJson(body);
  if (!j.ok() || !j->is_object()) return {};
  const json* error = nullptr;
  std::string code;
  JsonFields f(*j);
  f.Object("error", &error, kRequired);
  if (error && error->is_object()) JsonFields(*error).String("code", &code, kRequired);
  return code.size() <= 64 ? code : std::string();
}

namespace {

Expected<json> ParseReply(std::string_view body, const char* what) {
  auto j = ParseJson(body);
  if (!j.ok()) return Status::Error(std::string(what) + " is " + j.status().message());
  if (!j->is_object()) return Status::Error(std::string(what) + " is not a JSON object");
  return j;
}

Expected<SessionReply> ParseSessionOrInfo(std::string_view body, bool session) {
  const char* what = session ? "the server's session reply" : "the server's info reply";
  TLR_ASSIGN_OR_RETURN(json j, ParseReply(body, what));
  SessionReply r;
  JsonFields f(j, what);
  const json* features = nullptr;
  f.String("vocab_fingerprint", &r.vocab_fingerprint).Array("features", &features);
  if (session) f.String("session", &r.session, kRequired);
  TLR_RETURN_IF_ERROR(f.status());
  if (features) {
    for (const json& x : *features) {
      if (x.is_string() && r.features.size() < 64) r.features.push_back(x.get<std::string>());
    }
  }
  if (session && r.session.empty()) return Status::Error(std::string(what) + ": 'session' is empty");
  return r;
}

// "token_id:N" (vLLM's return_tokens_as_token_ids); false for anything else.
bool ParseTokenIdLabel(const std::string& s, int64_t* id) {
  constexpr std::string_view kPrefix = "token_id:";
  if (s.size() <= kPrefix.size() || s.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  const char* first = s.data() + kPrefix.size();
  const char* last = s.data() + s.size();
  auto [end, ec] = std::from_chars(first, last, *id);
  return ec == std::errc() && end == last;
}

// One completion choice (a whole reply's, or one streamed event's): appends its token ids (when
// the engine labels tokens with ids), text and logprobs. *labelled: every token had an id label.
Status ReadChoice(const json& choice, int64_t n_vocab, std::vector<int32_t>* ids, bool* labelled, std::string* text,
                  std::vector<float>* logprobs, std::string* finish) {
  const json* lp = nullptr;
  std::string t;
  JsonFields f(choice, "the completion's choice");
  f.String("text", &t, kRequired).String("finish_reason", finish).Object("logprobs", &lp);
  TLR_RETURN_IF_ERROR(f.status());
  *text += t;
  if (!lp) return Status::Ok();
  const json* tokens = nullptr;
  std::vector<float> lps;
  JsonFields lf(*lp, "the completion's logprobs");
  lf.Array("tokens", &tokens).Numbers("token_logprobs", &lps);
  TLR_RETURN_IF_ERROR(lf.status());
  logprobs->insert(logprobs->end(), lps.begin(), lps.end());
  if (!tokens) return Status::Ok();
  for (const json& e : *tokens) {
    if (!e.is_string()) return Status::Error("the completion's logprobs: 'tokens' must hold strings");
    int64_t id = 0;
    if (!ParseTokenIdLabel(e.get<std::string>(), &id)) {
      // Text labels (an engine without return_tokens_as_token_ids): only the text counts; a
      // label that starts like an id but is not one is an error, not token 0.
      if (e.get<std::string>().rfind("token_id:", 0) == 0) {
        return Status::Error("the completion's token label '" + SanitizeUtf8(e.get<std::string>().substr(0, 40)) +
                             "' is not a token id");
      }
      *labelled = false;
      continue;
    }
    if (id < 0 || id >= n_vocab) {
      return Status::Error("the LLM server returned token id " + std::to_string(id) + " outside the vocabulary");
    }
    ids->push_back(static_cast<int32_t>(id));
  }
  return Status::Ok();
}

struct RawCompletion {
  std::vector<int32_t> tlr_ids;  // tlr serve's token ids
  std::vector<int32_t> labels;   // vLLM's "token_id:N" labels
  bool all_labelled = true;      // every token had an id label
  std::string text;
  std::vector<float> logprobs;
  std::string finish;
  int64_t tlr_prefilled = -1, prompt_tokens = -1, cached_tokens = -1, completion_tokens = -1;
};

Status ReadCompletionObject(const json& j, int64_t n_vocab, RawCompletion* out) {
  const json* choices = nullptr;
  const json* tlr = nullptr;
  const json* error = nullptr;
  JsonFields f(j, "the completion reply");
  f.Object("error", &error);
  if (error) return Status::Error("the LLM server reported an error: " + ErrorMessage(DumpJson(j)));
  const json* usage = nullptr;
  f.Array("choices", &choices, kRequired).Object("tlr", &tlr).Object("usage", &usage);
  TLR_RETURN_IF_ERROR(f.status());
  if (usage) {
    const json* details = nullptr;
    JsonFields uf(*usage, "the completion reply's 'usage'");
    uf.Int("prompt_tokens", 0, int64_t{1} << 40, &out->prompt_tokens)
        .Int("completion_tokens", 0, int64_t{1} << 40, &out->completion_tokens)
        .Object("prompt_tokens_details", &details);
    TLR_RETURN_IF_ERROR(uf.status());
    if (details) {
      JsonFields df(*details, "the completion reply's 'usage.prompt_tokens_details'");
      df.Int("cached_tokens", 0, int64_t{1} << 40, &out->cached_tokens);
      TLR_RETURN_IF_ERROR(df.status());
    }
  }
  if (choices->empty()) return Status::Error("the completion reply has no choices");
  TLR_RETURN_IF_ERROR(ReadChoice((*choices)[0], n_vocab, &out->labels, &out->all_labelled, &out->text,
                                 &out->logprobs, &out->finish));
  if (tlr) {
    std::vector<int32_t> ids;
    JsonFields tf(*tlr, "the completion reply's 'tlr'");
    tf.TokenIds("token_ids", n_vocab, &ids).Int("prefilled", 0, int64_t{1} << 40, &out->tlr_prefilled);
    TLR_RETURN_IF_ERROR(tf.status());
    out->tlr_ids.insert(out->tlr_ids.end(), ids.begin(), ids.end());
  }
  return Status::Ok();
}

}  // namespace

Expected<SessionReply> ParseInfoReply(std::string_view body) { return ParseSessionOrInfo(body, false); }
Expected<SessionReply> ParseSessionReply(std::string_view body) { return ParseSessionOrInfo(body, true); }

Expected<ResyncReply> ParseResyncReply(std::string_view body) {
  TLR_ASSIGN_OR_RETURN(json j, ParseReply(body, "the server's 409 reply"));
  ResyncReply r;
  std::string hash;
  JsonFields f(j, "the server's 409 reply");
  f.Int("held", 0, int64_t{1} << 40, &r.held).String("held_hash", &hash).Int("version", -1, INT64_MAX, &r.version);
  TLR_RETURN_IF_ERROR(f.status());
  r.hash_ok = ParseHashHex(hash, &r.held_hash);
  return r;
}

Expected<NextReply> ParseNextReply(std::string_view body, int64_t n_vocab) {
  TLR_ASSIGN_OR_RETURN(json j, ParseReply(body, "the LLM server's reply"));
  NextReply r;
  JsonFields f(j, "the LLM server's reply");
  f.TokenIds("tokens", n_vocab, &r.tokens, kRequired).TokenIds("lookahead", n_vocab, &r.lookahead);
  f.Numbers("logprobs", &r.logprobs).Int("position", -1, int64_t{1} << 40, &r.position);
  f.Int("version", -1, INT64_MAX, &r.version);
  const json* work = nullptr;
  f.Object("session_work", &work);
  TLR_RETURN_IF_ERROR(f.status());
  if (r.tokens.empty()) return Status::Error("the LLM server returned no tokens");
  if (work) {
    double forward_ms = -1;
    JsonFields wf(*work, "the LLM server's reply: 'session_work'");
    wf.Int("prefilled", 0, int64_t{1} << 50, &r.session_work.prefilled, kRequired)
        .Int("generated", 0, int64_t{1} << 50, &r.session_work.generated, kRequired)
        .Number("forward_ms", 0, 1e15, &forward_ms);
    TLR_RETURN_IF_ERROR(wf.status());
    r.session_work.forward_s = forward_ms < 0 ? -1 : forward_ms * 1e-3;
    r.has_work = true;
  }
  return r;
}

Expected<ModelsReply> ParseModelsReply(std::string_view body, const std::string& model) {
  TLR_ASSIGN_OR_RETURN(json j, ParseReply(body, "the server's model list"));
  const json* data = nullptr;
  JsonFields f(j, "the server's model list");
  f.Array("data", &data, kRequired);
  TLR_RETURN_IF_ERROR(f.status());
  if (data->empty()) return Status::Error("the server lists no models");
  ModelsReply r;
  r.model = model;
  for (size_t i = 0; i < data->size(); ++i) {
    std::string id, fp;
    JsonFields m((*data)[i], "the server's model list: model " + std::to_string(i));
    m.String("id", &id, kRequired).String("tlr_vocab_fingerprint", &fp);
    TLR_RETURN_IF_ERROR(m.status());
    if (r.model.empty()) r.model = id;
    if (id == r.model && r.vocab_fingerprint.empty()) r.vocab_fingerprint = fp;
  }
  return r;
}

Expected<CompletionReply> ParseCompletionReply(std::string_view body, const Tokenizer& vocab, int want) {
  if (want < 1) return Status::Error("a completion must ask for at least one token");
  RawCompletion raw;
  const size_t start = body.find_first_not_of(" \t\r\n");
  if (start != std::string_view::npos && body.compare(start, 5, "data:") == 0) {
    // Server-Sent Events: one completion object per `data:` line, until [DONE].
    bool first = true, done = false;
    size_t pos = 0;
    while (pos < body.size() && !done) {
      size_t eol = body.find('\n', pos);
      if (eol == std::string_view::npos) eol = body.size();
      std::string_view line = body.substr(pos, eol - pos);
      pos = eol + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.rfind("data:", 0) != 0) continue;  // comments, event names, blank separators
      std::string_view data = line.substr(5);
      while (!data.empty() && data.front() == ' ') data.remove_prefix(1);
      if (data == "[DONE]") {
        done = true;
        break;
      }
      auto j = ParseJson(data);
      if (!j.ok()) return Status::Error("a streamed completion event is " + j.status().message());
      TLR_RETURN_IF_ERROR(ReadCompletionObject(*j, vocab.n_vocab(), &raw));
      first = false;
    }
    if (first) return Status::Error("the completion stream has no events");
  } else {
    auto j = ParseJson(body);
    if (!j.ok()) return Status::Error("the completion reply is " + j.status().message());
    TLR_RETURN_IF_ERROR(ReadCompletionObject(*j, vocab.n_vocab(), &raw));
  }
  CompletionReply r;
  if (!raw.tlr_ids.empty()) {
    r.tokens = std::move(raw.tlr_ids);
  } else if (raw.all_labelled && !raw.labels.empty()) {
    r.tokens = std::move(raw.labels);
  } else if (raw.text.empty()) {
    r.tokens.push_back(vocab.eos());  // an empty completion: the engine stopped at its end token
  } else {
    // The text continues the prompt: no dummy prefix, no normalization.
    r.tokens = vocab.EncodeExact(raw.text, /*at_start=*/false);
    if (r.tokens.empty()) r.tokens.push_back(vocab.eos());
  }
  if (static_cast<int>(r.tokens.size()) > want) r.tokens.resize(static_cast<size_t>(want));
  // Our server reports the end token in token_ids; engines that stop silently ("stop" with
  // fewer tokens than asked) ended at theirs.
  if (static_cast<int>(r.tokens.size()) < want && raw.finish == "stop" && !vocab.IsEndOfGeneration(r.tokens.back())) {
    r.tokens.push_back(vocab.eos());
  }
  r.hit_length = raw.finish == "length";
  r.logprobs = std::move(raw.logprobs);
  if (raw.tlr_prefilled >= 0) {
    r.prefilled = raw.tlr_prefilled;
  } else if (raw.prompt_tokens >= 0) {
    r.prefilled = std::max<int64_t>(0, raw.prompt_tokens - std::max<int64_t>(0, raw.cached_tokens));
  }
  r.generated = raw.completion_tokens;
  return r;
}

Expected<std::vector<std::vector<int32_t>>> ParseScoreReply(std::string_view body, const std::vector<size_t>& lengths,
                                                            int64_t n_vocab) {
  auto j = ParseJson(body);
  if (!j.ok()) return Status::Error("the score reply is " + j.status().message());
  if (!j->is_object() || !j->contains("results") || !(*j)["results"].is_array()) {
    return Status::Error("the score reply has no 'results' array");
  }
  const json& results = (*j)["results"];
  if (results.size() != lengths.size()) {
    return Status::Error("the score reply has " + std::to_string(results.size()) + " results for " +
                         std::to_string(lengths.size()) + " sequences");
  }
  std::vector<std::vector<int32_t>> out(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    const std::string where = "score result " + std::to_string(i);
    if (!results[i].is_object() || !results[i].contains("argmax")) return Status::Error(where + " has no 'argmax'");
    TLR_RETURN_IF_ERROR(ReadTokenIds(results[i]["argmax"], where + " 'argmax'", n_vocab, &out[i]));
    if (out[i].size() != lengths[i]) {
      return Status::Error(where + " has " + std::to_string(out[i].size()) + " predictions for a sequence of " +
                           std::to_string(lengths[i]) + " tokens");
    }
  }
  return out;
}

Expected<std::vector<int32_t>> ParsePromptLogprobsReply(std::string_view body, size_t n, const Tokenizer& vocab) {
  auto j = ParseJson(body);
  if (!j.ok()) return Status::Error("the completion reply is " + j.status().message());
  if (!j->is_object() || !j->contains("choices") || !(*j)["choices"].is_array() || (*j)["choices"].empty() ||
      !(*j)["choices"][0].is_object()) {
    return Status::Error("the completion reply has no choices");
  }
  const json& choice = (*j)["choices"][0];
  auto pl = choice.find("prompt_logprobs");
  if (pl == choice.end() || !pl->is_array()) {
    return Status::Error("the completion reply has no 'prompt_logprobs' (the engine must support vLLM's prompt_logprobs)");
  }
  if (pl->size() != n) {
    return Status::Error("'prompt_logprobs' has " + std::to_string(pl->size()) + " entries for a prompt of " +
                         std::to_string(n) + " tokens");
  }
  const int64_t V = vocab.n_vocab();
  std::vector<int32_t> out;
  for (size_t p = 1; p < n; ++p) {
    const json& d = (*pl)[p];
    const std::string where = "prompt_logprobs[" + std::to_string(p) + "]";
    if (!d.is_object()) return Status::Error(where + " is not an object of token ids");
    int64_t best = -1;
    for (auto it = d.begin(); it != d.end(); ++it) {
      if (!it->is_object() || !it->contains("rank") || !(*it)["rank"].is_number_integer()) {
        return Status::Error(where + " entry '" + it.key() + "' has no integer 'rank'");
      }
      if ((*it)["rank"].get<int64_t>() != 1) continue;
      char* end = nullptr;
      const long long id = std::strtoll(it.key().c_str(), &end, 10);
      if (it.key().empty() || *end != '\0' || id < 0 || id >= V) {
        return Status::Error(where + " names token '" + it.key() + "', not an id in the vocabulary (0.." +
                             std::to_string(V - 1) + ")");
      }
      best = id;
    }
    if (best < 0) return Status::Error(where + " has no rank-1 entry (ask for prompt_logprobs >= 1)");
    out.push_back(static_cast<int32_t>(best));
  }
  // After the whole sequence: the greedy token the engine generated.
  auto gen = ParseCompletionReply(body, vocab, 1);
  if (!gen.ok()) return gen.status();
  if (gen->tokens.size() != 1) return Status::Error("the completion reply has no generated token");
  out.push_back(gen->tokens[0]);
  return out;
}

}  // namespace tlr::remote
