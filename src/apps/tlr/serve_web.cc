#include "apps/tlr/serve_web.h"

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
  for (const UiAsset& asset : UiAssets()) {
    files.push_back({asset.path, asset.content_type, std::string(asset.data), "", false});
  }
  // The browser build: the module and its worker are required, each WebAssembly build optional
  // beside the SIMD one (the worker falls back, or says what the site lacks).
  for (const char* name : {"tlr.js", "tlr_worker.js", "tlr.mjs", "tlr.wasm"}) {
    if (!fs::is_regular_file(fs::path(a.dir) / name)) {
      return Status::Error("--web " + a.dir + ": no " + name + " there; the browser build is made by `make wasm` "
                           "(then: tlr serve --web build-wasm/web)");
    }
  }
  for (const char* name : {"tlr.js", "tlr_worker.js", "tlr.d.ts", "tlr.mjs", "tlr.wasm", "tlr-scalar.mjs",
                           "tlr-scalar.wasm", "tlr-threads.mjs", "tlr-threads.wasm", "tlr-threads.worker.js"}) {
    const fs::path p = fs::path(a.dir) / name;
    if (fs::is_regular_file(p)) files.push_back({std::string("/") + name, WebContentType(name), "", p.string(), false});
  }

  auto slm = Model::Load(a.slm);
  if (!slm.ok()) return Status::Error("--web-slm: " + slm.status().message());
  auto router = Router::LoadOrBuiltin(a.router);
  if (!router.ok()) return Status::Error("--web-router: " + router.status().message());
  if (Status s = router->CheckCompatible(**slm); !s.ok()) return Status::Error("--web-router: " + s.message());
  const bool builtin = !RouterIsLearned(router->kind());
  files.push_back({"/models/slm.gguf", "application/octet-stream", "", a.slm, false});
  if (!builtin) files.push_back({"/models/router.gguf", "application/octet-stream", "", a.router, false});

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
  files.push_back({"/api/info", "application/json", info.dump(), "", false});
  return files;
}

}  // namespace tlr::cli
