// VocabBridge (see vocab_bridge.h).
#include "device/llm/vocab_bridge.h"

#include <algorithm>

#include "util/utf8.h"

namespace tlr {

namespace {

// At most this many LLM tokens are held back (a word longer than that is cut inside).
constexpr size_t kMaxHeldBack = 4;

bool IsControl(const Tokenizer& t, int32_t id) {
  return t.IsValidId(id) && t.vocab().types[static_cast<size_t>(id)] == TokenType::kControl;
}

bool Separates(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x80 && !(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z');
}

}  // namespace

std::string VocabBridge::SlmText(std::span<const int32_t> slm_ids) const {
  std::string text;
  bool at_start = true;
  for (size_t i = 0; i < slm_ids.size(); ++i) {
    if (i == 0 && slm_ids[0] == slm_.bos() && slm_.bos() >= 0) continue;
    text += slm_.SequencePiece(slm_ids[i], /*render_special=*/true, &at_start);
  }
  return text;
}

void VocabBridge::Reset() {
  text_.clear();
  ids_.clear();
  ends_.clear();
  restarts_.clear();
}

BridgedContext VocabBridge::ToLlm(std::span<const int32_t> slm_ids) {
  const std::string text = SlmText(slm_ids);
  ++stats_.contexts;
  size_t lcp = 0;
  const size_t common = std::min(text.size(), text_.size());
  while (lcp < common && text[lcp] == text_[lcp]) ++lcp;
  // Encoding resumes at the last of the previous text's restart points (tokenizer.h) that the
  // new text cannot have changed: the tokens before it stay, exactly as a whole encoding gives
  // them, whatever contexts came before.
  std::vector<int32_t> ids;
  std::vector<size_t> ends, restarts;
  bool reused = false;
  const size_t margin = llm_.RestartMargin();
  if (lcp > margin) {
    const auto r = std::upper_bound(restarts_.begin(), restarts_.end(), lcp - margin);
    const size_t start = r == restarts_.begin() ? 0 : *(r - 1);
    const auto e = std::lower_bound(ends_.begin(), ends_.end(), start);
    if (start > 0 && e != ends_.end() && *e == start) {
      const size_t keep = static_cast<size_t>(e - ends_.begin()) + 1;
      std::vector<size_t> tail_restarts;
      const std::vector<int32_t> tail =
          llm_.EncodeExact(std::string_view(text).substr(start), /*at_start=*/false, true, &tail_restarts);
      ids.assign(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(keep));
      ends.assign(ends_.begin(), ends_.begin() + static_cast<std::ptrdiff_t>(keep));
      restarts.assign(restarts_.begin(), r - 1);
      for (size_t t : tail_restarts) restarts.push_back(start + t);
      size_t at = start;
      bool at_start = false;
      for (int32_t id : tail) {
        at += llm_.SequencePiece(id, true, &at_start).size();
        ids.push_back(id);
        ends.push_back(at);
      }
      stats_.llm_tokens_kept += static_cast<int64_t>(keep);
      stats_.llm_tokens_encoded += static_cast<int64_t>(tail.size());
      reused = true;
    }
  }
  if (!reused) {
    ids = llm_.EncodeExact(text, /*at_start=*/true, /*parse_special=*/true, &restarts);
    size_t at = 0;
    bool at_start = true;
    for (int32_t id : ids) {
      at += llm_.SequencePiece(id, true, &at_start).size();
      ends.push_back(at);
    }
    ++stats_.full_encodes;
    stats_.llm_tokens_encoded += static_cast<int64_t>(ids.size());
  }
  // The held-back word: the last token unless it is a control token, and the tokens before it
  // back to the start of its word (at most kMaxHeldBack, and more to a character's start),
  // never a control token.
  const auto piece = [&](size_t k) { return llm_.Piece(ids[k], true); };
  size_t p = ids.size();
  if (p > 0 && !IsControl(llm_, ids[p - 1])) {
    --p;
    while (p > 0 && ids.size() - p < kMaxHeldBack && !IsControl(llm_, ids[p - 1])) {
      const std::string here = piece(p), before = piece(p - 1);
      if ((!here.empty() && Separates(here[0])) || (!before.empty() && Separates(before.back()))) break;
      --p;
    }
    // Never inside a character (byte tokens spell one in pieces): the prompt is whole
    // characters, as an engine given text needs, and what is held back starts one.
    while (p > 0 && ends[p - 1] < text.size() && (static_cast<unsigned char>(text[ends[p - 1]]) & 0xC0) == 0x80 &&
           !IsControl(llm_, ids[p - 1])) {
      --p;
    }
  }
  BridgedContext out;
  const bool bos = llm_.vocab().add_bos && llm_.bos() >= 0;
  // An LLM without a BOS needs one token of the context to start from: nothing held back then.
  if (!bos && p == 0) p = ids.size();
  if (bos) out.llm_ids.push_back(llm_.bos());
  out.llm_ids.insert(out.llm_ids.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(p));
  const size_t from = p == 0 ? 0 : ends[p - 1];
  // Offsets that do not add up to the text (a vocabulary without byte fallback gave an unknown
  // token): nothing is held back and the next context is encoded from the start.
  if (ends.empty() ? !text.empty() : ends.back() != text.size()) {
    Reset();
    out.llm_ids.insert(out.llm_ids.end(), ids.begin() + static_cast<std::ptrdiff_t>(p), ids.end());
    return out;
  }
  out.pending = text.substr(from);
  stats_.pending_bytes += static_cast<int64_t>(out.pending.size());
  text_ = text;
  ids_ = std::move(ids);
  ends_ = std::move(ends);
  restarts_ = std::move(restarts);
  return out;
}

int VocabBridge::LlmTokensFor(const BridgedContext& ctx, int n, bool backend_spells_prefix) const {
  if (backend_spells_prefix) return n + 1;
  const size_t held = llm_.EncodeExact(ctx.pending, false, false).size();
  return static_cast<int>(held) + n + 1;
}

Expected<BridgedReply> VocabBridge::ToSlm(const BridgedContext& ctx, std::span<const int32_t> reply, bool llm_ended,
                                          size_t max_tokens) const {
  BridgedReply out;
  std::string text;
  std::vector<size_t> reply_ends;
  bool at_start = true;
  for (int32_t id : ctx.llm_ids) {
    if (!IsControl(llm_, id)) {
      at_start = false;
      break;
    }
  }
  for (int32_t id : reply) {
    if (!llm_.IsValidId(id)) return Status::Error("the LLM's reply holds token " + std::to_string(id) + ", outside its vocabulary");
    if (llm_.IsEndOfGeneration(id)) {
      out.ended = true;
      break;
    }
    if (IsControl(llm_, id)) {
      return Status::Error("the LLM's reply holds the control token '" + llm_.TokenText(id) + "'");
    }
    text += llm_.SequencePiece(id, false, &at_start);
    reply_ends.push_back(text.size());
  }
  bool ended = out.ended || llm_ended;
  const std::string& pending = ctx.pending;
  if (text.compare(0, pending.size(), pending) != 0 || text.size() < pending.size()) {
    if (!ended && text.size() < pending.size() && pending.compare(0, text.size(), text) == 0) {
      return Status::Error("the LLM's reply (" + std::to_string(reply_ends.size()) +
                           " tokens) ends inside the held-back text");
    }
    return Status::Error("the LLM's reply does not begin with the held-back text '" + SanitizeUtf8(pending) + "'");
  }
  // Well-formed as a whole, the held-back bytes included (a context may end inside a character
  // that the reply completes; the held-back word itself may start inside one, up to 3 bytes).
  // Ill-formed bytes after the held-back text end what can be used of the reply (the text before
  // them still counts); in it, or with nothing before them, the reply is refused.
  size_t complete = Utf8CompletePrefix(text);
  size_t lead = 0;
  while (lead < 3 && lead < text.size() && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) ++lead;
  bool cut = false;
  for (size_t pos = lead; pos < complete;) {
    const size_t at = pos;
    char32_t cp;
    if (!DecodeUtf8(text, &pos, &cp)) {
      if (at < pending.size() + 1) return Status::Error("the LLM's reply is ill-formed UTF-8");
      complete = at;
      cut = true;
      break;
    }
  }
  if (cut) ended = out.ended = false;
  std::string_view fresh = std::string_view(text).substr(pending.size());
  // A character still being completed waits for the rest (unless the LLM ended).
  if (!ended) fresh = fresh.substr(0, complete > pending.size() ? complete - pending.size() : 0);
  std::vector<int32_t> ids = slm_.EncodeExact(fresh, /*at_start=*/false, /*parse_special=*/false);
  std::vector<size_t> ends;
  size_t at = 0;
  for (int32_t id : ids) {
    at += slm_.Piece(id).size();
    ends.push_back(at);
  }
  std::string back;
  for (int32_t id : ids) back += slm_.Piece(id);
  if (back != fresh) return Status::Error("the SLM's vocabulary cannot represent the LLM's reply exactly");
  if (!ended && !ids.empty()) {  // the last piece may still merge with what follows
    ids.pop_back();
    ends.pop_back();
  }
  if (ids.size() > max_tokens) {
    ids.resize(max_tokens);
    ends.resize(max_tokens);
  } else if (ended && slm_.eos() >= 0 && ids.size() < max_tokens) {
    ids.push_back(slm_.eos());  // the whole reply, then the end
    out.slm_ids = std::move(ids);
    out.llm_tokens_used = reply_ends.size() + (out.ended ? 1 : 0);
    out.ended = true;
    return out;
  }
  if (ids.empty()) {
    return Status::Error(cut ? "the LLM's reply is ill-formed UTF-8" : "the LLM's reply is not yet one whole SLM token");
  }
  const size_t covered = pending.size() + ends.back();
  out.llm_tokens_used =
      static_cast<size_t>(std::upper_bound(reply_ends.begin(), reply_ends.end(), covered) - reply_ends.begin());
  out.ended = false;  // the SLM tokens stop before the LLM's end
  out.slm_ids = std::move(ids);
  return out;
}

}  // namespace tlr
