// `tlr router train` / `info` / `calibrate` / `import`: train a router for an SLM/LLM pair,
// inspect one, choose its threshold, bring one from PyTorch (apps layer).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "apps/tlr/progress.h"
#include "model/model.h"
#include "ops/thread_pool.h"
#include "device/labels/bridged_label_llm.h"
#include "device/session/llm_factory.h"
#include "device/labels/remote_label_llm.h"
#include "routing/label_cache.h"
#include "routing/label_llm.h"
#include "routing/router_train.h"
#include "util/hash.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace {

// Counts the tokens the LLM reads for router training (what it is asked about: sequences and
// prompts), for the progress line's tokens/s.
class CountingLabelLlm : public LabelLlm {
 public:
  explicit CountingLabelLlm(LabelLlm* inner) : inner_(inner) {}
  std::string name() const override { return inner_->name(); }
  std::string model_id() const override { return inner_->model_id(); }
  Expected<std::vector<std::vector<int32_t>>> Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                      const AnswerFn& on_answer = {}) override {
    auto r = inner_->Predict(seqs, on_answer);
    if (r.ok()) Count(seqs);
    return r;
  }
  Expected<std::vector<std::vector<int32_t>>> Greedy(const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                                                     const AnswerFn& on_answer = {}) override {
    auto r = inner_->Greedy(prompts, max_tokens, on_answer);
    if (r.ok()) Count(prompts);
    return r;
  }
  Expected<std::vector<std::vector<int32_t>>> PredictNext(const std::vector<std::vector<int32_t>>& contexts,
                                                          const AnswerFn& on_answer = {}) override {
    auto r = inner_->PredictNext(contexts, on_answer);
    if (r.ok()) Count(contexts);
    return r;
  }
  bool next_only() const override { return inner_->next_only(); }
  // "12345 LLM tokens read, 6789/s"
  std::string Rate() const {
    const double s = SecondsSince(t0_);
    char b[96];
    std::snprintf(b, sizeof b, "%lld LLM tokens read, %.0f/s", static_cast<long long>(tokens_), s > 0 ? tokens_ / s : 0.0);
    return b;
  }

 private:
  void Count(const std::vector<std::vector<int32_t>>& v) {
    for (const auto& x : v) tokens_ += static_cast<int64_t>(x.size());
  }
  LabelLlm* inner_;
  int64_t tokens_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};


struct TrainOwn {
  std::string out, kind = "citer", both_wrong = "rollout", weight_type = "f16", work_dir, reference = "row",
      chat_template, dump_features, r2r_dims = "64,64,48";
  int rounds = 1, epochs = 60, batch = 256, max_answer = 64, patience = 8;
  float lr = 1e-3f, val_frac = 0.15f, dropout = 0.1f;
  uint64_t seed = 1;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TrainOwn, out, kind, both_wrong, weight_type, work_dir, reference, chat_template,
                                   dump_features, r2r_dims, rounds, epochs, batch, max_answer, patience, lr, val_frac,
                                   dropout, seed)

struct RouterInfoOwn {
  std::string path;
  bool json = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RouterInfoOwn, path, json)

