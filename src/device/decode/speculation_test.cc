// The pipeline's bookkeeping (unit, no model): what a reply keeps and discards at the first and
// at a nested routed position, branches, spans, failures, replies that come too late, cancelled
// calls that must never be applied, and lookahead drafts that a divergent context invalidates.
#include "device/decode/speculation.h"

#include <gtest/gtest.h>

namespace tlr {
namespace {

// A routed token on the main line: the SLM's guess `id`, pending on a new call for n tokens.
int64_t Routed(SpecState& s, SpecLine& line, int32_t id, int n = 1, std::vector<int32_t> alts = {}) {
  const int64_t p = static_cast<int64_t>(line.ids.size());
  SpecToken t;
  t.routed = true;
  t.pending = true;
  t.source = TokenSource::kLlm;
  t.alts = std::move(alts);
  t.call = s.AddCall(line, p, n, std::make_shared<LlmCall>(nullptr));
  s.Push(line, id, t);
  return t.call;
}

void Slm(SpecState& s, SpecLine& line, int32_t id) { s.Push(line, id, SpecToken{}); }

LlmReply Reply(std::vector<int32_t> tokens, std::vector<int32_t> lookahead = {}) {
  LlmReply r;
  r.tokens = std::move(tokens);
  r.lookahead = std::move(lookahead);
  return r;
}

std::vector<int32_t> Ids(const std::vector<std::pair<int32_t, SpecToken>>& v) {
  std::vector<int32_t> out;
  for (const auto& [id, t] : v) out.push_back(id);
  return out;
}

TEST(Speculation, NothingLeavesBeforeItsCallAnswers) {
  SpecState s({1, 2, 3});
  SpecLine& main = s.lines()[0];
  Slm(s, main, 10);
  const int64_t c = Routed(s, main, 11);
  Slm(s, main, 12);
  EXPECT_EQ(Ids(s.TakeConfirmed()), (std::vector<int32_t>{10}));  // the token before the routed one
  EXPECT_TRUE(s.TakeConfirmed().empty());
  ASSERT_EQ(s.HeadPosition(), 4);
  auto r = s.Resolve(c, Reply({11}), 0.17);
  EXPECT_TRUE(r.applied);
  EXPECT_EQ(r.outcome, SpecOutcome::kHit);
  EXPECT_TRUE(r.cancel.empty());
  EXPECT_EQ(s.lines()[0].dirty_from, SpecLine::kClean);  // the speculation stood: nothing to redo
  auto out = s.TakeConfirmed();
  EXPECT_EQ(Ids(out), (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(out[0].second.source, TokenSource::kLlm);
  EXPECT_EQ(out[0].second.outcome, SpecOutcome::kHit);
  EXPECT_DOUBLE_EQ(out[0].second.llm_s, 0.17);
  EXPECT_EQ(out[1].second.source, TokenSource::kSlm);
  EXPECT_EQ(s.confirmed(), 6);
}

TEST(Speculation, MismatchAtTheFirstRoutedPositionDiscardsEverythingAfterIt) {
  SpecState s({1, 2});
  SpecLine& main = s.lines()[0];
  const int64_t head = Routed(s, main, 5);
  Slm(s, main, 6);
  const int64_t nested = Routed(s, main, 7);
  Slm(s, main, 8);
  auto r = s.Resolve(head, Reply({9}), 0.1);
  EXPECT_EQ(r.outcome, SpecOutcome::kMiss);
  ASSERT_EQ(r.cancel.size(), 1u);  // the nested call's context no longer exists
  EXPECT_EQ(s.calls().count(nested), 0u);
  EXPECT_EQ(s.lines()[0].ids, (std::vector<int32_t>{1, 2, 9}));
  EXPECT_EQ(s.lines()[0].dirty_from, 2);  // the SLM's cache rolls back to position 2
  auto out = s.TakeConfirmed();
  EXPECT_EQ(Ids(out), (std::vector<int32_t>{9}));
  EXPECT_EQ(out[0].second.outcome, SpecOutcome::kMiss);
  EXPECT_TRUE(out[0].second.routed);
  // The cancelled call's reply arrives later anyway: it is never applied.
  auto late = s.Resolve(nested, Reply({7}), 0.1);
  EXPECT_FALSE(late.applied);
  EXPECT_EQ(s.lines()[0].ids, (std::vector<int32_t>{1, 2, 9}));
}

TEST(Speculation, NestedMismatchCutsOnlyAfterItsPosition) {
  SpecState s({1});
  SpecLine& main = s.lines()[0];
  const int64_t head = Routed(s, main, 5);
  Slm(s, main, 6);
  const int64_t nested = Routed(s, main, 7);  // position 3
  Slm(s, main, 8);
  Slm(s, main, 9);
  // The nested reply comes first: it may be applied at once (it is conditional on the head's
  // guess, like everything after the head).
  auto r = s.Resolve(nested, Reply({70}), 0.1);
  EXPECT_EQ(r.outcome, SpecOutcome::kMiss);
  EXPECT_EQ(s.lines()[0].ids, (std::vector<int32_t>{1, 5, 6, 70}));
  EXPECT_EQ(s.lines()[0].dirty_from, 3);
  EXPECT_TRUE(s.TakeConfirmed().empty());  // the head still waits
  r = s.Resolve(head, Reply({5}), 0.1);
  EXPECT_EQ(r.outcome, SpecOutcome::kHit);
  auto out = s.TakeConfirmed();
  EXPECT_EQ(Ids(out), (std::vector<int32_t>{5, 6, 70}));
  EXPECT_EQ(out[2].second.outcome, SpecOutcome::kMiss);
}

TEST(Speculation, AReplyAfterTheTextEndedIsIgnored) {
  SpecState s({1});
  SpecLine& main = s.lines()[0];
  const int64_t c = Routed(s, main, 5);
  auto cancelled = s.CancelAll();  // the caller stopped
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_FALSE(s.Resolve(c, Reply({6}), 0.1).applied);
  EXPECT_FALSE(s.Resolve(12345, Reply({6}), 0.1).applied);  // never existed
}

TEST(Speculation, FailedCallIsFallbackWithTheSlmsOwnToken) {
  SpecState s({1});
  SpecLine& main = s.lines()[0];
  const int64_t c = Routed(s, main, 5);
  Slm(s, main, 6);
  auto r = s.Resolve(c, Status::Error("down"), 2.0);
  EXPECT_EQ(r.outcome, SpecOutcome::kFallback);
  auto out = s.TakeConfirmed();
  EXPECT_EQ(Ids(out), (std::vector<int32_t>{5, 6}));  // the speculation already assumed it
  EXPECT_EQ(out[0].second.source, TokenSource::kFallback);
  // An empty reply is a failure too.
  const int64_t c2 = Routed(s, s.lines()[0], 7);
  EXPECT_EQ(s.Resolve(c2, Reply({}), 0.1).outcome, SpecOutcome::kFallback);
}

TEST(Speculation, BranchesKeepTheLineTheLlmChose) {
  SpecState s({1});
  Routed(s, s.lines()[0], 5, 1, {6, 7});
  const int64_t head = s.lines()[0].spec[0].call;
  EXPECT_EQ(s.Branch(3), 2);
  ASSERT_EQ(s.lines().size(), 3u);
  EXPECT_EQ(s.lines()[1].ids, (std::vector<int32_t>{1, 6}));
  EXPECT_EQ(s.lines()[2].ids, (std::vector<int32_t>{1, 7}));
  EXPECT_EQ(s.lines()[1].dirty_from, 1);  // a new cache, forked at the head
  EXPECT_EQ(s.Branch(3), 0);              // once per head
  // Each branch decodes on; a routed position inside the second one has its own call.
  Slm(s, s.lines()[1], 60);
  const int64_t in_branch = Routed(s, s.lines()[2], 70);
  Slm(s, s.lines()[0], 50);
  auto r = s.Resolve(head, Reply({7}), 0.1);
  EXPECT_EQ(r.outcome, SpecOutcome::kBranch);
  ASSERT_EQ(s.lines().size(), 1u);
  EXPECT_EQ(s.lines()[0].ids, (std::vector<int32_t>{1, 7, 70}));
  EXPECT_TRUE(s.calls().count(in_branch));  // the chosen branch keeps its calls
  auto out = s.TakeConfirmed();
  EXPECT_EQ(Ids(out), (std::vector<int32_t>{7}));
  EXPECT_EQ(out[0].second.outcome, SpecOutcome::kBranch);
  // The LLM's token in none of the branches: the SLM's line takes it.
  SpecState t({1});
  Routed(t, t.lines()[0], 5, 1, {6});
  t.Branch(2);
  Slm(t, t.lines()[1], 61);
  auto miss = t.Resolve(t.lines()[0].spec[0].call, Reply({8}), 0.1);
  EXPECT_EQ(miss.outcome, SpecOutcome::kMiss);
  ASSERT_EQ(t.lines().size(), 1u);
  EXPECT_EQ(t.lines()[0].ids, (std::vector<int32_t>{1, 8}));
}

TEST(Speculation, SpansKeepWhatAgrees) {
  SpecState s({1});
  SpecLine& main = s.lines()[0];
  const int64_t c = Routed(s, main, 5, 3);
  // The later tokens of the span are the call's too (the router does not decide them).
  SpecToken covered;
  covered.call = c;
  covered.pending = true;
  covered.source = TokenSource::kLlm;
  s.Push(main, 6, covered);
  s.Push(main, 7, covered);
  Slm(s, main, 8);
  auto r = s.Resolve(c, Reply({5, 6, 9}), 0.1);
  EXPECT_EQ(r.outcome, SpecOutcome::kHit);
  EXPECT_EQ(s.lines()[0].ids, (std::vector<int32_t>{1, 5, 6, 9}));
  EXPECT_EQ(s.lines()[0].dirty_from, 3);
  EXPECT_EQ(Ids(s.TakeConfirmed()), (std::vector<int32_t>{5, 6, 9}));
  // Fewer tokens than the span covered (the LLM ended): the rest is decided again.
  const int64_t c2 = Routed(s, s.lines()[0], 20, 3);
  covered.call = c2;
  s.Push(s.lines()[0], 21, covered);
  s.Resolve(c2, Reply({20}), 0.1);
  EXPECT_EQ(s.lines()[0].ids, (std::vector<int32_t>{1, 5, 6, 9, 20}));
}

TEST(Speculation, DraftsAnswerOnlyTheirExactContext) {
  SpecState s({1, 2, 3});
  // The LLM answered 4 after [1 2 3] and went on with 5 6 7.
  s.AddDraft({1, 2, 3, 4, 5, 6, 7}, 3);
  auto never_end = [](int32_t) { return false; };
  EXPECT_EQ(s.DraftAt({1, 2, 3, 4}, 1, never_end), (std::vector<int32_t>{5}));
  EXPECT_EQ(s.DraftAt({1, 2, 3, 4, 5}, 2, never_end), (std::vector<int32_t>{6, 7}));
  EXPECT_TRUE(s.DraftAt({1, 2, 3, 4, 5, 6, 7}, 1, never_end).empty());   // past its end
  EXPECT_TRUE(s.DraftAt({1, 2, 3, 4, 5, 6}, 2, never_end).empty());      // only one token left
  EXPECT_TRUE(s.DraftAt({1, 2, 9, 4}, 1, never_end).empty());            // divergent context
  EXPECT_TRUE(s.DraftAt({1, 2, 3, 8}, 1, never_end).empty());            // diverged at the answer
  EXPECT_TRUE(s.DraftAt({1, 2}, 1, never_end).empty());                  // before the call's position
  // An end token ends a span early.
  auto six_ends = [](int32_t t) { return t == 6; };
  EXPECT_EQ(s.DraftAt({1, 2, 3, 4, 5}, 3, six_ends), (std::vector<int32_t>{6}));
}

}  // namespace
}  // namespace tlr
