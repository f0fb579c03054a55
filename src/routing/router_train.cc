// Router training: references, CITER labels, rollouts, network training, report (see
// router_train.h).
#include "routing/router_train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/sampler.h"
#include "model/chat_template.h"
#include "routing/r2r_net.h"
#include "routing/feature_dump.h"
#include "routing/label_llm.h"

namespace tlr {

constexpr int64_t kDumpTopK = 100;  // the top logits a feature dump keeps (R2R's routers read 100)


namespace {

using Clock = std::chrono::steady_clock;

struct Question {
  const QaRow* row = nullptr;
  size_t row_index = 0;
  std::vector<int32_t> prompt, ref;
  bool ref_from_llm = false;
  bool val = false;
};

// The SLM's chat template over a chat row's messages.
class ChatRows {
 public:
  ChatRows(const Model& slm, std::string source) : slm_(slm), source_(std::move(source)) {}
  // The prompt of the assistant message after `msgs` (the template ends with its header).
  Expected<std::vector<int32_t>> Prompt(const std::vector<ChatMessage>& msgs) {
    TLR_RETURN_IF_ERROR(Load());
    TLR_ASSIGN_OR_RETURN(std::string text, tmpl_->Apply(msgs, {}));
    return slm_.tokenizer().Encode(text, false, true);
  }
  // The tokens of msgs.back() (an assistant message) as the template writes them after
  // Prompt(msgs minus the last), through its end-of-turn token.
  Expected<std::vector<int32_t>> Reference(const std::vector<ChatMessage>& msgs, const std::vector<int32_t>& prompt) {
    TLR_RETURN_IF_ERROR(Load());
    ChatTemplateOptions whole;
    whole.add_generation_prompt = false;
    TLR_ASSIGN_OR_RETURN(std::string text, tmpl_->Apply(msgs, whole));
    const Tokenizer& tok = slm_.tokenizer();
    std::vector<int32_t> full = tok.Encode(text, false, true), ref;
    if (full.size() > prompt.size() && std::equal(prompt.begin(), prompt.end(), full.begin())) {
      for (size_t i = prompt.size(); i < full.size(); ++i) {
        ref.push_back(full[i]);
        if (tok.IsEndOfGeneration(full[i])) return ref;
      }
    } else {  // the template's text does not tokenize at the boundary: the content alone
      ref = tok.Encode(msgs.back().content, false, false);
    }
    if (tok.eos() >= 0) ref.push_back(tok.eos());
    return ref;
  }

