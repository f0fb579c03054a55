// Shared model options (apps layer). See model_args.h.
#include "apps/tlr/model_args.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

namespace tlr::cli {

void AddThreadArgs(CLI::App* app, RunArgs* a) {
  a->threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")
      ->check(CLI::Range(1, 256));
  app->add_option("-c,--ctx", a->ctx, "Context size in tokens (KV cache capacity)")
      ->default_val(4096)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
}

void AddThreadsOnly(CLI::App* app, int* threads) {
  *threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app->add_option("-t,--threads", *threads, "Worker threads (default: all cores)")->check(CLI::Range(1, 256));
}

std::string DemoFile(const std::string& name) {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("TLR_DEMO_DIR"); d && *d) return (fs::path(d) / name).string();
  std::vector<fs::path> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path() / ".." / ".." / "models" / "demo");
    dirs.push_back(exe.parent_path() / ".." / "share" / "tlr" / "models" / "demo");
  }
  dirs.push_back(fs::path(TLR_SOURCE_DIR) / "models" / "demo");
  for (const fs::path& d : dirs) {
    if (fs::exists(d / name, ec)) return (d / name).lexically_normal().string();
  }
  return (dirs.back() / name).string();
}

void AddSamplingArgs(CLI::App* app, RunArgs* a) {
  app->add_option("--temp", a->sampling.temperature, "Temperature (0 = greedy)")->default_val(0.0f);
  app->add_option("--top-k", a->sampling.top_k, "Top-k (0 = off)")->default_val(40);
  app->add_option("--top-p", a->sampling.top_p, "Top-p / nucleus (1 = off)")->default_val(1.0f);
  app->add_option("--min-p", a->sampling.min_p, "Min-p (0 = off)")->default_val(0.0f);
  app->add_option("--repeat-penalty", a->sampling.repeat_penalty, "Repetition penalty (1 = off)")
      ->default_val(1.0f);
  app->add_option("--repeat-last-n", a->sampling.repeat_last_n, "Tokens the penalty looks back")
      ->default_val(64);
  app->add_option("--seed", a->sampling.seed, "Sampling seed")->default_val(42);
}

}  // namespace tlr::cli
