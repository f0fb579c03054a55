// libFuzzer target for the server's request bodies (server layer, fuzz label), driven in
// process without a socket: the body parsed as the handlers parse it (depth limit, object
// check), then the endpoint's own parser — POST /tlr/v1/next, /v1/completions,
// /v1/chat/completions (both chat formats) — and the error body the handler would send. The
// first byte picks the endpoint. Any bytes must give a request or an error; the error body
// must serialize (no exception on invalid UTF-8); accepted token ids are inside the vocabulary.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "model/tokenizer/fuzz_vocab.h"
#include "model/tokenizer/tokenizer.h"
#include "net/openai_requests.h"
#include "server/server_requests.h"
#include "util/json_fields.h"

namespace {

tlr::Tokenizer* g_tok = nullptr;

void Check(bool ok) {
  if (!ok) std::abort();
}

// What SendError writes: must never throw.
void ErrorBody(const tlr::Status& s) {
  Check(!s.ok() && !s.message().empty());
  const nlohmann::json j = {{"error", {{"code", "invalid_request"}, {"message", s.message()}}}};
  Check(!tlr::DumpJson(j).empty());
}

void CheckIds(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) Check(id >= 0 && id < g_tok->n_vocab());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_tok = tlr::LoadFuzzVocab("gpt-2");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto j = tlr::ParseJson(body);
  if (!j.ok()) {
    ErrorBody(j.status());
    return 0;
  }
  if (!j->is_object()) return 0;  // the handlers' 400 "must be a JSON object"
  const int which = static_cast<uint8_t>(data[0] - '0') % 5;  // seeds start with a digit
  if (which == 4) {
    tlr::EngineLimits limits;
    auto r = tlr::server::ParseScoreRequest(*j, limits, g_tok->n_vocab());
    if (!r.ok()) return ErrorBody(r.status()), 0;
    Check(!r->sequences.empty() && r->sequences.size() <= tlr::server::kMaxScoreSequences);
    for (const auto& q : r->sequences) {
      Check(!q.empty() && static_cast<int64_t>(q.size()) <= limits.max_context);
      CheckIds(q);
    }
    return 0;
  }
  if (which == 0) {
    tlr::EngineLimits limits;
    auto r = tlr::server::ParseNextRequest(*j, limits, g_tok->n_vocab());
    if (!r.ok()) return ErrorBody(r.status()), 0;
    CheckIds(r->append);
    Check(r->n >= 1 && r->n <= limits.max_tokens_per_call && r->base >= 0 && !r->session.empty());
    Check(r->sampling.Validate().ok());
  } else {
    const bool chat = which >= 2;
    const tlr::ChatTemplate tmpl =
        tlr::ChatTemplate::Builtin(which == 3 ? tlr::ChatFormat::kLlama3 : tlr::ChatFormat::kChatMl);
    auto r = tlr::ParseOpenAiRequest(*j, chat, *g_tok, &tmpl, tlr::OpenAiSamplingDefaults());
    if (!r.ok()) return ErrorBody(r.status()), 0;
    CheckIds(r->prompt);
    Check(r->sampling.Validate().ok() && r->logprobs >= -1 && r->logprobs <= 20 && r->stop.size() <= 4);
  }
  return 0;
}
