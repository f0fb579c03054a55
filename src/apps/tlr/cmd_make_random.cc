// `tlr make-random`: writes a random-weight model with real shapes (apps layer).
#include <cstdio>
#include <memory>
#include <unistd.h>

#include "apps/tlr/commands.h"
#include "model/random_model.h"

namespace tlr::cli {

Command AddMakeRandomCommand(CLI::App& root) {
  auto opts = std::make_shared<RandomModelOptions>();
  auto out = std::make_shared<std::string>();
  std::string presets;
  for (const auto& p : RandomModelPresets()) presets += (presets.empty() ? "" : "|") + p;
  CLI::App* app = root.add_subcommand(
      "make-random",
      "Write a random-weight GGUF model with the real shapes of a known model (for benchmarks "
      "and interop tests)");
  app->add_option("--preset", opts->preset, "Shape: " + presets)->default_val("tiny");
  app->add_option("--arch", opts->arch, "qwen2|llama (default: the preset's; tiny takes either)");
  app->add_option("--type", opts->type, "Weight type: f32|f16|q8_0|q4_0|q4_k")->default_val("q8_0");
  app->add_option("--tokenizer", opts->tokenizer_path,
                  "Vocabulary from a tokenizer.json or a GGUF file (default: a small built-in "
                  "byte-level BPE vocabulary, padded to the preset's size)");
  app->add_option("--seed", opts->seed, "Random seed (same seed, same file)")->default_val(1);
  app->add_option("-o,--out", *out, "Output GGUF path")->required();
  app->footer(
      "Example: tlr make-random --preset qwen2.5-0.5b --type q8_0 -o /tmp/qwen-0.5b-q8.gguf\n"
      "q4_k mixes types like llama.cpp's Q4_K_M: rows that are not a multiple of 256 use q5_0,\n"
      "the embedding q6_K or q8_0.");
  return {app, [opts, out]() -> int {
            const bool tty = isatty(2);
            Status s = WriteRandomModel(*opts, *out, [&](size_t done, size_t total) {
              if (tty) std::fprintf(stderr, "\rwriting tensors: %zu/%zu", done, total);
            });
            if (tty) std::fprintf(stderr, "\n");
            if (!s.ok()) return ReportError("make-random", s.message());
            std::printf("wrote %s\n", out->c_str());
            return 0;
          }};
}

}  // namespace tlr::cli
