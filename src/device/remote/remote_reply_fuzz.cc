// libFuzzer target for the device's parsing of LLM server replies (device layer, fuzz label):
// the native protocol's info, session, 409 and next-token replies, OpenAI model lists and
// completions (whole and streamed as Server-Sent Events), and error bodies. The first byte
// picks the parser, the rest is the body. Any bytes must parse or fail with a message; what
// parses must name only token ids inside the vocabulary.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "device/remote/remote_replies.h"
#include "model/tokenizer/fuzz_vocab.h"
#include "model/tokenizer/tokenizer.h"

namespace {

tlr::Tokenizer* g_vocab = nullptr;

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckIds(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) Check(id >= 0 && id < g_vocab->n_vocab());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_vocab = tlr::LoadFuzzVocab("gpt-2");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (static_cast<uint8_t>(data[0] - '0') % 9) {  // seeds start with a digit
    case 0: {
      auto r = tlr::remote::ParseInfoReply(body);
      Check(r.ok() || !r.status().message().empty());
      break;
    }
    case 1: {
      auto r = tlr::remote::ParseSessionReply(body);
      Check(r.ok() ? !r->session.empty() : !r.status().message().empty());
      break;
    }
    case 2: {
      auto r = tlr::remote::ParseResyncReply(body);
      Check(r.ok() || !r.status().message().empty());
      break;
    }
    case 3: {
      auto r = tlr::remote::ParseNextReply(body, g_vocab->n_vocab());
      if (r.ok()) {
        Check(!r->tokens.empty());
        CheckIds(r->tokens);
        CheckIds(r->lookahead);
      } else {
        Check(!r.status().message().empty());
      }
      break;
    }
    case 4: {
      auto r = tlr::remote::ParseModelsReply(body, size % 2 ? "" : "m");
      Check(r.ok() || !r.status().message().empty());
      break;
    }
    case 5: {
      const int want = 1 + static_cast<int>(size % 9);
      auto r = tlr::remote::ParseCompletionReply(body, *g_vocab, want);
      if (r.ok()) {
        Check(!r->tokens.empty() && static_cast<int>(r->tokens.size()) <= want);
        CheckIds(r->tokens);
      } else {
        Check(!r.status().message().empty());
      }
      break;
    }
    case 7: {  // router labels from tlr serve: two sequences of 1..4 and 2 tokens
      const std::vector<size_t> lengths = {1 + size % 4, 2};
      auto r = tlr::remote::ParseScoreReply(body, lengths, g_vocab->n_vocab());
      if (r.ok()) {
        Check(r->size() == 2 && (*r)[0].size() == lengths[0] && (*r)[1].size() == 2);
        for (const auto& s : *r) CheckIds(s);
      } else {
        Check(!r.status().message().empty());
      }
      break;
    }
    case 8: {  // router labels from vLLM's prompt_logprobs
      const size_t n = 1 + size % 5;
      auto r = tlr::remote::ParsePromptLogprobsReply(body, n, *g_vocab);
      if (r.ok()) {
        Check(r->size() == n);
        CheckIds(*r);
      } else {
        Check(!r.status().message().empty());
      }
      break;
    }
    default:
      Check(tlr::remote::ErrorMessage(body).size() <= 4 * 500);
  }
  return 0;
}