 private:
  Status Load() {
    if (tmpl_) return Status::Ok();
    const Tokenizer& tok = slm_.tokenizer();
    auto special = [&tok](int32_t id) -> std::optional<std::string> {
      if (!tok.IsValidId(id)) return std::nullopt;
      return tok.Piece(id, /*render_special=*/true);
    };
    auto t = source_.empty() ? ChatTemplate::ForModel(slm_) : ChatTemplate::FromJinja(source_, special(tok.bos()), special(tok.eos()));
    if (!t.ok()) return t.status().WithPrefix(source_.empty() ? "the SLM's chat template" : "the chat template given");
    tmpl_.emplace(std::move(t).value());
    return Status::Ok();
  }
  const Model& slm_;
  std::string source_;
  std::optional<ChatTemplate> tmpl_;
};

// A position whose label came from a rollout (both models wrong), kept for later rounds.
struct BothWrongPos {
  int64_t example;  // index into the examples
  size_t question;
  int64_t j;        // reference position
  int32_t slm_token;
};

struct Labelled {
  RouterExamples all;
  std::vector<float> maxprob, entropy;
  std::vector<uint8_t> is_val;
  std::vector<BothWrongPos> both_wrong;
};

bool Graded(const Tokenizer& tok, const QaRow& row, const std::vector<int32_t>& answer) {
  auto choice = ExtractChoice(tok.Decode(answer), row);
  return choice && *choice == row.answer_key;
}

// SLM (+ LLM when routed) greedy decoding with the router in the loop, from a prefix. The LLM
// reads the whole sequence at each routed position (it may be a server, holding nothing).
Expected<std::vector<int32_t>> JointRollout(const Model& slm, LabelLlm& llm, Router* router,
                                            float threshold, const std::vector<int32_t>& prefix,
                                            int max_tokens, ThreadPool* pool) {
  const int64_t n_ctx = static_cast<int64_t>(prefix.size()) + max_tokens + 2;
  TLR_ASSIGN_OR_RETURN(KvCache sc, slm.NewCache(n_ctx));
  ForwardContext ctx(pool);
  std::vector<int32_t> seq = prefix, out;
  const int64_t V = slm.config().n_vocab, H = slm.config().n_embd;
  std::vector<float> logits(V), hidden(H);
  int64_t slm_seen = 0;
  while (static_cast<int>(out.size()) < max_tokens) {
    SequenceInput in{&sc, std::span<const int32_t>(seq).subspan(slm_seen), OutputRows::kLast,
                     logits.data(), hidden.data()};
    TLR_RETURN_IF_ERROR(slm.Forward({&in, 1}, &ctx));
    slm_seen = static_cast<int64_t>(seq.size());
    int32_t next = ArgMax(logits.data(), V);
    if (router->Confidence(hidden.data(), logits.data(), V, pool) < threshold) {
      TLR_ASSIGN_OR_RETURN(auto pred, llm.PredictNext({seq}));
      if (pred.size() != 1 || pred[0].size() > 1) return Status::Error("the LLM's prediction does not match the sequence");
      if (!pred[0].empty()) next = pred[0][0];  // none: the SLM's token (the decoder's fallback)
    }
    out.push_back(next);
    seq.push_back(next);
    if (slm.tokenizer().IsEndOfGeneration(next)) break;
  }
  return out;
}

}  // namespace

Expected<std::vector<std::vector<int32_t>>> GreedyContinue(const Model& model,
                                                           std::vector<KvCache*> caches,
                                                           const std::vector<int32_t>& first,
                                                           int max_tokens, ThreadPool* pool) {
  const size_t n = caches.size();
  std::vector<std::vector<int32_t>> out(n);
  std::vector<int32_t> cur = first;
  std::vector<size_t> active;
  for (size_t i = 0; i < n; ++i) {
    if (max_tokens > 0) active.push_back(i);
  }
  const int64_t V = model.config().n_vocab;
  std::vector<float> logits(n * V);
  ForwardContext ctx(pool);
  std::vector<SequenceInput> seqs;
  while (!active.empty()) {
    seqs.clear();
    for (size_t i : active) {
      seqs.push_back({caches[i], std::span<const int32_t>(&cur[i], 1), OutputRows::kLast,
                      logits.data() + i * V, nullptr});
    }
    TLR_RETURN_IF_ERROR(model.Forward(seqs, &ctx));
    std::vector<size_t> still;
    for (size_t i : active) {
      const int32_t next = ArgMax(logits.data() + i * V, V);
      out[i].push_back(next);
      cur[i] = next;
      if (!model.tokenizer().IsEndOfGeneration(next) && static_cast<int>(out[i].size()) < max_tokens) {
        still.push_back(i);
      }
    }
    active.swap(still);
  }
  return out;
}

std::string RouterTrainReport::ToJson() const {
  nlohmann::json j = {
      {"questions", questions}, {"dropped_llm_wrong", dropped_llm_wrong},
      {"dropped_no_answer_key", dropped_no_answer_key}, {"tokens", tokens}, {"keep", keep},
      {"route", route}, {"both_wrong", both_wrong}, {"both_wrong_kept", both_wrong_kept},
      {"dropped_tokens", dropped_tokens}, {"val_tokens", val_tokens},
      {"auroc", {{"router", auroc_router}, {"maxprob", auroc_maxprob}, {"entropy", auroc_entropy}}},
      {"threshold", threshold}, {"epochs", mlp.epochs}, {"best_epoch", mlp.best_epoch},
      {"train_loss", mlp.train_loss}, {"val_loss", mlp.val_loss}, {"seconds", seconds},
      {"label_seconds", label_seconds}};
  return j.dump();
}

Expected<RouterTrainResult> TrainRouter(const Model& slm, const Model& llm,
                                        const std::vector<QaRow>& rows,
                                        const RouterTrainOptions& opts, ThreadPool* pool) {
  if (slm.tokenizer().Fingerprint() != llm.tokenizer().Fingerprint()) {
    return Status::Error("the SLM and the LLM have different tokenizers: label through a vocabulary bridge "
                         "(device/labels/bridged_label_llm.h; `tlr router train` does)");
  }
  InProcessLabelLlm labels(llm, pool);
  return TrainRouter(slm, labels, rows, opts, pool);
}

Expected<RouterTrainResult> TrainRouter(const Model& slm, LabelLlm& llm, const std::vector<QaRow>& rows,
                                        const RouterTrainOptions& opts, ThreadPool* pool) {
  const auto t0 = Clock::now();
  if (!RouterIsLearned(opts.mlp.kind)) return Status::Error("only citer, colm and r2r routers are trained");
  const bool r2r = opts.mlp.kind == RouterKind::kR2r;
  if (opts.max_answer_tokens < 1 || opts.batch_questions < 1 || opts.rounds < 1) {
    return Status::Error("max answer tokens, batch and rounds must be positive");
  }
  const Tokenizer& tok = slm.tokenizer();
  const int64_t V = slm.config().n_vocab, H = slm.config().n_embd;
  const int maxt = opts.max_answer_tokens;
  auto progress = [&](const char* stage, int64_t done, int64_t total) {
    if (opts.on_progress) opts.on_progress(stage, done, total);
  };
  RouterTrainResult result;
  RouterTrainReport& rep = result.report;

  // 1. Prompts and references.
  std::vector<Question> qs;
  std::vector<size_t> need_llm;
  ChatRows chat(slm, opts.chat_template);
  const bool own_refs = opts.reference == ReferenceSource::kRow;
  for (size_t r = 0; r < rows.size(); ++r) {
    const QaRow& row = rows[r];
    const std::string where = "row " + std::to_string(r + 1) + (row.id.empty() ? "" : " (" + row.id + ")");
    if (!row.messages.empty()) {
      // A chat row: each assistant message is a reference after the messages before it; with
      // --reference llm (or when the row ends with the user's turn) the LLM answers the last.
      const auto& m = row.messages;
      auto add = [&](size_t n_before, bool by_llm) -> Status {  // the assistant turn after m[0..n_before)
        if (n_before == 0) return Status::Ok();
        const std::vector<ChatMessage> before(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(n_before));
        Question q;
        q.row = &row;
        q.row_index = r;
        TLR_ASSIGN_OR_RETURN(q.prompt, chat.Prompt(before));
        if (q.prompt.empty()) return Status::Ok();
        if (by_llm) {
          q.ref_from_llm = true;
          need_llm.push_back(qs.size());
        } else {
          const std::vector<ChatMessage> upto(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(n_before + 1));
          TLR_ASSIGN_OR_RETURN(q.ref, chat.Reference(upto, q.prompt));
        }
        qs.push_back(std::move(q));
        return Status::Ok();
      };
      // Every assistant message is a reference after the messages before it, except the last
      // when the LLM answers it (--reference llm); a row that ends with the user's turn gets
      // the LLM's answer there.
      const bool ends_with_assistant = m.back().role == "assistant";
      for (size_t k = 0; k < m.size(); ++k) {
        if (m[k].role != "assistant" || (k + 1 == m.size() && !own_refs)) continue;
        if (Status st = add(k, false); !st.ok()) return st.WithPrefix(where);
      }
      if (!ends_with_assistant || !own_refs) {
        if (Status st = add(ends_with_assistant ? m.size() - 1 : m.size(), true); !st.ok()) return st.WithPrefix(where);
      }
      continue;
    }
    if (row.answer_key.empty()) {
      ++rep.dropped_no_answer_key;
      continue;
    }
    Question q;
    q.row = &row;
    q.row_index = r;
    q.prompt = tok.Encode(QaPrompt(row));
    if (q.prompt.empty()) continue;
    if (own_refs && !row.reference.empty()) {
      q.ref = tok.Encode(row.reference);
      if (tok.eos() >= 0) q.ref.push_back(tok.eos());
    } else {
      q.ref_from_llm = true;
      need_llm.push_back(qs.size());
    }
    qs.push_back(std::move(q));
  }
  ForwardContext ctx(pool);
  for (size_t b = 0; b < need_llm.size(); b += opts.batch_questions) {
    const size_t e = std::min(need_llm.size(), b + opts.batch_questions);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = b; i < e; ++i) prompts.push_back(qs[need_llm[i]].prompt);
    TLR_ASSIGN_OR_RETURN(auto outs, llm.Greedy(prompts, maxt));
    if (outs.size() != prompts.size()) return Status::Error("the LLM answered " + std::to_string(outs.size()) +
                                                             " of " + std::to_string(prompts.size()) + " prompts");
    for (size_t i = b; i < e; ++i) {
      // An empty answer (an LLM of another vocabulary whose reply turned into no SLM token) is
      // dropped below as a wrong one.
      if (static_cast<int>(outs[i - b].size()) > maxt) {
        return Status::Error("the LLM's answer to a prompt has " + std::to_string(outs[i - b].size()) +
                             " tokens (1.." + std::to_string(maxt) + " expected)");
      }
      qs[need_llm[i]].ref = std::move(outs[i - b]);
    }
    progress("reference", static_cast<int64_t>(e), static_cast<int64_t>(need_llm.size()));
  }
  {
    std::vector<Question> kept;
    for (Question& q : qs) {
      // An answer that can be graded must be right; an ungraded chat row keeps the LLM's.
      if (q.ref_from_llm && (q.ref.empty() || (q.row->gradable() && !Graded(tok, *q.row, q.ref)))) {
        ++rep.dropped_llm_wrong;
        continue;
      }
      kept.push_back(std::move(q));
    }
    qs.swap(kept);
  }
  rep.questions = static_cast<int64_t>(qs.size());
  if (qs.size() < 4) {
    return Status::Error("only " + std::to_string(qs.size()) +
                         " usable questions (the LLM must answer them right): need more data");
  }
  // Validation questions: a deterministic pseudo-random subset.
  uint64_t s = opts.mlp.seed * 0x9e3779b97f4a7c15ull + 12345;
  int64_t n_val = 0;
  // Split by question_concept when rows have one (variants of one thing's questions stay on
  // one side, so validation measures unseen things), else by row.
  for (size_t i = 0; i < qs.size(); ++i) {
    Question& q = qs[i];
    // (Else by row: the turns of one conversation stay on one side.)
    const std::string key = q.row->question_concept.empty() ? std::to_string(q.row_index) : q.row->question_concept;
    uint64_t h = s;
    for (unsigned char ch : key) h = (h ^ ch) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    q.val = static_cast<double>(h >> 11) / 9007199254740992.0 < opts.val_fraction;
    n_val += q.val;
  }
  if (n_val == 0) qs.back().val = true;

