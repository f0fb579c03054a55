#include "apps/tlr/serve_web.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

#include "apps/tlr/ui_assets.h"
#include "model/model.h"
#include "routing/qa.h"
#include "routing/router.h"

namespace tlr::cli {

namespace fs = std::filesystem;

namespace {

// "/models/NAME?v=SIZE-MTIME": the browser keeps a model by its URL, so a changed file gets a
// new one (and is downloaded again) while an unchanged one is taken from the browser's storage.
std::string VersionedUrl(const std::string& url, const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
  return url + "?v=" + std::to_string(size) + "-" + std::to_string(mtime);
}

}  // namespace

Expected<std::vector<WebFile>> WebUiFiles(const ServeWebArgs& a) {
  std::vector<WebFile> files;
  auto in_memory = [&](std::string path, std::string type, std::string body) {
    WebFile f;
    f.path = std::move(path);
    f.content_type = std::move(type);
    f.body = std::move(body);
    files.push_back(std::move(f));
  };
  auto on_disk = [&](std::string path, const std::string& file, bool pinned) {
    WebFile f;
    f.path = std::move(path);
    f.content_type = WebContentType(file);
    f.file = file;
    if (pinned) WebFileVersion(file, &f.size, &f.mtime);
    files.push_back(std::move(f));
  };
  for (const UiAsset& asset : UiAssets()) in_memory(asset.path, asset.content_type, std::string(asset.data));
  // The browser build: the module, its worker and the SIMD build are required; the scalar and
  // threaded builds are served where complete (the worker falls back, or says what the site lacks).
  const fs::path dir(a.dir);
  for (const char* name : {"tlr.js", "tlr_worker.js", "tlr.mjs", "tlr.wasm"}) {
    if (!fs::is_regular_file(dir / name)) {
      return Status::Error("--web " + a.dir + ": no " + name + " there; the browser build is made by `make wasm` "
                           "(then: tlr serve --web build-wasm/web)");
    }
  }
  const std::vector<std::vector<const char*>> sets = {{"tlr.js", "tlr_worker.js", "tlr.mjs", "tlr.wasm"},
                                                      {"tlr.d.ts"},
                                                      {"tlr-scalar.mjs", "tlr-scalar.wasm"},
                                                      {"tlr-threads.mjs", "tlr-threads.wasm", "tlr-threads.worker.js"}};
  for (const auto& set : sets) {
    if (!std::all_of(set.begin(), set.end(), [&](const char* n) { return fs::is_regular_file(dir / n); })) continue;
    for (const char* name : set) on_disk(std::string("/") + name, (dir / name).string(), false);
  }

  // Only to check the pair: not repacked, no weight cache written.
  Model::Options check;
  check.repack = false;
  check.weight_cache = "off";
  auto slm = Model::Load(a.slm, check);
  if (!slm.ok()) return Status::Error("--web-slm: " + slm.status().message());
  auto router = Router::LoadOrBuiltin(a.router);
  if (!router.ok()) return Status::Error("--web-router: " + router.status().message());
  if (Status s = router->CheckCompatible(**slm); !s.ok()) return Status::Error("--web-router: " + s.message());
  const bool builtin = !RouterIsLearned(router->kind());
  on_disk("/models/slm.gguf", a.slm, true);
  if (!builtin) on_disk("/models/router.gguf", a.router, true);

  nlohmann::json examples = nlohmann::json::array();
  if (!a.data.empty() && a.examples > 0) {
    auto rows = LoadQaJsonl(a.data);
    if (!rows.ok()) return Status::Error("--web-data: " + rows.status().message());
    for (const QaRow& row : *rows) {
      if (static_cast<int>(examples.size()) >= a.examples) break;
      std::string answer;
      for (size_t k = 0; k < row.labels.size(); ++k) {
        if (row.labels[k] == row.answer_key) answer = row.labels[k] + ". " + row.texts[k];
      }
      examples.push_back({{"label", row.question}, {"prompt", QaPrompt(row)}, {"answer", answer}});
    }
  }
  const std::string kind(RouterKindName(router->kind()));
  const float threshold = router->info().threshold;
  nlohmann::json info = {
      {"mode", "tab"},
      {"tab", {{"slm", VersionedUrl("/models/slm.gguf", a.slm)},
               {"router", builtin ? kind : VersionedUrl("/models/router.gguf", a.router)},
               {"needs_key", a.needs_key}}},
      {"models", {{"slm", {{"name", fs::path(a.slm).stem().string()}, {"where", "tab"}}},
                  {"llm", {{"name", a.llm_name}, {"where", "server"}}}}},
      {"routers", {{{"name", kind},
                    {"label", kind + (builtin ? " (built-in)" : " (" + fs::path(a.router).filename().string() + ")")},
                    {"threshold", threshold},
                    {"learned", !builtin}}}},
      {"router", kind},
      {"threshold", threshold},
      {"modes", {"joint", "small_only", "large_only"}},
      {"max_tokens", {{"default", 128}, {"max", a.max_context}}},
      {"temperature", 0.0},
      {"pipeline", {{"enabled", true}}},
      {"examples", examples},
      {"results", false},
      {"warning", ""}};
  in_memory("/api/info", "application/json", info.dump());
  return files;
}

}  // namespace tlr::cli
