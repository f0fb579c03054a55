// Router training from an SLM/LLM pair (routing layer), following CITER's labels.
//
// For each training question: the reference completion is the row's "reference" text if it
// has one, else the LLM's greedy answer (kept only when it is graded right; questions the LLM
// gets wrong are dropped). The SLM and LLM read prompt + reference teacher-forced (batched
// prefill over several questions at once). At each reference position:
//   SLM's argmax == reference token            -> keep (label 1: the SLM's token is fine)
//   else LLM's argmax == reference token       -> route (label 0)
//   else (both wrong)                          -> rollout: continue greedily from the SLM's
//        token (SLM only in round 1; in later rounds jointly with the current router in the
//        loop, CITER's iterative rounds) and keep iff the final answer is right; or drop the
//        position (BothWrong::kDrop).
// When the reference is the LLM's own greedy answer, its argmax equals the reference by
// construction and the LLM pass is skipped. An LLM of another vocabulary (label_llm.h's
// next_only) is asked only at the positions where the SLM is wrong, each as a routed call would
// be, its own references included: "the LLM is right here" is decided on text, by the SLM token
// its reply turns into. Features are the SLM's final hidden states; the network trains with
// mlp_train.h on a split by question; AUROC on the held-out questions' tokens is reported for
// the router and for the maxprob and entropy baselines. An R2R router (r2r_train.h) also reads
// the SLM's top-100 logits and its token at each position.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "routing/mlp_train.h"
#include "routing/qa.h"
#include "routing/r2r_train.h"
#include "routing/router.h"
#include "util/status.h"

namespace tlr {

class LabelLlm;
class Model;
class ThreadPool;

enum class BothWrong { kRollout, kDrop };
// Where references come from: the rows' own (a multiple-choice row's "reference", a chat row's
// assistant messages), or the LLM's greedy answer (a chat row's last assistant turn).
enum class ReferenceSource { kRow, kLlm };

struct RouterTrainOptions {
  // The kind (citer, colm, r2r) and training schedule: epochs, batch, learning rate, seed and
  // patience hold for every kind; r2r's network shape is in `r2r` (its schedule fields unused).
  MlpTrainOptions mlp;
  R2rTrainOptions r2r;
  BothWrong both_wrong = BothWrong::kRollout;  // rows without a grader always drop them
  ReferenceSource reference = ReferenceSource::kRow;
  // Chat rows: a Jinja chat template to render them with instead of the SLM's own (a model
  // without one, or one to override); empty: the SLM's (else its architecture's built-in).
  std::string chat_template;
  // Also write the labelled positions (round 1's labels) for training elsewhere
  // (feature_dump.h); empty: no dump.
  std::string dump_features;
  int rounds = 1;               // >1: relabel both-wrong tokens with the router in the loop
  int max_answer_tokens = 64;   // reference and rollout length limit
  float val_fraction = 0.15f;   // questions held out for validation and AUROC
  int batch_questions = 16;     // questions per batched prefill
  // How the router holds its matrices (every kind; r2r's too): f16 or q8_0 keep a 0.5B SLM's
  // router under 1% of its step; f32 keeps r2r's trained scores bit for bit.
  GgmlType weight_type = GgmlType::kF16;
  std::string slm_name;
  // Progress: stage ("reference", "label", "rollout", "train"), done, total.
  std::function<void(const std::string&, int64_t, int64_t)> on_progress;
};

struct RouterTrainReport {
  int64_t questions = 0, dropped_llm_wrong = 0, dropped_no_answer_key = 0;
  int64_t tokens = 0, keep = 0, route = 0, both_wrong = 0, both_wrong_kept = 0, dropped_tokens = 0;
  int64_t val_tokens = 0;
  double auroc_router = 0, auroc_maxprob = 0, auroc_entropy = 0;
  float threshold = 0.5f;
  MlpTrainResult mlp;
  double seconds = 0;
  double label_seconds = 0;  // references and labels (the LLM's part and the SLM's), before training
  std::string ToJson() const;
};

struct RouterTrainResult {
  Router router;
  RouterTrainReport report;
};

// With the LLM in this process (its tokenizer must be the SLM's; another vocabulary goes
// through the device layer's BridgedLabelLlm and the overload below).
Expected<RouterTrainResult> TrainRouter(const Model& slm, const Model& llm,
                                        const std::vector<QaRow>& rows,
                                        const RouterTrainOptions& opts, ThreadPool* pool);
// With the LLM anywhere (label_llm.h: in process or behind a server) answering in the SLM's
// token ids (the caller checks the vocabulary, or bridges it).
Expected<RouterTrainResult> TrainRouter(const Model& slm, LabelLlm& llm, const std::vector<QaRow>& rows,
                                        const RouterTrainOptions& opts, ThreadPool* pool);

// Greedy continuation of several sequences at once: each cache already holds its prefix, and
// first[i] is the next token to feed. Stops a sequence at an end-of-generation token (which
// is included) or after max_tokens generated tokens. Used for references and rollouts.
Expected<std::vector<std::vector<int32_t>>> GreedyContinue(const Model& model,
                                                           std::vector<KvCache*> caches,
                                                           const std::vector<int32_t>& first,
                                                           int max_tokens, ThreadPool* pool);

}  // namespace tlr