  // 2. Teacher-forced SLM (and LLM where needed) passes; labels.
  Labelled lab;
  lab.all.dim = H;
  struct Pending { size_t q; int64_t j; int32_t tok; int64_t example; };
  // Every row's logits and hidden state, kept across batches (grown, never zeroed again: a fresh
  // [rows x vocabulary] buffer per batch was a fifth of the labelling for a 262k vocabulary).
  std::vector<float> logits, hidden;
  for (size_t b = 0; b < qs.size(); b += opts.batch_questions) {
    const size_t e = std::min(qs.size(), b + opts.batch_questions);
    std::vector<std::vector<int32_t>> inputs;
    std::vector<KvCache> caches;
    int64_t rows_total = 0;
    std::vector<std::vector<int32_t>> llm_inputs;  // the sequences whose reference is not the LLM's
    std::vector<size_t> llm_of(e - b, SIZE_MAX);    // question -> index into llm_inputs
    for (size_t i = b; i < e; ++i) {
      std::vector<int32_t> in = qs[i].prompt;
      in.insert(in.end(), qs[i].ref.begin(), qs[i].ref.end() - 1);
      rows_total += static_cast<int64_t>(in.size());
      TLR_ASSIGN_OR_RETURN(KvCache c, slm.NewCache(static_cast<int64_t>(in.size()) + maxt + 2));
      caches.push_back(std::move(c));
      if (!qs[i].ref_from_llm) {
        llm_of[i - b] = llm_inputs.size();
        llm_inputs.push_back(in);
      }
      inputs.push_back(std::move(in));
    }
    if (logits.size() < static_cast<size_t>(rows_total * V)) logits.resize(rows_total * V);
    if (hidden.size() < static_cast<size_t>(rows_total * H)) hidden.resize(rows_total * H);
    std::vector<SequenceInput> seqs;
    int64_t off = 0;
    for (size_t i = b; i < e; ++i) {
      seqs.push_back({&caches[i - b], inputs[i - b], OutputRows::kAll, logits.data() + off * V,
                      hidden.data() + off * H});
      off += static_cast<int64_t>(inputs[i - b].size());
    }
    TLR_RETURN_IF_ERROR(slm.Forward(seqs, &ctx));
    std::vector<std::vector<int32_t>> llm_pred;  // the LLM's argmax after each prefix
    // A bridged LLM is asked only where the SLM is wrong: llm_next[i - b][j] is its token after
    // question i's prompt + reference[0..j) there (-1: none), -2 where not asked.
    std::vector<std::vector<int32_t>> llm_next;
    if (llm.next_only()) {
      std::vector<std::vector<int32_t>> asks;
      std::vector<std::pair<size_t, int64_t>> ask_at;
      int64_t o = 0;
      for (size_t i = b; i < e; ++i) {
        const Question& q = qs[i];
        const int64_t P = static_cast<int64_t>(q.prompt.size());
        llm_next.emplace_back(q.ref.size(), -2);
        // Also where the reference is the LLM's own: its greedy answer came from calls asking for
        // many tokens, and a one-token call after a prefix of it (re-encoded, its last word held
        // back) need not give the same next token.
        for (int64_t j = 0; j < static_cast<int64_t>(q.ref.size()); ++j) {
          if (ArgMax(logits.data() + (o + P - 1 + j) * V, V) == q.ref[j]) continue;
          asks.emplace_back(inputs[i - b].begin(), inputs[i - b].begin() + P + j);
          ask_at.emplace_back(i - b, j);
        }
        o += static_cast<int64_t>(inputs[i - b].size());
      }
      if (!asks.empty()) {
        TLR_ASSIGN_OR_RETURN(auto next, llm.PredictNext(asks));
        if (next.size() != asks.size()) return Status::Error("the LLM answered " + std::to_string(next.size()) + " of " +
                                                             std::to_string(asks.size()) + " contexts");
        for (size_t k = 0; k < next.size(); ++k) {
          if (next[k].size() > 1 || (next[k].size() == 1 && (next[k][0] < 0 || next[k][0] >= V))) {
            return Status::Error("the LLM's next token does not fit the SLM's vocabulary");
          }
          llm_next[ask_at[k].first][ask_at[k].second] = next[k].empty() ? -1 : next[k][0];
        }
      }
    } else if (!llm_inputs.empty()) {
      TLR_ASSIGN_OR_RETURN(llm_pred, llm.Predict(llm_inputs));
      bool fits = llm_pred.size() == llm_inputs.size();
      for (size_t k = 0; fits && k < llm_pred.size(); ++k) {
        fits = llm_pred[k].size() == llm_inputs[k].size();
        for (int32_t t : llm_pred[k]) fits = fits && t >= 0 && t < V;
      }
      if (!fits) return Status::Error("the LLM's predictions do not match the sequences asked about (count, length or token ids)");
    }
    off = 0;
    std::vector<KvCache> forks;
    std::vector<int32_t> firsts;
    std::vector<Pending> batch_rollouts;
    for (size_t i = b; i < e; ++i) {
      const Question& q = qs[i];
      const int64_t P = static_cast<int64_t>(q.prompt.size());
      for (int64_t j = 0; j < static_cast<int64_t>(q.ref.size()); ++j) {
        const int64_t row = off + P - 1 + j;
        const float* lg = logits.data() + row * V;
        const int32_t s_tok = ArgMax(lg, V);
        const int32_t want = q.ref[j];
        int label;
        if (s_tok == want) {
          label = 1;
        } else if (llm.next_only() ? llm_next[i - b][j] == want
                                   : q.ref_from_llm || llm_pred[llm_of[i - b]][P - 1 + j] == want) {
          label = 0;
        } else if (opts.both_wrong == BothWrong::kDrop || !q.row->gradable()) {  // no grader: dropped
          ++rep.dropped_tokens;
          continue;
        } else {
          label = -1;  // decided by the rollout below
        }
        const int64_t ex = lab.all.size();
        lab.all.x.insert(lab.all.x.end(), hidden.data() + row * H, hidden.data() + (row + 1) * H);
        if (r2r || !opts.dump_features.empty()) {  // R2R-style routers read the top logits and the token too
          lab.all.topk = std::min<int64_t>(kDumpTopK, V);
          const size_t at = lab.all.top_logits.size();
          lab.all.top_logits.resize(at + static_cast<size_t>(lab.all.topk));
          TopLogits(lg, V, lab.all.topk, lab.all.top_logits.data() + at, nullptr);
          lab.all.token.push_back(s_tok);
        }
        lab.all.label.push_back(label == 1);
        lab.all.group.push_back(static_cast<int32_t>(i));
        lab.maxprob.push_back(MaxProbConfidence(lg, V));
        lab.entropy.push_back(EntropyConfidence(lg, V));
        lab.is_val.push_back(q.val);
        if (label == -1) {
          forks.push_back(caches[i - b].Fork(P + j));
          firsts.push_back(s_tok);
          batch_rollouts.push_back({i, j, s_tok, ex});
        }
      }
      off += static_cast<int64_t>(inputs[i - b].size());
    }
    if (!forks.empty()) {
      std::vector<KvCache*> ptrs;
      for (auto& f : forks) ptrs.push_back(&f);
      // One shared limit keeps the batch simple; each rollout is cut at its own budget below.
      TLR_ASSIGN_OR_RETURN(auto outs, GreedyContinue(slm, ptrs, firsts, maxt, pool));
      for (size_t k = 0; k < batch_rollouts.size(); ++k) {
        const Pending& p = batch_rollouts[k];
        const Question& q = qs[p.q];
        std::vector<int32_t> answer(q.ref.begin(), q.ref.begin() + p.j);
        answer.push_back(p.tok);
        const size_t budget = static_cast<size_t>(std::max<int64_t>(0, maxt - p.j - 1));
        answer.insert(answer.end(), outs[k].begin(), outs[k].begin() + std::min(budget, outs[k].size()));
        const bool ok = Graded(tok, *q.row, answer);
        lab.all.label[p.example] = ok;
        ++rep.both_wrong;
        rep.both_wrong_kept += ok;
        lab.both_wrong.push_back({p.example, p.q, p.j, p.tok});
      }
    }
    progress("label", static_cast<int64_t>(e), static_cast<int64_t>(qs.size()));
  }
  rep.tokens = lab.all.size();
  for (uint8_t l : lab.all.label) (l ? rep.keep : rep.route) += 1;