Command AddRouterInfo(CLI::App* router_app) {
  auto [info, o, p] =
      NewCommand<RouterInfoOwn>(router_app, "info", "Print a router file's kind, SLM and training summary");
  info->add_option("router", o->path, "Router GGUF")->required();
  Example(info->add_flag("--json", o->json, "Print JSON"), "");
  AddOptions(info, kCmdRouterInfo, p.get(), "@demo/router.gguf");
  return MakeCommand(info, p, o, [o = o](const std::string& cmd) -> int {
    auto r = Router::Load(o->path);
    if (!r.ok()) return ReportError(cmd, r.status().message());
    const RouterInfo& in = r->info();
    // Two routers with the same weights have the same fingerprint, whatever their training
    // summaries say: citer/colm as loaded (the file's storage type decoded), r2r as stored (its
    // tensors' names, types, shapes and bytes).
    uint64_t wfp = kFnvOffset;
    for (const DenseLayer& l : r->layers()) {
      wfp = Fnv1a(wfp, l.w.data(), l.w.size() * sizeof(float));
      wfp = Fnv1a(wfp, l.b.data(), l.b.size() * sizeof(float));
    }
    if (const R2rNet* net = r->r2r()) {  // as stored (an f16 copy of a network is another network)
      for (const auto& [name, t] : net->params) {
        wfp = Fnv1a(wfp, name.data(), name.size() + 1);  // with its terminating NUL: a separator
        const auto type = static_cast<uint32_t>(t.type);
        wfp = Fnv1a(wfp, &type, sizeof type);
        wfp = Fnv1a(wfp, t.shape.data(), t.shape.size() * sizeof(int64_t));
        wfp = Fnv1a(wfp, t.v.data(), t.v.size() * sizeof(float));
        wfp = Fnv1a(wfp, t.q.data(), t.q.size());
      }
    }
    char hex[17];
    nlohmann::json j = {{"kind", RouterKindName(in.kind)}, {"input_dim", in.input_dim},
                        {"weights_fingerprint", std::string(HexU64(wfp, hex))},
                        {"params", r->n_params()},
                        {"weight_type", GgmlTraits(r->weight_type()).name},
                        {"slm_fingerprint", in.slm_fingerprint}, {"slm_name", in.slm_name},
                        {"threshold", in.threshold}};
    auto summary = nlohmann::json::parse(in.training_summary, nullptr, false);
    j["training_summary"] = summary.is_discarded() ? nlohmann::json(in.training_summary) : summary;
    if (o->json) {
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      for (auto& [k, v] : j.items()) std::printf("%-19s %s\n", k.c_str(), v.dump().c_str());
    }
    return 0;
  });
}

