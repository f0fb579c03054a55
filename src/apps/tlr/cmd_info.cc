// `tlr info FILE.gguf`: prints a GGUF file's metadata and tensor table (apps layer).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "device/remote/remote_llm.h"
#include "model/gguf/gguf_keys.h"
#include "model/gguf/gguf_reader.h"

namespace tlr::cli {
namespace {

using nlohmann::json;

json ValueToJson(const GgufValue& v, size_t max_items) {
  return std::visit(
      [&](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, GgufArray>) {
          json items = json::array();
          for (size_t i = 0; i < x.items.size() && (max_items == 0 || i < max_items); ++i) {
            items.push_back(ValueToJson(x.items[i], max_items));
          }
          return json{{"elem_type", GgufTypeName(x.elem_type)},
                      {"count", x.items.size()},
                      {"items", items},
                      {"truncated", max_items != 0 && x.items.size() > max_items}};
        } else {
          return json(x);
        }
      },
      v.v);
}

std::string TypeLabel(const GgufValue& v) {
  if (v.type() != GgufType::kArray) return std::string(GgufTypeName(v.type()));
  const auto& a = std::get<GgufArray>(v.v);
  return "arr[" + std::string(GgufTypeName(a.elem_type)) + "," + std::to_string(a.items.size()) +
         "]";
}

}  // namespace

namespace {

struct GgufInfoOwn {
  std::string path;
  bool json = false;
  bool no_tensors = false;
  size_t max_items = 8;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GgufInfoOwn, path, json, no_tensors, max_items)

}  // namespace

Command AddInfoCommand(CLI::App& root) {
  auto [app, opts, p] = NewCommand<GgufInfoOwn>(
      &root, "info", "Print a GGUF file's metadata and tensor table (checks the whole file's structure)");
  app->add_option("file", opts->path, "GGUF file (version 2 or 3; the first shard of a split model brings the others)")->required();
  Example(app->add_flag("--json", opts->json, "Machine-readable JSON on stdout"), "");
  Example(app->add_flag("--no-tensors", opts->no_tensors, "Omit the tensor table"), "");
  Example(app->add_option("--max-items", opts->max_items,
                  "Array elements to show per metadata array (0 = all)")
      ->default_val(8)->check(WholeNumberU64()), "3");
  app->footer(
      "Exit status: 0 when the file is a well-formed GGUF file, 1 with an error naming the\n"
      "field and byte offset otherwise.\n"
      "Example: tlr info model.gguf --json --max-items 0 > model.json");
  AddOptions(app, kCmdInfo, p.get(), "@demo/slm.gguf");
  return MakeCommand(app, p, opts, [opts = opts](const std::string& cmd) -> int {
            auto f = GgufFile::Open(opts->path);
            std::string shard_note;
            if (!f.ok()) {
              // A later shard of a split model is shown alone (its model opens from the first).
              auto one = GgufFile::OpenOneFile(opts->path);
              if (!one.ok()) return ReportError(cmd, f.status().message());
              auto no = one->GetUint(gguf_keys::kSplitNo);
              auto count = one->GetUint(gguf_keys::kSplitCount);
              if (!no.ok() || !count.ok() || *no == 0) return ReportError(cmd, f.status().message());
              shard_note = "shard " + std::to_string(*no + 1) + " of " + std::to_string(*count) +
                           " of a split model, this file alone (the model opens from its first shard)";
              f = std::move(one);
            }
            const GgufFile& g = *f;
            if (opts->json) {
              json j;
              j["file"] = opts->path;
              j["version"] = g.version();
              j["file_size"] = g.file_size();
              j["alignment"] = g.alignment();
              j["data_offset"] = g.data_offset();
              if (!shard_note.empty()) j["note"] = shard_note;
              if (!g.shard_paths().empty()) j["shards"] = g.shard_paths();
              json md = json::array();
              for (const auto& [k, v] : g.metadata()) {
                md.push_back({{"key", k}, {"type", GgufTypeName(v.type())},
                              {"value", ValueToJson(v, opts->max_items)}});
              }
              j["metadata"] = md;
              if (!opts->no_tensors) {
                json ts = json::array();
                for (const auto& t : g.tensors()) {
                  ts.push_back({{"name", t.name}, {"type", GgmlTraits(t.type).name},
                                {"dims", t.dims}, {"n_elements", t.n_elements},
                                {"n_bytes", t.n_bytes}, {"offset", t.file_offset}});
                  if (!g.shard_paths().empty()) ts.back()["shard"] = t.shard + 1;
                }
                j["tensors"] = ts;
              }
              std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
              return 0;
            }
            std::printf("%s: GGUF v%u, %llu bytes, alignment %llu, data at offset %llu\n",
                        opts->path.c_str(), g.version(),
                        static_cast<unsigned long long>(g.file_size()),
                        static_cast<unsigned long long>(g.alignment()),
                        static_cast<unsigned long long>(g.data_offset()));
            if (!shard_note.empty()) std::printf("%s\n", shard_note.c_str());
            if (!g.shard_paths().empty()) {
              std::printf("split model: %zu shards (the metadata is the first's; offsets are in each tensor's shard)\n",
                          g.shard_paths().size());
              for (size_t i = 0; i < g.shard_paths().size(); ++i) std::printf("  %zu: %s\n", i + 1, g.shard_paths()[i].c_str());
            }
            std::printf("metadata: %zu keys\n", g.metadata().size());
            for (const auto& [k, v] : g.metadata()) {
              std::printf("  %-40s %-16s = %s\n", k.c_str(), TypeLabel(v).c_str(),
                          v.ToString(opts->max_items == 0 ? SIZE_MAX : opts->max_items).c_str());
            }
            if (!opts->no_tensors) {
              uint64_t total = 0;
              for (const auto& t : g.tensors()) total += t.n_bytes;
              std::printf("tensors: %zu, %llu bytes of data\n", g.tensors().size(),
                          static_cast<unsigned long long>(total));
              if (!g.tensors().empty()) {
                std::printf("  %-40s %-6s %-26s %12s %12s%s\n", "name", "type", "shape", "bytes",
                            "offset", g.shard_paths().empty() ? "" : " shard");
              }
              for (const auto& t : g.tensors()) {
                std::printf("  %-40s %-6s %-26s %12llu %12llu", t.name.c_str(),
                            std::string(GgmlTraits(t.type).name).c_str(), t.ShapeString().c_str(),
                            static_cast<unsigned long long>(t.n_bytes),
                            static_cast<unsigned long long>(t.file_offset));
                if (!g.shard_paths().empty()) std::printf(" %5u", t.shard + 1);
                std::printf("\n");
              }
            }
            return 0;
          });
}

int ReportError(const std::string& command, const std::string& message) {
  std::cerr << "tlr " << command << ": error: " << message << "\n";
  if (message.find(kCannotReach) != std::string::npos) {
    // Router training and calibration need the LLM's answers: they have no --allow-unreachable.
    const bool needs_llm = command.rfind("router", 0) == 0;
    std::cerr << (needs_llm ? "  (start the server first, check --server)\n"
                            : "  (start the server first, check --server; --allow-unreachable starts anyway and answers "
                              "with the SLM until the server is up)\n");
  }
  return 1;
}

}  // namespace tlr::cli
