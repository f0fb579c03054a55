#include "server/web_files.h"

#include <algorithm>
#include <memory>

#include <httplib.h>

#include "net/server_json.h"
#include "util/mapped_file.h"

namespace tlr {

namespace {

void Isolate(httplib::Response& res) {
  res.set_header("Cross-Origin-Opener-Policy", "same-origin");
  res.set_header("Cross-Origin-Embedder-Policy", "require-corp");
  res.set_header("Cross-Origin-Resource-Policy", "same-origin");
  res.set_header("X-Content-Type-Options", "nosniff");
}

}  // namespace

std::string WebContentType(const std::string& name) {
  auto ends = [&](const char* ext) {
    const std::string e(ext);
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js") || ends(".mjs")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".json")) return "application/json";
  if (ends(".wasm")) return "application/wasm";
  return "application/octet-stream";
}

bool IsWebFile(const std::vector<WebFile>& files, const std::string& path) {
  return std::any_of(files.begin(), files.end(), [&](const WebFile& f) { return f.path == path; });
}

void ServeWebFiles(httplib::Server* http, const std::vector<WebFile>& files) {
  for (const WebFile& f : files) {
    http->Get(f.path, [f](const httplib::Request&, httplib::Response& res) {
      Isolate(res);
      res.set_header("Cache-Control", f.immutable ? "public, max-age=31536000, immutable" : "no-cache");
      if (f.file.empty()) {
        res.set_content(f.body, f.content_type);
        return;
      }
      auto mapped = MappedFile::Open(f.file);
      if (!mapped.ok()) {
        server::SendError(res, 404, "not_found", f.path + ": " + mapped.status().message());
        return;
      }
      auto file = std::make_shared<MappedFile>(std::move(*mapped));
      res.set_content_provider(file->size(), f.content_type,
                               [file](size_t offset, size_t length, httplib::DataSink& sink) {
                                 const size_t n = std::min<size_t>(length, 1 << 20);
                                 return sink.write(reinterpret_cast<const char*>(file->bytes().data()) + offset, n);
                               });
    });
  }
}

}  // namespace tlr