Command AddRouterTrain(CLI::App* router_app) {
  auto [train, o, p] = NewCommand<TrainOwn>(
      router_app, "train", "Train a router for an SLM/LLM pair on questions or chat rows (CITER labels)");
  p->server.timeout_s = 60;  // a scoring call reads whole sequences
  Example(train->add_option("--reference", o->reference,
                            "row: the rows' own references (\"reference\", the assistant messages) where they have "
                            "them; llm: the LLM's greedy answer instead (a chat row's last assistant message)")
              ->capture_default_str()->check(CLI::IsMember({"row", "llm"})),
          "llm");
  Example(train->add_option("--chat-template", o->chat_template,
                            "Chat rows: a Jinja chat template file to render them with instead of the SLM's own (for "
                            "a model without one; bos_token and eos_token are the SLM's)")
              ->check(CLI::ExistingFile),
          "@demo/chat_template.jinja");
  Example(train->add_option("-o,--out", o->out, "Router GGUF to write")->required(), "r2.gguf");
  Example(train->add_option("--kind", o->kind,
                            "citer (MLP), colm (linear deferral head) or r2r (R2R's router: the hidden state, the "
                            "token's embedding and the top-100 logits through residual blocks)")
              ->capture_default_str()->check(CLI::IsMember({"citer", "colm", "r2r"})),
          "colm");
  Example(train->add_option("--r2r-dims", o->r2r_dims,
                            "r2r: the backbone's widths, comma-separated (R2R's own config: 1024 six times)")
              ->capture_default_str(),
          "32,32", "--kind r2r");
  Example(train->add_option("--both-wrong", o->both_wrong,
                            "Positions where neither model matches the reference: rollout (label by whether the SLM's "
                            "continuation still answers right) or drop (rows without a grader always drop them)")
              ->capture_default_str()->check(CLI::IsMember({"rollout", "drop"})),
          "drop");
  Example(train->add_option("--rounds", o->rounds, "Labelling rounds; later rounds relabel both-wrong positions "
                                                   "with the router in the loop (CITER's iterative training)")
              ->capture_default_str()->check(CLI::Range(1, 10)),
          "2");
  Example(train->add_option("--epochs", o->epochs, "Maximum epochs")->capture_default_str()
              ->check(CLI::Range(1, 10000)),
          "3");
  Example(train->add_option("--patience", o->patience, "Stop after this many epochs without a better validation loss (r2r: held-out AUROC)")
              ->capture_default_str()->check(CLI::Range(1, 10000)),
          "3");
  Example(train->add_option("--batch", o->batch, "Batch size")->capture_default_str()->check(CLI::Range(2, 1 << 20)),
          "16");
  Example(train->add_option("--lr", o->lr, "Adam learning rate")->capture_default_str()
              ->check(CLI::Range(1e-7f, 1.0f)),
          "0.01");
  Example(train->add_option("--dropout", o->dropout, "Dropout (citer; colm and r2r train without)")->capture_default_str()
              ->check(CLI::Range(0.0f, 0.9f)),
          "0.2");
  Example(train->add_option("--val-frac", o->val_frac, "Questions held out for validation and AUROC")
              ->capture_default_str()->check(CLI::Range(0.01f, 0.9f)),
          "0.2");
  Example(train->add_option("--max-answer-tokens", o->max_answer, "Reference and rollout length limit")
              ->capture_default_str()->check(CLI::Range(1, 4096)),
          "9");
  Example(train->add_option("--weight-type", o->weight_type, "How the router stores its matrices (every kind; r2r: its Linear weights and token embedding, f32 keeps the trained scores bit for bit)")
              ->capture_default_str()->check(CLI::IsMember({"f32", "f16", "q8_0"})),
          "f32");
  Example(train->add_option("--seed", o->seed, "Seed (initialisation, shuffling, validation split)")
              ->capture_default_str()->check(WholeNumberU64()),
          "5");
  Example(train->add_option("--work-dir", o->work_dir,
                            "Keep the LLM's answers here as they arrive: a run stopped for any reason continues where "
                            "it stopped when started again with the same directory (nothing is asked twice)"),
          "w");
  Example(train->add_option("--dump-features", o->dump_features,
                            "Also write the labelled positions (SLM hidden states, labels, question ids) to this "
                            "directory as safetensors, for training the router network in PyTorch "
                            "(tools/train/router_torch.py)"),
          "f");
  AddOptions(train, kCmdRouterTrain, p.get(), "--slm @demo/slm.gguf --data @demo/dev.jsonl -o r.gguf");
  train->footer("The LLM's labels come from --llm (in this process) or --server: `tlr serve` (--backend tlr:\n"
                "teacher-forced scoring, many sequences per request) or a vLLM-compatible engine (--backend\n"
                "openai: /v1/completions with prompt_logprobs). Either way the labels are the same.\n"
                "An LLM of another vocabulary (--llm, or --server with --llm-tokenizer) is asked, where the SLM\n"
                "is wrong, exactly as a routed call asks it; its reply's text decides the label.\n"
                "Examples:\n  tlr router train --slm models/demo/slm.gguf --llm models/demo/llm.gguf \\\n"
                "      --data train.jsonl --out router.gguf\n"
                "  tlr router train --slm qwen2.5-0.5b.gguf --server http://gpu-box:8000 --backend openai \\\n"
                "      --data train.jsonl --out router.gguf --work-dir router-work");
  return MakeCommand(train, p, o, [o = o, p = p, train = train](const std::string& cmd) -> int {
            // Options that would do nothing in what was asked are refused rather than ignored.
            auto given = [train](const char* name) { return train->get_option(name)->count() > 0; };
            if (given("--r2r-dims") && o->kind != "r2r") return ReportError(cmd, "--r2r-dims is for --kind r2r");
            if (given("--dropout") && o->kind != "citer") {
              return ReportError(cmd, "--dropout is for --kind citer (" + o->kind + " trains without dropout)");
            }
            if (o->rounds > 1 && o->both_wrong == "drop") {
              return ReportError(cmd, "--rounds " + std::to_string(o->rounds) + " relabels both-wrong positions, which "
                                      "--both-wrong drop leaves out: later rounds would train on the same labels");
            }
            auto rows = LoadQaJsonl(p->data);
            if (!rows.ok()) return ReportError(cmd, rows.status().message());
            if (p->limit > 0 && static_cast<size_t>(p->limit) < rows->size()) rows->resize(p->limit);
            if (!o->chat_template.empty() &&
                std::none_of(rows->begin(), rows->end(), [](const QaRow& r) { return !r.messages.empty(); })) {
              return ReportError(cmd, "--chat-template renders chat rows (\"messages\"), and the rows of " + p->data +
                                          " are all questions");
            }
            const bool remote = p->remote();
            if (!remote && p->llm.empty()) return ReportError(cmd, "give the LLM as --llm FILE or --server URL (one of them)");
            PairNeeds needs;
            needs.router = false;
            auto pair = LoadPair(*p, needs);
            if (!pair.ok()) return ReportError(cmd, pair.status().message());
            const std::unique_ptr<Model>& slm = pair->slm;
            ThreadPool pool(p->threads);
            std::unique_ptr<LabelLlm> llm;
            // An LLM of another vocabulary: its calls go through a vocabulary bridge (the same
            // routed calls the decoder makes), over this stack.
            std::unique_ptr<LlmStack> stack;
            if (remote) {
              const LlmConfig& config = pair->llm.config;
              RemoteOptions ro = config.remote;
              ro.http.sim_rtt_s = config.sim_rtt_s;  // --sim-rtt: per HTTP request, as the device's calls
              ro.http.sim_jitter_s = config.sim_jitter_s;
              if (!p->server.llm_tokenizer.empty()) {
                auto st = MakeLlmStack(*pair, 0, slm->tokenizer());
                if (!st.ok()) return ReportError(cmd, "LLM: " + st.status().message());
                stack = std::move(st).value();
              }
              if (p->server.llm_prompt == "text" && !(stack && stack->bridge())) {
                return ReportError(cmd, "--llm-prompt text: router training with an LLM of the SLM's vocabulary asks "
                                        "for teacher-forced predictions, which need token-id prompts (text prompts "
                                        "are for an LLM of another vocabulary, with --llm-tokenizer)");
              }
              const Tokenizer& server_vocab = stack && stack->llm_vocab() ? *stack->llm_vocab() : slm->tokenizer();
              auto r = RemoteLabelLlm::Connect(ro, server_vocab);
              if (!r.ok()) return ReportError(cmd, "LLM: " + r.status().message());
              llm = std::move(r).value();
            } else {
              const Model& llm_model = *pair->llm.model;
              if (llm_model.tokenizer().Fingerprint() != slm->tokenizer().Fingerprint()) {
                auto st = MakeLlmStack(*pair, 8192, slm->tokenizer());
                if (!st.ok()) return ReportError(cmd, "LLM: " + st.status().message());
                stack = std::move(st).value();
              }
              llm = std::make_unique<InProcessLabelLlm>(llm_model, &pool);
            }
            if (stack && stack->bridge()) {
              const std::string id = llm->model_id();  // the LLM's own (checked the server's vocabulary)
              llm = std::make_unique<BridgedLabelLlm>(stack->unbridged(), slm->tokenizer(), *stack->llm_vocab(), id);
              std::fprintf(stderr, "router train: the LLM's vocabulary differs from the SLM's: labels through a "
                                   "vocabulary bridge (each position where the SLM is wrong is asked as a routed call)\n");
            }
            std::unique_ptr<CachedLabelLlm> cached;
            LabelLlm* labels = llm.get();
            if (!o->work_dir.empty()) {
              auto c = CachedLabelLlm::Open(llm.get(), o->work_dir);
              if (!c.ok()) return ReportError(cmd, "--work-dir: " + c.status().message());
              cached = std::move(c).value();
              labels = cached.get();
              if (cached->loaded() > 0) {
                std::fprintf(stderr, "router train: resuming: %lld answers of the LLM already in %s\n",
                             static_cast<long long>(cached->loaded()), o->work_dir.c_str());
              }
            }
            RouterTrainOptions t;
            t.mlp.kind = o->kind == "colm" ? RouterKind::kColm : o->kind == "r2r" ? RouterKind::kR2r : RouterKind::kCiter;
            if (o->kind == "r2r") {
              t.r2r.dims.clear();
              std::string dims = o->r2r_dims;
              for (size_t at = 0; at <= dims.size();) {
                const size_t end = std::min(dims.find(',', at), dims.size());
                const std::string part = dims.substr(at, end - at);
                char* stop = nullptr;
                const long v = std::strtol(part.c_str(), &stop, 10);
                if (part.empty() || *stop != '\0' || v < 1 || v > 65536) {
                  return ReportError(cmd, "--r2r-dims: '" + o->r2r_dims + "' is not a comma-separated list of widths 1..65536");
                }
                t.r2r.dims.push_back(v);
                at = end + 1;
              }
            }
            t.mlp.max_epochs = o->epochs;
            t.mlp.batch = o->batch;
            t.mlp.lr = o->lr;
            t.mlp.dropout = o->dropout;
            t.mlp.patience = o->patience;
            t.mlp.seed = o->seed;
            t.both_wrong = o->both_wrong == "drop" ? BothWrong::kDrop : BothWrong::kRollout;
            t.reference = o->reference == "llm" ? ReferenceSource::kLlm : ReferenceSource::kRow;
            t.dump_features = o->dump_features;
            if (!o->chat_template.empty()) {
              auto src = ReadFileToString(o->chat_template);
              if (!src.ok()) return ReportError(cmd, "--chat-template: " + src.status().message());
              t.chat_template = std::move(src).value();
            }
            t.rounds = o->rounds;
            t.max_answer_tokens = o->max_answer;
            t.val_fraction = o->val_frac;
            t.weight_type = o->weight_type == "q8_0" ? GgmlType::kQ8_0
                            : o->weight_type == "f16" ? GgmlType::kF16 : GgmlType::kF32;
            if (auto nm = slm->file().GetString("general.name"); nm.ok()) t.slm_name = *nm;
            Progress progress;
            CountingLabelLlm counting(labels);
            t.on_progress = [&](const std::string& stage, int64_t done, int64_t total) {
              if (stage == "reference" || stage == "label") progress.SetExtra(counting.Rate());
              progress.Update(stage, done, total);
            };
            t.mlp.on_epoch = [&](int, float tl, float vl, float auc) {
              char b[96];
              std::snprintf(b, sizeof b, "loss %.4f  val loss %.4f  val AUROC %.4f", tl, vl, auc);
              progress.SetExtra(b);
            };
            std::fprintf(stderr, "router train: %zu questions, SLM %s, LLM %s, %s router\n", rows->size(),
                         p->slm.c_str(), remote ? llm->name().c_str() : p->llm.c_str(), o->kind.c_str());
            auto result = TrainRouter(*slm, counting, *rows, t, &pool);
            progress.Done();
            if (cached) {
              std::fprintf(stderr, "LLM answers: %lld asked, %lld reused from %s\n", static_cast<long long>(cached->asked()),
                           static_cast<long long>(cached->reused()), o->work_dir.c_str());
            }
            if (auto* b = dynamic_cast<BridgedLabelLlm*>(llm.get())) {
              std::fprintf(stderr, "%s\n", BridgeSummary(b->bridge_stats()).c_str());
              for (const auto& [why, n] : b->bridge_failures()) {
                std::fprintf(stderr, "  %lld calls gave no SLM token: %s\n", static_cast<long long>(n), why.c_str());
              }
            }
            if (!result.ok()) return ReportError(cmd, result.status().message());
            TLR_CLI_CHECK(cmd, result->router.Save(o->out));
            const RouterTrainReport& r = result->report;
            std::fprintf(stderr,
                         "questions %lld used (%lld dropped: LLM wrong), tokens %lld: keep %lld, route %lld "
                         "(both wrong %lld, kept after rollout %lld, dropped %lld)\n"
                         "epochs %d (best %d), val loss %.4f on %lld held-out tokens\n"
                         "held-out AUROC: %s %.4f | maxprob %.4f | entropy %.4f\n"
                         "labels in %.1f s; recommended threshold %.3f; %s written in %.1f s\n",
                         static_cast<long long>(r.questions), static_cast<long long>(r.dropped_llm_wrong),
                         static_cast<long long>(r.tokens), static_cast<long long>(r.keep),
                         static_cast<long long>(r.route), static_cast<long long>(r.both_wrong),
                         static_cast<long long>(r.both_wrong_kept), static_cast<long long>(r.dropped_tokens),
                         r.mlp.epochs, r.mlp.best_epoch, r.mlp.val_loss, static_cast<long long>(r.val_tokens),
                         o->kind.c_str(), r.auroc_router, r.auroc_maxprob, r.auroc_entropy, r.label_seconds, r.threshold,
                         o->out.c_str(), progress.Elapsed());
            return 0;
          });
}

}  // namespace

// `tlr router calibrate` (cmd_router_calibrate.cc) and `tlr router import` (cmd_router_import.cc).
Command AddRouterCalibrate(CLI::App* router_app);
Command AddRouterImport(CLI::App* router_app);

Command AddRouterCommand(CLI::App& root) {
  CLI::App* app = root.add_subcommand("router", "Train or inspect a token router");
  app->require_subcommand(1);
  std::vector<Command> subs = {AddRouterTrain(app), AddRouterInfo(app), AddRouterCalibrate(app),
                               AddRouterImport(app)};
  return {app, [subs]() -> int {
            for (const Command& c : subs) {
              if (c.app->parsed()) return c.run();
            }
            return 2;
          }};
}

}  // namespace tlr::cli
