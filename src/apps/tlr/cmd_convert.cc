// `tlr convert`: writes a model as a packed GGUF (its weights in the kernels' layout, one file
// instead of a GGUF plus its weight cache) or a packed one back as the plain GGUF (apps layer).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "apps/tlr/progress.h"
#include "model/model.h"
#include "model/packed_gguf.h"

namespace tlr::cli {
namespace {

// The default output: model.gguf -> model.packed.gguf; model.packed.gguf -> model.gguf; a split
// model's first shard model-00001-of-00005.gguf -> model.packed.gguf.
std::string DefaultOut(const std::string& in, bool unpack, bool split) {
  std::string stem = in;
  if (split && stem.rfind("-00001-of-") != std::string::npos) stem.resize(stem.rfind("-00001-of-"));
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".gguf") == 0) stem.resize(stem.size() - 5);
  if (!unpack) return stem + ".packed.gguf";
  if (stem.size() > 7 && stem.compare(stem.size() - 7, 7, ".packed") == 0) return stem.substr(0, stem.size() - 7) + ".gguf";
  return stem + ".unpacked.gguf";
}

double MiB(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) / 1048576.0 : 0.0;
}

// The files a model is read from: every shard of a split model, else the one file.
std::vector<std::string> SourceFiles(const std::string& in) {
  auto f = GgufFile::Open(in);  // mapped: only the headers are read
  if (f.ok() && !f->shard_paths().empty()) return f->shard_paths();
  return {in};
}

}  // namespace

namespace {

struct ConvertOwn {
  std::string in, out;
  bool unpack = false, force = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ConvertOwn, in, out, unpack, force)

}  // namespace

Command AddConvertCommand(CLI::App& root) {
  auto [app, opts, p] = NewCommand<ConvertOwn>(
      &root, "convert",
      "Write a model as one packed file that TLR maps directly (no weight cache beside it), or back");
  app->add_option("model", opts->in, "GGUF model to convert (--unpack: a packed one)")->required();
  Example(app->add_option("-o,--out", opts->out, "Output file (default: model.packed.gguf beside it; --unpack: model.gguf)"), "o.gguf");
  Example(app->add_flag("--unpack", opts->unpack, "Write a packed model back as the plain GGUF it was made from"), "");
  Example(app->add_flag("--force", opts->force, "Replace the output file when it exists"), "");
  app->footer(
      "A packed model holds the weights already in the layout TLR's kernels read, so it opens as\n"
      "fast as a model whose weight cache exists, with one copy on disk: the original GGUF and its\n"
      "cache (*.tlrw) can be deleted. Every TLR command, the C API and the Python binding open it\n"
      "like any model; its tensors are checksummed and checked at each load. The layout is the\n"
      "same on every CPU (convert on a desktop, ship to ARM devices). Other GGUF readers refuse it\n"
      "(general.architecture is 'tlr-packed'); `tlr convert --unpack` gives the plain GGUF back.\n"
      "Example: tlr convert qwen2.5-0.5b-instruct-q8_0.gguf -o app/assets/slm.gguf");
  AddOptions(app, kCmdConvert, p.get(), "@demo/slm.gguf");
  return MakeCommand(app, p, opts, [opts = opts](const std::string& cmd) -> int {
            const std::vector<std::string> sources = SourceFiles(opts->in);
            double in_mib = 0;
            for (const std::string& f : sources) in_mib += MiB(f);
            if (opts->out.empty()) opts->out = DefaultOut(opts->in, opts->unpack, sources.size() > 1);
            std::error_code ec;
            if (std::filesystem::exists(opts->out, ec)) {
              for (const std::string& f : sources) {
                if (std::filesystem::equivalent(f, opts->out, ec)) {
                  return ReportError(cmd, "the output '" + opts->out + "' is " +
                                              (sources.size() > 1 ? "a shard of the input" : "the input itself") +
                                              ": name another file with -o");
                }
              }
              if (!opts->force) return ReportError(cmd, "'" + opts->out + "' exists (--force replaces it)");
            }
            Progress progress;
            const bool show = isatty(STDERR_FILENO) || in_mib >= 256;  // a small file: no 10 lines of it
            auto report = [&](size_t done, size_t total) {
              if (show) progress.Update("writing", static_cast<int64_t>(done), static_cast<int64_t>(total));
            };
            Status s = opts->unpack ? WriteUnpackedGguf(opts->in, opts->out, report)
                                    : WritePackedGguf(opts->in, opts->out, report);
            progress.Done();
            if (!s.ok()) return ReportError(cmd, s.message());
            // Read back as a user will: every check of a load.
            Model::Options check;
            check.weight_cache = "off";
            check.repack = false;
            auto m = Model::Load(opts->out, check);
            if (!m.ok()) {
              std::filesystem::remove(opts->out, ec);
              return ReportError(cmd, "the file written does not load (removed): " + m.status().message());
            }
            std::printf("wrote %s (%.1f MiB, from %.1f MiB) in %.1f s\n", opts->out.c_str(), MiB(opts->out), in_mib,
                        progress.Elapsed());
            if (opts->unpack) {
              std::printf("a plain GGUF (model fingerprint %s): any GGUF reader loads it\n", (*m)->fingerprint_hex().c_str());
            } else {
              const size_t n = (*m)->PanelMatrices().size();
              std::printf("packed: %zu matrices in the kernel layout%s, model fingerprint %s (the original's);\n"
                          "TLR maps it directly and writes no weight cache; the original GGUF and its cache may be deleted\n",
                          n, n == 0 ? " (its weights are float: they are used as stored)" : "", (*m)->fingerprint_hex().c_str());
            }
            return 0;
          });
}

}  // namespace tlr::cli