  rep.label_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // The SLM's input embedding (an R2R router reads its token's row): for the dump and for r2r.
  std::vector<float> embeddings;
  if (r2r || !opts.dump_features.empty()) {
    const int64_t E = slm.config().n_embd;
    embeddings.resize(static_cast<size_t>(V * E));
    for (int64_t t = 0; t < V; ++t) slm.EmbeddingRow(static_cast<int32_t>(t), embeddings.data() + t * E);
  }
  if (!opts.dump_features.empty()) {
    std::vector<DumpedQuestion> dq;
    for (const Question& q : qs) dq.push_back({static_cast<int64_t>(q.row_index), q.row->id});
    TLR_RETURN_IF_ERROR(DumpRouterFeatures(opts.dump_features, lab.all, lab.is_val, dq, slm.fingerprint_hex(), 65536,
                                           &embeddings, V)
                            .WithPrefix("--dump-features"));
  }

  // 3. Train (and relabel in later rounds).
  auto split = [&](RouterExamples* tr, RouterExamples* va) {
    tr->dim = va->dim = H;
    for (int64_t i = 0; i < lab.all.size(); ++i) {
      RouterExamples* d = lab.is_val[i] ? va : tr;
      d->x.insert(d->x.end(), lab.all.x.begin() + i * H, lab.all.x.begin() + (i + 1) * H);
      d->label.push_back(lab.all.label[i]);
      d->group.push_back(lab.all.group[i]);
      if (lab.all.topk > 0) {
        d->topk = lab.all.topk;
        const int64_t K = lab.all.topk;
        d->top_logits.insert(d->top_logits.end(), lab.all.top_logits.begin() + i * K, lab.all.top_logits.begin() + (i + 1) * K);
        d->token.push_back(lab.all.token[i]);
      }
    }
  };
  RouterInfo info;
  info.kind = opts.mlp.kind;
  info.slm_fingerprint = slm.fingerprint_hex();
  info.slm_name = opts.slm_name;
  for (int round = 1; round <= opts.rounds; ++round) {
    if (round > 1) {
      int64_t kept = 0;
      for (size_t k = 0; k < lab.both_wrong.size(); ++k) {
        const BothWrongPos& p = lab.both_wrong[k];
        const Question& q = qs[p.question];
        std::vector<int32_t> prefix = q.prompt;
        prefix.insert(prefix.end(), q.ref.begin(), q.ref.begin() + p.j);
        prefix.push_back(p.slm_token);
        const int budget = std::max<int>(0, maxt - static_cast<int>(p.j) - 1);
        TLR_ASSIGN_OR_RETURN(auto cont, JointRollout(slm, llm, &result.router, result.router.info().threshold,
                                                     prefix, budget, pool));
        std::vector<int32_t> answer(q.ref.begin(), q.ref.begin() + p.j);
        answer.push_back(p.slm_token);
        answer.insert(answer.end(), cont.begin(), cont.end());
        const bool ok = Graded(tok, *q.row, answer);
        lab.all.label[p.example] = ok;
        kept += ok;
        progress("rollout", static_cast<int64_t>(k + 1), static_cast<int64_t>(lab.both_wrong.size()));
      }
      rep.both_wrong_kept = kept;
      rep.keep = rep.route = 0;
      for (uint8_t l : lab.all.label) (l ? rep.keep : rep.route) += 1;
    }
    RouterExamples tr, va;
    split(&tr, &va);
    MlpTrainOptions mo = opts.mlp;
    auto user_cb = opts.mlp.on_epoch;
    mo.on_epoch = [&](int epoch, float tl, float vl, float auc) {
      if (user_cb) user_cb(epoch, tl, vl, auc);
      progress("train", epoch, mo.max_epochs);
    };
    std::vector<float> conf(va.size()), mp, ent;
    if (r2r) {
      R2rTrainOptions ro = opts.r2r;
      ro.epochs = mo.max_epochs;
      ro.patience = mo.patience;
      ro.batch = mo.batch;
      ro.lr = mo.lr;
      ro.seed = mo.seed;
      ro.on_epoch = mo.on_epoch;
      TLR_ASSIGN_OR_RETURN(R2rTrainResult net, TrainR2rNetwork(tr, va, embeddings, V, ro, pool));
      rep.mlp = {};
      rep.mlp.epochs = net.epochs;
      rep.mlp.best_epoch = net.best_epoch;
      rep.mlp.train_loss = net.train_loss;
      rep.mlp.val_loss = net.val_loss;
      rep.mlp.val_auroc = net.val_auroc;
      // Stored as the router will run it (f16 or q8_0: within quantization error of the f32 net).
      TLR_RETURN_IF_ERROR(net.net.StoreMatricesAs(opts.weight_type));
      // The held-out confidences from the network the router will run.
      R2rScratch scratch;
      for (int64_t i = 0; i < va.size(); ++i) {
        conf[i] = 1.0f - Sigmoid(net.net.Logit(va.x.data() + i * H, va.token[i], va.top_logits.data() + i * va.topk, &scratch));
      }
      TLR_ASSIGN_OR_RETURN(result.router, Router::FromR2r(info, std::move(net.net)));
    } else {
      TLR_ASSIGN_OR_RETURN(rep.mlp, TrainRouterNetwork(tr, va, mo, pool));
      TLR_ASSIGN_OR_RETURN(result.router, Router::FromLayers(info, rep.mlp.layers, opts.weight_type));
      result.router.ConfidenceBatch(va.x.data(), va.size(), conf.data(), pool);
    }
    // Held-out AUROC for the router and the two baselines, and a recommended threshold
    // (Youden's J: the best balanced separation of keep from route).
    for (int64_t i = 0; i < lab.all.size(); ++i) {
      if (lab.is_val[i]) mp.push_back(lab.maxprob[i]), ent.push_back(lab.entropy[i]);
    }
    rep.val_tokens = va.size();
    rep.auroc_router = Auroc(conf, va.label);
    rep.auroc_maxprob = Auroc(mp, va.label);
    rep.auroc_entropy = Auroc(ent, va.label);
    int64_t pos = 0, neg = 0;
    for (uint8_t l : va.label) (l ? pos : neg) += 1;
    std::vector<size_t> idx(va.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t c) { return conf[a] < conf[c]; });
    double best_j = -1;
    float best_t = 0.5f;
    int64_t below_pos = 0, below_neg = 0;  // routed (confidence < t) keep / route tokens
    for (size_t k = 0; k < idx.size(); ++k) {
      (va.label[idx[k]] ? below_pos : below_neg) += 1;
      if (k + 1 < idx.size() && conf[idx[k + 1]] == conf[idx[k]]) continue;
      const double tpr = neg ? static_cast<double>(below_neg) / neg : 0;   // routes caught
      const double fpr = pos ? static_cast<double>(below_pos) / pos : 0;   // keeps routed
      if (tpr - fpr > best_j) {
        best_j = tpr - fpr;
        best_t = k + 1 < idx.size() ? 0.5f * (conf[idx[k]] + conf[idx[k + 1]]) : conf[idx[k]] + 1e-6f;
      }
    }
    rep.threshold = best_t;
    result.router.mutable_info().threshold = best_t;
  }
  rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.router.mutable_info().training_summary = rep.ToJson();
  return result;
}

}  // namespace tlr
