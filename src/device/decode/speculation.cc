// Speculation bookkeeping (see speculation.h).
#include "device/decode/speculation.h"

#include <algorithm>
#include <limits>

namespace tlr {

std::string_view SpecOutcomeName(SpecOutcome o) {
  switch (o) {
    case SpecOutcome::kNone: return "none";
    case SpecOutcome::kHit: return "hit";
    case SpecOutcome::kBranch: return "branch";
    case SpecOutcome::kMiss: return "miss";
    case SpecOutcome::kDraft: return "draft";
    case SpecOutcome::kFallback: return "fallback";
    case SpecOutcome::kBlocking: return "blocking";
  }
  return "?";
}

SpecState::SpecState(std::vector<int32_t> prompt) {
  prompt_len_ = confirmed_ = static_cast<int64_t>(prompt.size());
  SpecLine main;
  main.id = next_line_++;
  main.ids = std::move(prompt);
  lines_.push_back(std::move(main));
}

SpecLine* SpecState::FindLine(int64_t id) {
  for (SpecLine& l : lines_) {
    if (l.id == id) return &l;
  }
  return nullptr;
}

void SpecState::Push(SpecLine& line, int32_t id, SpecToken t) {
  line.ids.push_back(id);
  line.spec.push_back(std::move(t));
}

int64_t SpecState::AddCall(SpecLine& line, int64_t position, int n, std::shared_ptr<LlmCall> handle) {
  const int64_t id = next_call_++;
  calls_[id] = SpecCall{line.id, position, n, std::move(handle)};
  return id;
}

std::optional<int64_t> SpecState::HeadPosition() const {
  const SpecLine& main = lines_.front();
  for (size_t i = 0; i < main.spec.size(); ++i) {
    if (main.spec[i].pending) return confirmed_ + static_cast<int64_t>(i);
  }
  return std::nullopt;
}

int SpecState::Branch(int max_lines) {
  if (lines_.size() != 1 || lines_[0].spec.empty() || !lines_[0].spec[0].pending || !lines_[0].spec[0].routed) {
    return 0;
  }
  const SpecToken head = lines_[0].spec[0];
  int added = 0;
  for (int32_t c : head.alts) {
    if (static_cast<int>(lines_.size()) >= max_lines) break;
    SpecLine alt;
    alt.id = next_line_++;
    alt.ids.assign(lines_[0].ids.begin(), lines_[0].ids.begin() + confirmed_);
    alt.ids.push_back(c);
    SpecToken t = head;
    t.alts.clear();
    alt.spec.push_back(std::move(t));
    alt.dirty_from = confirmed_;
    lines_.push_back(std::move(alt));
    ++added;
  }
  return added;
}

void SpecState::TruncateLine(SpecLine& line, int64_t position, std::vector<std::shared_ptr<LlmCall>>* cancel) {
  if (position >= static_cast<int64_t>(line.ids.size())) return;
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (it->second.line == line.id && it->second.position >= position) {
      cancel->push_back(it->second.handle);
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
  line.ids.resize(static_cast<size_t>(position));
  line.spec.resize(static_cast<size_t>(position - confirmed_));
  line.dirty_from = std::min(line.dirty_from, position);
}

void SpecState::DropLine(size_t index, std::vector<std::shared_ptr<LlmCall>>* cancel) {
  const int64_t id = lines_[index].id;
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (it->second.line == id) {
      cancel->push_back(it->second.handle);
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
  lines_.erase(lines_.begin() + static_cast<std::ptrdiff_t>(index));
}

ResolveResult SpecState::Resolve(int64_t call_id, const Expected<LlmReply>& reply, double llm_s, bool from_draft) {
  ResolveResult res;
  auto it = calls_.find(call_id);
  if (it == calls_.end()) return res;
  const SpecCall call = it->second;
  calls_.erase(it);
  const int64_t p = call.position;
  const size_t at = static_cast<size_t>(p - confirmed_);
  // The lines waiting on this call at p: its own, and the branches started at it.
  std::vector<size_t> waiting;
  size_t owner = lines_.size();
  for (size_t i = 0; i < lines_.size(); ++i) {
    const SpecLine& l = lines_[i];
    if (at < l.spec.size() && l.spec[at].call == call_id && l.spec[at].pending) {
      waiting.push_back(i);
      if (l.id == call.line) owner = i;
    }
  }
  if (owner == lines_.size()) return res;  // its positions were discarded already
  res.applied = true;
  const bool ok = reply.ok() && !reply->tokens.empty();
  // The line that stands: the one with the LLM's token at p (the SLM's own first), else the owner.
  size_t keep = owner;
  res.outcome = ok ? SpecOutcome::kMiss : SpecOutcome::kFallback;
  if (ok) {
    if (lines_[owner].ids[static_cast<size_t>(p)] == reply->tokens[0]) {
      res.outcome = SpecOutcome::kHit;
    } else {
      for (size_t i : waiting) {
        if (lines_[i].ids[static_cast<size_t>(p)] == reply->tokens[0]) {
          keep = i;
          res.outcome = SpecOutcome::kBranch;
          break;
        }
      }
    }
  }
  const int64_t keep_id = lines_[keep].id;
  for (size_t k = waiting.size(); k-- > 0;) {
    if (waiting[k] != keep) DropLine(waiting[k], &res.cancel);
  }
  // A branch that stands becomes the main line (branches exist only at the head, so it is the
  // only line left).
  if (res.outcome == SpecOutcome::kBranch) std::swap(lines_[0], *FindLine(keep_id));
  SpecLine& line = *FindLine(keep_id);
  const SpecToken routed = line.spec[at];
  // Positions p .. p + covered - 1 of the line are decided by this call.
  size_t covered = 0;
  while (at + covered < line.spec.size() && line.spec[at + covered].call == call_id) ++covered;
  if (!ok) {
    SpecToken& t = line.spec[at];
    t.pending = false;
    t.source = TokenSource::kFallback;
    t.outcome = SpecOutcome::kFallback;
    t.llm_s = llm_s;
    t.llm_error = reply.ok() ? "the LLM returned no tokens" : reply.status().message();
    // The later tokens of a failed span were guesses on the span's behalf: the router decides
    // those positions again.
    if (covered > 1) TruncateLine(line, p + 1, &res.cancel);
    return res;
  }
  if (from_draft) res.outcome = SpecOutcome::kDraft;
  const std::vector<int32_t>& got = reply->tokens;
  size_t agree = 0;
  while (agree < got.size() && agree < covered && line.ids[static_cast<size_t>(p) + agree] == got[agree]) ++agree;
  if (agree < got.size() || covered != got.size()) {
    TruncateLine(line, p + static_cast<int64_t>(agree), &res.cancel);
  }
  for (size_t k = 0; k < agree; ++k) {
    SpecToken& t = line.spec[at + k];
    t.pending = false;
    t.source = TokenSource::kLlm;
    t.from_draft = from_draft;
    if (k == 0) {
      t.outcome = res.outcome;
      t.llm_s = llm_s;
    }
  }
  // The LLM's tokens the line did not have (a miss, or the rest of a span).
  if (agree < got.size()) line.dirty_from = std::min(line.dirty_from, p + static_cast<int64_t>(agree));
  for (size_t k = agree; k < got.size(); ++k) {
    SpecToken t;
    if (k == 0) {  // a miss: the routed position keeps its router and SLM timings
      t = routed;
      t.outcome = res.outcome;
      t.llm_s = llm_s;
      t.alts.clear();
    }
    t.call = call_id;
    t.pending = false;
    t.source = TokenSource::kLlm;
    t.from_draft = from_draft;
    Push(line, got[k], std::move(t));
  }
  return res;
}

std::vector<std::pair<int32_t, SpecToken>> SpecState::TakeConfirmed() {
  std::vector<std::pair<int32_t, SpecToken>> out;
  if (lines_.size() != 1) return out;
  SpecLine& main = lines_[0];
  size_t k = 0;
  while (k < main.spec.size() && !main.spec[k].pending) ++k;
  for (size_t i = 0; i < k; ++i) {
    out.emplace_back(main.ids[static_cast<size_t>(confirmed_) + i], std::move(main.spec[i]));
  }
  main.spec.erase(main.spec.begin(), main.spec.begin() + static_cast<std::ptrdiff_t>(k));
  confirmed_ += static_cast<int64_t>(k);
  return out;
}

std::vector<std::shared_ptr<LlmCall>> SpecState::CancelAll() {
  std::vector<std::shared_ptr<LlmCall>> out;
  for (auto& [id, c] : calls_) out.push_back(c.handle);
  calls_.clear();
  return out;
}

void SpecState::AddDraft(std::vector<int32_t> ids, int64_t from) {
  constexpr size_t kKeep = 8;
  drafts_.push_back({std::move(ids), from});
  if (drafts_.size() > kKeep) drafts_.erase(drafts_.begin());
}

std::vector<int32_t> SpecState::DraftAt(const std::vector<int32_t>& context, int n,
                                        const std::function<bool(int32_t)>& is_end) const {
  const size_t p = context.size();
  for (auto d = drafts_.rbegin(); d != drafts_.rend(); ++d) {
    if (static_cast<int64_t>(p) < d->from || p >= d->ids.size()) continue;
    if (!std::equal(context.begin(), context.end(), d->ids.begin())) continue;
    std::vector<int32_t> out;
    for (size_t k = p; k < d->ids.size() && static_cast<int>(out.size()) < n; ++k) {
      out.push_back(d->ids[k]);
      if (is_end && is_end(d->ids[k])) return out;
    }
    if (static_cast<int>(out.size()) == n) return out;
  }
  return {};
}

std::vector<int32_t> SpecState::DraftContinuation(const std::vector<int32_t>& context, int max_n,
                                                  const std::function<bool(int32_t)>& is_end) const {
  const size_t p = context.size();
  std::vector<int32_t> out;
  for (auto d = drafts_.rbegin(); d != drafts_.rend(); ++d) {
    if (static_cast<int64_t>(p) < d->from || p >= d->ids.size()) continue;
    if (!std::equal(context.begin(), context.end(), d->ids.begin())) continue;
    for (size_t k = p; k < d->ids.size() && static_cast<int>(out.size()) < max_n; ++k) {
      out.push_back(d->ids[k]);
      if (is_end && is_end(d->ids[k])) break;
    }
    return out;
  }
  return out;
}

LlmSpend::LlmSpend(double budget, int max_lookahead)
    : budget_(budget), max_(std::max(0, max_lookahead)), level_(std::min(2, max_)) {}

double LlmSpend::Room(int n, int64_t routed, int64_t outstanding) const {
  if (budget_ <= 0) return std::numeric_limits<double>::infinity();
  return budget_ * static_cast<double>(routed + outstanding + n) - static_cast<double>(asked_ + n);
}

int LlmSpend::Lookahead(int n, int64_t routed, int64_t outstanding) {
  int want = level_;
  if (want == 0 && max_ > 0 && ++calls_at_zero_ % 8 == 0) want = std::min(2, max_);
  const double room = Room(n, routed, outstanding);
  if (room < want) want = std::max(0, static_cast<int>(room));
  return want;
}

bool LlmSpend::SpeculativeCallFits(int n, int64_t routed, int64_t outstanding) const {
  return Room(n, routed, outstanding) >= 0;
}

void LlmSpend::DraftStood(int got, int stood) {
  if (got <= 0) return;
  if (stood >= got) {
    level_ = std::min(max_, std::max({1, level_, 2 * got}));
  } else {
    level_ = std::min(max_, stood);
  }
  if (level_ > 0) calls_at_zero_ = 0;
}

}  // namespace tlr
