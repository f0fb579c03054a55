// The pipelined joint loop of the collaborative decoder (see decoder.h for what it promises and
// speculation.h for the bookkeeping). Each iteration:
//   1. applies the replies that have arrived (and resolves pending calls from new drafts),
//   2. emits what is confirmed,
//   3. starts branches at the oldest unanswered routed position,
//   4. decides the next token of every line that has the SLM's logits for it (router, draft,
//      or a new call while the SLM's candidate is assumed),
//   5. runs one batched SLM pass over every line that has tokens to ingest;
// and when there is nothing to do, waits for the next reply (no busy polling: the backends
// signal completion). One KV cache per line; a cut line rolls its cache back (dirty_from).
//
// Draft feed: when an LLM lookahead draft continues a line's context, the SLM pass also reads
// the draft's next tokens (`ahead`), so it returns the SLM's outputs at each of those positions
// at once. The line then decides those positions one by one as usual (router, sampling); while
// its decisions equal the draft, the outputs are already there, and at the first difference the
// rest of `ahead` is dropped. Decisions are those of the blocking loop; only fewer SLM passes
// are needed where the SLM agrees with the LLM's continuation (each pass is one read of the
// weights, which is what a device's decode step costs).
#include <algorithm>
#include <numeric>

#include "device/decode/decoder.h"
#include "device/decode/decoder_emit.h"
#include "device/decode/speculation.h"

