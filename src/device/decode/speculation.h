// Speculation bookkeeping of the decoder's asynchronous pipeline (device layer). Pure logic:
// token ids, which positions wait for which LLM call, which lines of speculation exist, what a
// reply keeps or discards, and the LLM's lookahead drafts. No model runs here; the decoder
// (decoder_pipeline.cc) keeps one SLM KV cache per line and reconciles it with `dirty_from`.
//
// A line is one guess at how the text goes on: the confirmed tokens (shared by every line)
// followed by speculative ones. At a routed position the decoder submits a call for the LLM's
// token and keeps decoding from the SLM's own candidate, which stays *pending* until the reply
// comes. With branches, alternative lines start at the oldest pending position (the head), one
// per further SLM candidate. A reply for position p:
//   - picks the line whose token at p is the LLM's (the SLM's own guess first) and drops the
//     others; when none has it, the SLM's line is cut at p and takes the LLM's token;
//   - for a span of n tokens, keeps the line as far as it agrees with the LLM's tokens;
//   - on failure, makes p FALLBACK (the SLM's own token, which the line already assumed).
// Everything after a cut is discarded and its calls are cancelled. Tokens leave the state
// (TakeConfirmed) only when no call before them is pending, so what callers receive never
// depends on timing.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device/decode/decoder.h"
#include "device/llm/llm_backend.h"

namespace tlr {

struct SpecToken {
  TokenSource source = TokenSource::kSlm;  // what it is once confirmed
  float confidence = -1.0f;
  int64_t call = -1;        // the call deciding this position (routed, or covered by its span)
  bool pending = false;     // that call has not answered yet (the token is an assumption)
  bool routed = false;      // the first position of a routed call or draft
  int routed_n = 1;         // there: the tokens the call asked for
  bool from_draft = false;  // an LLM token taken from a lookahead draft (no call answered it)
  SpecOutcome outcome = SpecOutcome::kNone;
  std::vector<int32_t> alts;  // further SLM candidates at a routed position (for branches)
  double slm_s = 0, router_s = 0, llm_s = 0;
  std::string llm_error;  // FALLBACK: why the call failed
};

struct SpecLine {
  static constexpr int64_t kClean = std::numeric_limits<int64_t>::max();
  int64_t id = 0;                  // stable across reordering
  std::vector<int32_t> ids;        // prompt, confirmed and speculative tokens
  std::vector<SpecToken> spec;     // spec[i] describes ids[confirmed() + i]
  int64_t dirty_from = kClean;     // lowest position changed since the owner last reconciled
  std::shared_ptr<void> payload;   // the owner's (the SLM's KV cache for this line)
};

struct SpecCall {
  int64_t line = 0;                // the line that submitted it
  int64_t position = 0;            // the position it decides (its context is ids[0, position))
  int n = 1;                       // tokens asked for
  std::shared_ptr<LlmCall> handle;
};

// Results of Resolve, for the decoder's statistics.
struct ResolveResult {
  bool applied = false;      // false: the call was unknown (cancelled, or the text ended)
  SpecOutcome outcome = SpecOutcome::kNone;
  std::vector<std::shared_ptr<LlmCall>> cancel;  // calls whose positions were discarded
};

class SpecState {
 public:
  explicit SpecState(std::vector<int32_t> prompt);

  int64_t confirmed() const { return confirmed_; }
  int64_t prompt_len() const { return prompt_len_; }
  // lines()[0] is the main line: the SLM's own guesses at every pending position.
  std::vector<SpecLine>& lines() { return lines_; }
  const std::vector<SpecLine>& lines() const { return lines_; }
  SpecLine* FindLine(int64_t id);
  const std::map<int64_t, SpecCall>& calls() const { return calls_; }

