// `tlr make-random`: writes a random-weight model with real shapes and llama.cpp's file types
// (apps layer).
#include <cstdio>
#include <memory>
#include <unistd.h>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "model/random_model.h"
#include "quant/quant_mix.h"

namespace tlr::cli {

Command AddMakeRandomCommand(CLI::App& root) {
  auto opts = std::make_shared<RandomModelOptions>();
  auto out = std::make_shared<std::string>();
  auto p = std::make_shared<Params>();
  std::string presets, types, type_lines;
  for (const auto& p : RandomModelPresets()) presets += (presets.empty() ? "" : "|") + p;
  for (const auto& t : RandomModelTypes()) {
    types += (types.empty() ? "" : "|") + t.name;
    type_lines += "  " + t.name + std::string(t.name.size() < 8 ? 8 - t.name.size() : 1, ' ') + t.help + "\n";
  }
  CLI::App* app = root.add_subcommand(
      "make-random",
      "Write a random-weight GGUF model with the real shapes of a known model (for benchmarks "
      "and interop tests)");
  Example(app->add_option("--preset", opts->preset, "Shape: " + presets)->default_val("tiny"), "tiny256");
  Example(app->add_option("--arch", opts->arch, "qwen2|llama|qwen3|gemma3 (default: the preset's; tiny and tiny256 take any)"), "llama");
  Example(app->add_option("--type", opts->type, "File type: " + types)->default_val("q8_0"), "f16");
  Example(app->add_flag("--pure", opts->pure,
                "Every weight matrix in the type's base type, mixes included (llama-quantize "
                "--pure): --type q4_k --pure is pure q4_K"), "");
  Example(app->add_option("--tokenizer", opts->tokenizer_path,
                  "Vocabulary from a tokenizer.json or a GGUF file (default: a small built-in "
                  "byte-level BPE vocabulary, padded to the preset's size)"), "@demo/slm.gguf");
  Example(app->add_option("--seed", opts->seed, "Random seed (same seed, same file)")->default_val(1)->check(WholeNumberU64()), "3");
  // FACTOR:ORIGINAL_CONTEXT, one word (a scaled Qwen config's rope_scaling factor and
  // original_max_position_embeddings).
  Example(app->add_option_function<std::string>(
                  "--yarn",
                  [opts](const std::string& v) {
                    double f = 0;
                    long long ctx = 0;
                    char end = 0;
                    if (std::sscanf(v.c_str(), "%lf:%lld%c", &f, &ctx, &end) != 2) {
                      throw CLI::ValidationError("--yarn", "wants FACTOR:ORIGINAL_CONTEXT, e.g. 4:4096, not '" + v + "'");
                    }
                    if (!(f >= 1 && f <= 1024) || ctx < 1 || ctx > (1 << 24)) {
                      throw CLI::ValidationError("--yarn", "YaRN needs a factor in 1..1024 and an original context in "
                                                           "1..16777216, not '" + v + "'");
                    }
                    opts->yarn_factor = f;
                    opts->yarn_orig_ctx = static_cast<int64_t>(ctx);
                  },
                  "FACTOR:ORIGINAL_CONTEXT: the file asks for YaRN RoPE scaling (rope.scaling.type yarn), as a "
                  "Qwen2.5/Qwen3 file made for 128K contexts does"),
          "4:4096");
  Example(app->add_option("-o,--out", *out, "Output GGUF path")->required(), "n.gguf");
  app->footer(
      "File types:\n" + type_lines +
      "Single types put every weight matrix, embedding and LM head included, in that type\n"
      "(like llama-quantize --pure); K-quant and iq4_xs matrices whose rows are not a\n"
      "multiple of 256 fall back as llama.cpp does (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0,\n"
      "q2_K/q3_K -> q4_0, iq4_xs -> iq4_nl). The mixes assign types per tensor as\n"
      "llama-quantize does (more bits for some attn_v / ffn_down layers and the LM head).\n"
      "Example: tlr make-random --preset qwen2.5-0.5b --type q4_k_m -o /tmp/qwen-0.5b-q4km.gguf");
  AddOptions(app, kCmdMakeRandom, p.get(), "-o m.gguf");
  auto own = [opts, out] {
    return nlohmann::json{
        {"preset", opts->preset}, {"arch", opts->arch}, {"type", opts->type}, {"pure", opts->pure},
        {"tokenizer", opts->tokenizer_path}, {"seed", opts->seed}, {"yarn", {opts->yarn_factor, opts->yarn_orig_ctx}},
        {"out", *out}};
  };
  return MakeCommand(app, p, own, [opts, out](const std::string& cmd) -> int {
            if (const FileType* ft = FindFileType(opts->type); ft && opts->pure && !ft->mix) {
              return ReportError(cmd, "--pure does nothing with type " + opts->type + " (not a mix: its matrices "
                                      "have one type already; --pure is for the mixes such as q4_k_m)");
            }
            const bool tty = isatty(2);
            Status s = WriteRandomModel(*opts, *out, [&](size_t done, size_t total) {
              if (tty) std::fprintf(stderr, "\rwriting tensors: %zu/%zu", done, total);
            });
            if (tty) std::fprintf(stderr, "\n");
            if (!s.ok()) return ReportError(cmd, s.message());
            std::printf("wrote %s\n", out->c_str());
            return 0;
          });
}

}  // namespace tlr::cli