namespace tlr {

using decoder_internal::Cancelled;
using decoder_internal::Clock;
using decoder_internal::Emitter;
using decoder_internal::PadSlmPass;
using decoder_internal::PrefillSlm;
using decoder_internal::ReturnSlmCache;
using decoder_internal::TakeSlmCache;

namespace {

// The SLM's state for one line: its KV cache (the line's tokens, then `ahead`) and its outputs
// at positions ids.size() .. ids.size() + ahead left (rows row0, row0 + 1, ...).
struct LineModel {
  KvCache cache;
  std::vector<int32_t> ahead;  // draft tokens read after the line's decided ones
  size_t ahead_at = 0;         // ahead[ahead_at ..] are not decided yet
  bool waits = false;          // at a routed position whose call may not be sent yet
  std::vector<int32_t> feed;   // the tokens of the current pass
  std::vector<float> logits, hidden;  // [rows, n_vocab], [rows, n_embd]
  int64_t row0 = 0;
  double slm_s = 0;  // the pass that produced the outputs
  int64_t ahead_left() const { return static_cast<int64_t>(ahead.size() - ahead_at); }
  void DropAhead() {
    cache.Truncate(cache.size() - ahead_left());
    ahead.clear();
    ahead_at = 0;
  }
};

LineModel* ModelOf(SpecLine& l) { return static_cast<LineModel*>(l.payload.get()); }

// The k best tokens by logit other than `except`, best first.
std::vector<int32_t> TopCandidates(const float* logits, int64_t n, int k, int32_t except) {
  std::vector<int32_t> out;
  if (k <= 0) return out;
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  const size_t take = std::min<size_t>(static_cast<size_t>(k) + 1, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(take), idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t i = 0; i < take && static_cast<int>(out.size()) < k; ++i) {
    if (idx[i] != except) out.push_back(idx[i]);
  }
  return out;
}

}  // namespace

Expected<DecodeStats> CollabDecoder::GeneratePipelined(std::span<const int32_t> prompt, const DecodeOptions& opts,
                                                       const std::function<bool(const TokenEvent&)>& on_token,
                                                       SlmContext* context) {
  const PipelineOptions& po = opts.pipeline;
  const Tokenizer& tok = slm_.tokenizer();
  const int64_t V = slm_.config().n_vocab;
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  const int64_t n_ctx = prompt_len + opts.max_tokens + opts.route_span + 1;
  Emitter out(tok, opts, on_token, prompt_len);
  DecodeStats& st = out.stats();
  if (opts.max_tokens == 0) return out.Finish();

  SpecState state(std::vector<int32_t>(prompt.begin(), prompt.end()));
  LlmSpend spend(po.llm_budget, po.lookahead);
  // Replies' lookahead not yet compared with the confirmed text (the draft's tokens, and where
  // its lookahead starts).
  struct DraftCheck {
    std::vector<int32_t> ids;
    int64_t from = 0;
  };
  std::vector<DraftCheck> checks;
  CallNotifier notifier;
  ForwardContext ctx(pool_);
  Sampler sampler(opts.sampling, static_cast<int32_t>(V));
  const int64_t E = slm_.config().n_embd;
  auto new_model = [&](KvCache cache) {
    auto m = std::make_shared<LineModel>();
    m->cache = std::move(cache);
    m->logits.resize(static_cast<size_t>(V));
    m->hidden.resize(static_cast<size_t>(E));
    return m;
  };
  {
    KvCache cache;
    TLR_ASSIGN_OR_RETURN(st.prompt_reused, TakeSlmCache(slm_, context, prompt, n_ctx, &cache));
    auto m = new_model(std::move(cache));
    const auto t = Clock::now();
    TLR_ASSIGN_OR_RETURN(const bool read, PrefillSlm(slm_, &m->cache, prompt.subspan(static_cast<size_t>(st.prompt_reused)),
                                                     m->logits.data(), m->hidden.data(), &ctx, opts));
    if (!read) {  // cancelled while reading the prompt: the context keeps what was read
      st.slm_prefill_s = SecondsSince(t);
      st.stop = "stopped";
      ReturnSlmCache(context, std::move(m->cache), prompt, m->cache.size());
      return out.Finish();
    }
    PadSlmPass(t, opts.sim_slm_s);
    st.slm_prefill_s = m->slm_s = SecondsSince(t);
    state.lines()[0].payload = std::move(m);
  }

  auto ended = [&](const SpecLine& l) {
    const int64_t n = static_cast<int64_t>(l.ids.size());
    return n - prompt_len >= opts.max_tokens || (n > prompt_len && tok.IsEndOfGeneration(l.ids.back()));
  };
  // Brings every line's SLM cache in line with its tokens: new branches fork the main line's
  // cache; cut lines roll back (and always re-read their last token, for its logits).
  int64_t wasted_since_emit = 0;
  auto reconcile = [&]() -> Status {
    for (SpecLine& l : state.lines()) {
      if (!l.payload) l.payload = new_model(ModelOf(state.lines()[0])->cache.Fork(state.confirmed()));
      if (l.dirty_from == SpecLine::kClean) continue;
      LineModel* m = ModelOf(l);
      int64_t keep = std::min(m->cache.size(), l.dirty_from);
      keep = std::min(keep, static_cast<int64_t>(l.ids.size()) - 1);
      wasted_since_emit += m->cache.size() - keep;
      m->cache.Truncate(keep);
      m->ahead.clear();
      m->ahead_at = 0;
      l.dirty_from = SpecLine::kClean;
    }
    return Status::Ok();
  };
  auto cancel_calls = [&](const std::vector<std::shared_ptr<LlmCall>>& calls) {
    for (const auto& c : calls) {
      c->Cancel();
      ++st.cancelled_calls;
    }
  };
  // Applies one reply (or a draft standing in for one); drops lines it discards.
  auto resolve = [&](int64_t id, const Expected<LlmReply>& reply, double llm_s, bool from_draft) {
    std::vector<std::pair<int64_t, int64_t>> before;  // line id, SLM rows of its own
    for (SpecLine& l : state.lines()) before.emplace_back(l.id, ModelOf(l) ? ModelOf(l)->cache.size() - state.confirmed() : 0);
    const int64_t position = state.calls().count(id) ? state.calls().at(id).position : -1;
    std::vector<int32_t> context;
    if (position >= 0 && reply.ok()) {
      if (SpecLine* l = state.FindLine(state.calls().at(id).line)) context.assign(l->ids.begin(), l->ids.begin() + position);
    }
    ResolveResult r = state.Resolve(id, reply, llm_s, from_draft);
    cancel_calls(r.cancel);
    for (const auto& [line_id, rows] : before) {
      if (!state.FindLine(line_id)) wasted_since_emit += std::max<int64_t>(0, rows);
    }
    if (r.applied && reply.ok() && !from_draft && !reply->tokens.empty()) {
      // The reply and its lookahead are the LLM's own text after this context: a draft.
      context.insert(context.end(), reply->tokens.begin(), reply->tokens.end());
      const int64_t lookahead_from = static_cast<int64_t>(context.size());
      context.insert(context.end(), reply->lookahead.begin(), reply->lookahead.end());
      if (!reply->lookahead.empty()) checks.push_back({context, lookahead_from});
      state.AddDraft(std::move(context), position);
      return true;
    }
    return false;
  };
  auto is_end = [&](int32_t t) { return tok.IsEndOfGeneration(t); };
  // Lookahead drafts the confirmed text has passed: how much of each stood (the spend adapts).
  auto check_drafts = [&]() {
    const std::vector<int32_t>& text = state.lines()[0].ids;
    const int64_t c = state.confirmed();
    for (size_t i = 0; i < checks.size();) {
      const DraftCheck& d = checks[i];
      const int64_t end = static_cast<int64_t>(d.ids.size());
      int64_t k = d.from;
      while (k < std::min(c, end) && text[static_cast<size_t>(k)] == d.ids[static_cast<size_t>(k)]) ++k;
      if (k < end && k == c) {
        ++i;  // not decided yet
        continue;
      }
      // Only a draft whose context is the confirmed text says anything about lookahead.
      if (std::equal(d.ids.begin(), d.ids.begin() + d.from, text.begin())) {
        spend.DraftStood(static_cast<int>(end - d.from), static_cast<int>(k - d.from));
      }
      checks.erase(checks.begin() + static_cast<std::ptrdiff_t>(i));
    }
  };
  auto outstanding = [&]() {
    int64_t n = 0;
    for (const auto& [id, c] : state.calls()) n += c.n;
    return n;
  };
  auto call_n = [&](const SpecLine& l) {
    return static_cast<int>(std::min<int64_t>(opts.route_span, opts.max_tokens - (static_cast<int64_t>(l.ids.size()) - prompt_len)));
  };
  // The calls' account on a line under the price model (route_policy.h): the confirmed text's,
  // then the line's routed positions. A function of the line's tokens, as in the blocking loop.
  // Unpriced (the threshold policy without a budget), the account stays empty: nothing reads it.
  const bool priced = opts.policy == RoutePolicy::kCost || opts.cost_budget > 0;
  CallAccount confirmed_account;
  if (priced) confirmed_account.held = llm_->HeldPrefix(prompt);
  auto account_of = [&](const SpecLine& l) {
    CallAccount a = confirmed_account;
    for (size_t i = 0; priced && i < l.spec.size(); ++i) {
      if (l.spec[i].routed) a.Call(opts.price_ratio, state.confirmed() + static_cast<int64_t>(i), l.spec[i].routed_n);
    }
    return a;
  };
  auto has_pending = [](const SpecLine& l) {
    return std::any_of(l.spec.begin(), l.spec.end(), [](const SpecToken& t) { return t.pending; });
  };
  // Whether a line's routed position may send its call now: a branch never does (its context
  // differs from the main line's at the head, and the server's session holds one line, so the
  // call would make the server drop the main line's state and prefill it again: it waits until
  // the head's reply makes it the main line or drops it), and a speculative call only within
  // the LLM budget.
  auto may_call = [&](const SpecLine& l) {
    if (l.id != state.lines()[0].id) return false;
    return !has_pending(l) || spend.SpeculativeCallFits(call_n(l), st.routed, outstanding());
  };
  // Pending calls whose context a draft covers are answered by the draft.
  auto resolve_from_drafts = [&]() {
    for (bool again = true; again;) {
      again = false;
      for (const auto& [id, c] : state.calls()) {
        SpecLine* l = state.FindLine(c.line);
        if (!l) continue;
        const std::vector<int32_t> ctx_ids(l->ids.begin(), l->ids.begin() + c.position);
        std::vector<int32_t> toks = state.DraftAt(ctx_ids, c.n, is_end);
        if (toks.empty()) continue;
        std::shared_ptr<LlmCall> handle = c.handle;
        LlmReply draft;
        draft.tokens = std::move(toks);
        resolve(id, draft, 0.0, true);
        handle->Cancel();
        ++st.cancelled_calls;
        again = true;  // the map changed
        break;
      }
    }
  };
  // Decides the token at position ids.size() of a line from the SLM's outputs there.
  auto decide_one = [&](SpecLine& l, const float* logits, const float* hidden) {
    LineModel* m = ModelOf(l);
    m->waits = false;
    const int64_t p = static_cast<int64_t>(l.ids.size());
    SpecToken t;
    t.slm_s = m->slm_s;
    // A later position of a routed span still waiting for its call: the call decides it.
    if (!l.spec.empty() && l.spec.back().call >= 0 && l.spec.back().pending) {
      const int64_t c = l.spec.back().call;
      auto it = state.calls().find(c);
      if (it != state.calls().end() && p < it->second.position + it->second.n) {
        t.call = c;
        t.pending = true;
        t.source = TokenSource::kLlm;
        state.Push(l, sampler.Sample(logits, l.ids), std::move(t));
        return;
      }
    }
    const auto tr = Clock::now();
    t.confidence = router_->Confidence(hidden, logits, V, pool_);
    t.router_s = SecondsSince(tr);
    st.router_s += t.router_s;
    const int n = call_n(l);
    if (!account_of(l).Routes(opts.policy, opts.threshold, opts.price_ratio, opts.cost_budget, t.confidence, p, n)) {
      state.Push(l, sampler.Sample(logits, l.ids), std::move(t));
      return;
    }
    t.routed = true;
    t.routed_n = n;
    t.source = TokenSource::kLlm;
    std::vector<int32_t> draft = state.DraftAt(l.ids, n, is_end);
    if (draft.empty() && !may_call(l)) {
      m->waits = true;  // decided again once it may
      return;
    }
    if (!draft.empty()) {
      t.outcome = SpecOutcome::kDraft;
      t.from_draft = true;
      for (int32_t d : draft) {
        state.Push(l, d, t);
        t = SpecToken{};
        t.source = TokenSource::kLlm;
        t.from_draft = true;
      }
      return;
    }
    const int32_t guess = sampler.Sample(logits, l.ids);
    if (po.branches > 1) t.alts = TopCandidates(logits, V, po.branches - 1, guess);
    LlmRequest req;
    req.context = l.ids;
    req.n = n;
    req.lookahead = spend.Lookahead(n, st.routed, outstanding());
    spend.Asked(n, req.lookahead);
    req.sampling = opts.sampling;
    t.call = state.AddCall(l, p, n, llm_->Submit(std::move(req), notifier.Callback()));
    t.pending = true;
    ++st.llm_calls;
    st.max_in_flight = std::max<int64_t>(st.max_in_flight, static_cast<int64_t>(state.calls().size()));
    state.Push(l, guess, std::move(t));
  };
  // Tokens just decided on a line walk through its draft feed: while they equal it the outputs
  // for the next positions are there; at the first difference the rest goes.
  auto consume_ahead = [&](SpecLine& l, size_t pushed) {
    LineModel* m = ModelOf(l);
    for (size_t k = l.ids.size() - pushed; k < l.ids.size() && m->ahead_left() > 0; ++k) {
      if (m->ahead[m->ahead_at] == l.ids[k]) {
        ++m->ahead_at;
        ++m->row0;
      } else {
        wasted_since_emit += m->ahead_left();
        m->DropAhead();
      }
    }
  };
  // The next token of a line that has the SLM's logits for it.
  auto decide = [&](SpecLine& l) {
    LineModel* m = ModelOf(l);
    const size_t before = l.ids.size();
    decide_one(l, m->logits.data() + m->row0 * V, m->hidden.data() + m->row0 * E);
    consume_ahead(l, l.ids.size() - before);
  };
  // Whether a line may decide another token: it has the logits, has not ended, and is not too
  // far past its oldest unanswered position.
  auto can_decide = [&](SpecLine& l) {
    const LineModel* m = ModelOf(l);
    if (m->cache.size() != static_cast<int64_t>(l.ids.size()) + m->ahead_left() || ended(l)) return false;
    if (m->waits && !may_call(l)) return false;
    for (size_t i = 0; i < l.spec.size(); ++i) {
      if (l.spec[i].pending) return static_cast<int64_t>(l.spec.size() - i - 1) < po.depth;
    }
    return true;
  };

  double stall_since_emit = 0;
  // Emits the tokens no pending call precedes; returns whether generation goes on.
  auto emit_confirmed = [&]() {
    int64_t position = state.confirmed();
    for (auto& [id, t] : state.TakeConfirmed()) {
      if (priced && t.routed) confirmed_account.Call(opts.price_ratio, position, t.routed_n);
      ++position;
      TokenEvent ev;
      ev.id = id;
      ev.source = t.source;
      ev.confidence = t.confidence;
      ev.spec = t.outcome;
      ev.slm_s = t.slm_s;
      ev.router_s = t.router_s;
      ev.llm_s = t.llm_s;
      ev.llm_error = t.llm_error;
      ev.stall_s = stall_since_emit;
      ev.wasted = wasted_since_emit;
      stall_since_emit = 0;
      st.wasted_slm_steps += wasted_since_emit;
      wasted_since_emit = 0;
      st.llm_s += t.llm_s;
      if (t.outcome == SpecOutcome::kHit || t.outcome == SpecOutcome::kBranch || t.outcome == SpecOutcome::kMiss) {
        ++st.spec_resolved;
        st.spec_hits += t.outcome == SpecOutcome::kHit;
        st.spec_branch_hits += t.outcome == SpecOutcome::kBranch;
      }
      st.lookahead_used += t.from_draft;
      if (!out.Emit(std::move(ev))) return false;
    }
    return true;
  };
  std::vector<int32_t> shown;  // the provisional tail last reported
  Status failure = Status::Ok();
  for (bool more = true; more;) {
    if (Cancelled(opts)) {
      st.stop = "stopped";
      break;
    }
    const uint64_t seen = notifier.generation();  // before looking at the calls: no lost wakeup
    // 1. Replies, oldest position first.
    std::vector<std::pair<int64_t, int64_t>> ready;  // position, call id
    for (const auto& [id, c] : state.calls()) {
      if (c.handle->done()) ready.emplace_back(c.position, id);
    }
    std::sort(ready.begin(), ready.end());
    bool new_draft = false;
    for (const auto& [pos, id] : ready) {
      auto it = state.calls().find(id);
      if (it == state.calls().end()) continue;  // discarded by an earlier reply
      std::shared_ptr<LlmCall> h = it->second.handle;
      new_draft |= resolve(id, h->Wait(), h->latency_s(), false);
    }
    if (new_draft) resolve_from_drafts();
    // 2. Emit what is confirmed.
    if (!(more = emit_confirmed())) break;
    check_drafts();
    // 3. Branches at the oldest unanswered position; caches follow the lines.
    if (po.branches > 1) state.Branch(po.branches);
    if (failure = reconcile(); !failure.ok()) break;
    // The provisional tail (the main line's guesses), when it changed.
    if (opts.on_provisional) {
      const SpecLine& main = state.lines()[0];
      std::vector<int32_t> tail(main.ids.begin() + state.confirmed(), main.ids.end());
      if (tail != shown) {
        ProvisionalEvent pe;
        pe.ids = tail;
        StreamDecoder text = out.text();
        for (size_t i = 0; i < tail.size(); ++i) {
          pe.pending.push_back(main.spec[i].pending);
          if (!tok.IsEndOfGeneration(tail[i])) pe.text += text.Push(tail[i]);
        }
        pe.text += text.Flush();
        shown = std::move(tail);
        opts.on_provisional(pe);
      }
    }
    // 4. Decide.
    bool worked = false;
    for (SpecLine& l : state.lines()) {
      if (can_decide(l)) {
        decide(l);
        worked = true;
      }
    }
    // What step 4 decided with no call before it is final now: out before the SLM pass, so the
    // first token (and every unrouted one) leaves when the blocking loop would send it.
    if (worked && !(more = emit_confirmed())) break;
    // 5. One SLM pass over every line with tokens to ingest.
    std::vector<SequenceInput> ins;
    std::vector<LineModel*> fed;
    int64_t rows = 0;
    for (SpecLine& l : state.lines()) {
      LineModel* m = ModelOf(l);
      if (m->cache.size() >= static_cast<int64_t>(l.ids.size()) || ended(l)) continue;
      if (m->ahead_left() > 0) m->DropAhead();  // (never: a line to feed has used up its draft)
      m->ahead.clear();
      m->ahead_at = 0;
      const size_t decided = l.ids.size() - static_cast<size_t>(m->cache.size());
      m->feed.assign(l.ids.begin() + m->cache.size(), l.ids.end());
      // The draft feed: the LLM's continuation of this exact context, up to the last position
      // whose outputs can still be used.
      const int64_t room = prompt_len + opts.max_tokens - 1 - static_cast<int64_t>(l.ids.size());
      if (po.lookahead > 0 && room > 0) {
        m->ahead = state.DraftContinuation(l.ids, static_cast<int>(std::min<int64_t>(room, po.lookahead)), is_end);
        m->feed.insert(m->feed.end(), m->ahead.begin(), m->ahead.end());
      }
      const bool all = !m->ahead.empty();
      const size_t out_rows = all ? m->feed.size() : 1;
      m->logits.resize(out_rows * static_cast<size_t>(V));
      m->hidden.resize(out_rows * static_cast<size_t>(E));
      m->row0 = all ? static_cast<int64_t>(decided) - 1 : 0;
      ins.push_back({&m->cache, m->feed, all ? OutputRows::kAll : OutputRows::kLast, m->logits.data(), m->hidden.data()});
      fed.push_back(m);
      rows += static_cast<int64_t>(m->feed.size());
    }
    if (!ins.empty()) {
      const auto t = Clock::now();
      if (failure = slm_.Forward(ins, &ctx); !failure.ok()) break;
      PadSlmPass(t, opts.sim_slm_s);
      const double pass_s = SecondsSince(t);
      for (LineModel* m : fed) m->slm_s = pass_s;
      st.slm_decode_s += pass_s;
      ++st.slm_steps;
      st.slm_rows += rows;
      worked = true;
    }
    if (worked) continue;
    // Nothing to do until a reply comes.
    if (state.calls().empty()) {
      failure = Status::Error("internal error: the decoding pipeline has nothing to wait for");
      break;
    }
    const auto t = Clock::now();
    while (!notifier.WaitChange(seen, 0.05) && !Cancelled(opts)) {
    }
    const double waited = SecondsSince(t);
    st.stall_s += waited;
    stall_since_emit += waited;
  }
  cancel_calls(state.CancelAll());
  if (!failure.ok()) return failure;
  {
    // The main line's cache holds the emitted tokens as far as it was fed and not cut since
    // (speculative and draft positions past them are dropped).
    SpecLine& main = state.lines()[0];
    LineModel* m = ModelOf(main);
    const int64_t valid = std::min({m->cache.size() - m->ahead_left(), main.dirty_from, prompt_len + st.generated});
    ReturnSlmCache(context, std::move(m->cache), main.ids, valid);
  }
  return out.Finish();
}

}  // namespace tlr