  // Appends a decided token to a line.
  void Push(SpecLine& line, int32_t id, SpecToken t);
  // Registers a call that decides `position` (and n - 1 more) on `line`; returns its id.
  int64_t AddCall(SpecLine& line, int64_t position, int n, std::shared_ptr<LlmCall> handle);
  // The head: the oldest pending position (only the main line exists when it is not pending).
  std::optional<int64_t> HeadPosition() const;
  // Starts one alternative line per candidate stored at the head (SpecToken::alts), at most
  // `max_lines` lines in all; they share the head's call. No-op unless only the main line exists
  // and its head is pending. Returns the number of lines added (their payload is null).
  int Branch(int max_lines);
  // Applies a completed call. Unknown calls (cancelled earlier, or the text already confirmed)
  // are ignored. `from_draft`: the reply is a lookahead draft's tokens for the call's context
  // (the call itself is then cancelled by the caller).
  ResolveResult Resolve(int64_t call, const Expected<LlmReply>& reply, double llm_s, bool from_draft = false);
  // Removes and returns the tokens no pending call precedes (main line only, one line left).
  std::vector<std::pair<int32_t, SpecToken>> TakeConfirmed();
  // Cancels every call and forgets them (the text ended or the caller stopped).
  std::vector<std::shared_ptr<LlmCall>> CancelAll();

  // Lookahead drafts: `ids[0, from)` is the context of a call and ids[from, end) what the LLM
  // generated after it (its answer and lookahead).
  void AddDraft(std::vector<int32_t> ids, int64_t from);
  // The LLM's tokens for positions [position, position + n) of `context` (context.size() ==
  // position) from a draft whose context matches exactly; stops after an end token when
  // `is_end` says so. Empty when no draft covers them.
  std::vector<int32_t> DraftAt(const std::vector<int32_t>& context, int n,
                               const std::function<bool(int32_t)>& is_end) const;
  // Up to `max_n` tokens that a draft with exactly this context goes on with (through an end
  // token at most); empty when none. The SLM checks them in one pass (the decoder's draft feed).
  std::vector<int32_t> DraftContinuation(const std::vector<int32_t>& context, int max_n,
                                         const std::function<bool(int32_t)>& is_end) const;

 private:
  void TruncateLine(SpecLine& line, int64_t position, std::vector<std::shared_ptr<LlmCall>>* cancel);
  void DropLine(size_t index, std::vector<std::shared_ptr<LlmCall>>* cancel);

  int64_t prompt_len_ = 0;
  int64_t confirmed_ = 0;     // positions < confirmed_ are final (prompt included)
  int64_t next_line_ = 0, next_call_ = 0;
  std::vector<SpecLine> lines_;
  std::map<int64_t, SpecCall> calls_;
  struct Draft {
    std::vector<int32_t> ids;
    int64_t from = 0;
  };
  std::vector<Draft> drafts_;  // newest last; a few are kept
};

// What the pipeline asks of the LLM beyond the routed tokens themselves (pure logic).
//
// Lookahead adapts to whether drafts stand: once the text is confirmed past a reply's
// lookahead, the draft is compared with it. A draft that stood whole doubles the next ask (up to
// `max_lookahead`); one that stood in part asks for as many as stood; none, for nothing (with a
// probe of 2 tokens every 8th call, so a text that turns predictable is noticed).
//
// The budget, in the units an LLM is paid in: LLM tokens asked for (answers, lookahead, and
// speculative calls, cancelled or not) per routed token stay under `budget` (0: no limit, as
// fast as possible). Lookahead comes only out of what is left; a speculative call (one with an
// unanswered call before it on its line) waits while it would pass the budget.
class LlmSpend {
 public:
  LlmSpend(double budget, int max_lookahead);
  // The lookahead to ask with a call of n tokens, given the routed tokens confirmed so far and
  // the tokens of calls still outstanding (they count as routed-to-be).
  int Lookahead(int n, int64_t routed, int64_t outstanding);
  // Whether a speculative call of n tokens fits the budget now.
  bool SpeculativeCallFits(int n, int64_t routed, int64_t outstanding) const;
  // A call was submitted asking for n tokens plus `lookahead`.
  void Asked(int n, int lookahead) { asked_ += n + lookahead; }
  // A draft's lookahead was checked against the confirmed text: `stood` of `got` tokens
  // matched (`got` may be fewer than asked: the server cuts lookahead when busy).
  void DraftStood(int got, int stood);
  int64_t asked() const { return asked_; }
  int level() const { return level_; }

 private:
  double Room(int n, int64_t routed, int64_t outstanding) const;
  double budget_;
  int max_;
  int level_;
  int64_t asked_ = 0;
  int64_t calls_at_zero_ = 0;
};

}  // namespace tlr
