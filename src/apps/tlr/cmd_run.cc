// `tlr run`: generate text with one model, streaming to stdout (apps layer).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "model/chat_template.h"
#include "model/model.h"
#include "model/sampler.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "util/mapped_file.h"
#include "util/resident_memory.h"

namespace tlr::cli {

namespace {

struct RunOwn {
  std::string prompt, prompt_file, logits_out;
  bool verbose = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RunOwn, prompt, prompt_file, logits_out, verbose)

}  // namespace

Command AddRunCommand(CLI::App& root) {
  auto [app, o, p] = NewCommand<RunOwn>(&root, "run", "Generate text with a GGUF model, streaming it");
  CLI::Option* prompt_opt = Example(app->add_option("-p,--prompt", o->prompt, "Prompt text"), "hello");
  Example(app->add_option("-f,--file", o->prompt_file, "Read the prompt from a file ('-' = stdin)")->excludes(prompt_opt),
          "-");
  Example(app->add_flag("-v,--verbose", o->verbose, "Print model details, load notes and timings"), "");
  Example(app->add_option("--logits-out", o->logits_out,
                          "Also write the prompt's logits at every position to FILE.f32 (float32, [tokens, "
                          "n_vocab]) and the prompt and generated ids to FILE.json (comparisons with other engines)"),
          "l");
  AddOptions(app, kCmdRun, p.get());
  app->footer("Example: tlr run -m qwen2.5-0.5b-instruct-q8_0.gguf --chat -p \"Why is the sky blue?\"");
  return MakeCommand(app, p, o, [o = o, p = p](const std::string& cmd) -> int {
            auto text = PromptText(o->prompt, o->prompt_file);
            if (!text.ok()) return ReportError(cmd, text.status().message());
            std::string prompt = std::move(text).value();
            const auto t_load = std::chrono::steady_clock::now();
            auto loaded = Model::Load(p->model, ModelOptions(p->kv_type));
            if (!loaded.ok()) return ReportError(cmd, loaded.status().message());
            const Model& model = **loaded;
            const Tokenizer& tok = model.tokenizer();
            if (o->verbose) {
              std::fprintf(stderr, "model: %s\n", model.config().Summary().c_str());
              std::fprintf(stderr, "weights: %.1f MiB mapped, load %.2f s, SIMD %s, %d threads\n",
                           model.total_weight_bytes() / 1048576.0, SecondsSince(t_load),
                           ActiveSimdTarget().c_str(), p->threads);
              for (const auto& note : model.load_notes()) std::fprintf(stderr, "note: %s\n", note.c_str());
              if (auto mem = ReadResidentMemory(); mem.ok()) std::fprintf(stderr, "after load: %s\n", mem->Describe().c_str());
            }
            std::vector<int32_t> ids;
            if (p->chat) {
              auto tmpl = ChatTemplate::ForModel(model);
              if (!tmpl.ok()) return ReportError(cmd, tmpl.status().message());
              std::vector<ChatMessage> msgs;
              if (!p->system.empty()) msgs.push_back({"system", p->system});
              msgs.push_back({"user", prompt});
              ChatTemplateOptions co;
              co.enable_thinking = p->think;
              auto text = tmpl->Apply(msgs, co);
              if (!text.ok()) return ReportError(cmd, text.status().message());
              ids = tok.Encode(*text, false, true);
              if (o->verbose) {
                std::fprintf(stderr, "chat template: %s\nchat prompt: %s\n", tmpl->Describe().c_str(),
                             nlohmann::json(*text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
              }
            } else {
              ids = tok.Encode(prompt, true, false);
            }
            if (ids.empty()) return ReportError(cmd, "the prompt is empty");
            if (static_cast<int64_t>(ids.size()) + p->decode.max_tokens > p->ctx) {
              return ReportError(cmd, "prompt (" + std::to_string(ids.size()) + " tokens) plus " +
                                          std::to_string(p->decode.max_tokens) + " new tokens exceed the context of " +
                                          std::to_string(p->ctx) + " (raise --ctx)");
            }
            WarnPastTrainedContext(static_cast<int64_t>(ids.size()) + p->decode.max_tokens, model.config().n_ctx_train,
                                   p->model);
            auto cache = model.NewCache(p->ctx);
            if (!cache.ok()) return ReportError(cmd, cache.status().message());
            ThreadPool pool(p->threads);
            ForwardContext fctx(&pool);
            std::vector<float> logits(model.config().n_vocab);
            Sampler sampler(p->decode.sampling, static_cast<int32_t>(model.config().n_vocab));
            const auto t_pp = std::chrono::steady_clock::now();
            const int64_t V = model.config().n_vocab;
            std::vector<float> all_logits(o->logits_out.empty() ? 0 : ids.size() * V);
            SequenceInput in{&*cache, ids, o->logits_out.empty() ? OutputRows::kLast : OutputRows::kAll,
                             o->logits_out.empty() ? logits.data() : all_logits.data(), nullptr};
            TLR_CLI_CHECK(cmd, model.Forward({&in, 1}, &fctx));
            if (!o->logits_out.empty()) {
              std::copy(all_logits.end() - V, all_logits.end(), logits.begin());
              TLR_CLI_CHECK(cmd, WriteFileAtomic(o->logits_out + ".f32",
                                                 {reinterpret_cast<const uint8_t*>(all_logits.data()),
                                                  all_logits.size() * sizeof(float)}));
            }
            const double pp_s = SecondsSince(t_pp);
            StreamDecoder dec(tok);
            std::vector<int32_t> history = ids;
            int generated = 0;
            const auto t_tg = std::chrono::steady_clock::now();
            for (; generated < p->decode.max_tokens; ++generated) {
              const int32_t next = sampler.Sample(logits.data(), history);
              if (tok.IsEndOfGeneration(next)) break;
              history.push_back(next);
              std::cout << dec.Push(next) << std::flush;
              if (generated + 1 == p->decode.max_tokens) {
                ++generated;
                break;
              }
              SequenceInput step{&*cache, {&history.back(), 1}, OutputRows::kLast, logits.data(), nullptr};
              TLR_CLI_CHECK(cmd, model.Forward({&step, 1}, &fctx));
            }
            std::cout << dec.Flush() << "\n";
            if (!o->logits_out.empty()) {
              std::string j = "{\"prompt_ids\": [";
              for (size_t i = 0; i < history.size(); ++i) {
                if (i == ids.size()) j += "], \"generated\": [";
                else if (i > 0) j += ", ";
                j += std::to_string(history[i]);
              }
              j += history.size() == ids.size() ? "], \"generated\": []}\n" : "]}\n";
              TLR_CLI_CHECK(cmd, WriteFileAtomic(o->logits_out + ".json",
                                                 {reinterpret_cast<const uint8_t*>(j.data()), j.size()}));
            }
            const double tg_s = SecondsSince(t_tg);
            std::fprintf(stderr, "\nprompt: %zu tokens, %.1f tok/s; generated: %d tokens, %.1f tok/s\n",
                         ids.size(), ids.size() / pp_s, generated,
                         generated > 0 ? generated / tg_s : 0.0);
            if (o->verbose) {
              if (auto mem = ReadResidentMemory(); mem.ok()) {
                std::fprintf(stderr, "while generating: %s (the KV cache: %.0f MiB)\n", mem->Describe().c_str(),
                             static_cast<double>(KvCache::BytesPerPosition(model.config(), model.kv_type())) *
                                 static_cast<double>(p->ctx) / 1048576.0);
              }
            }
            return 0;
          });
}

}  // namespace tlr::cli
