// Static files for browsers (server layer): what `tlr serve --web` serves beside its API, the web
// UI's page with the SLM running in the visitor's tab (the browser build, web/), and the model
// files that page downloads. Files on disk are read at each request with pread in slices (no
// copy of a model of hundreds of MB; a file cut short while it is sent ends the reply, never the
// server). Every reply carries Cross-Origin-Opener-Policy and Cross-Origin-Embedder-Policy (and
// Cross-Origin-Resource-Policy), so the page is cross-origin isolated and its worker may take
// the threaded build; the files need no API key (the page has to load before anyone types one),
// so the downloads from disk running at once are capped: past the cap, 503 with Retry-After
// (keyless downloads never take the workers the API needs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace httplib {
class Server;
}

namespace tlr {

struct WebFile {
  std::string path;          // the URL path: "/", "/app.js", "/models/slm.gguf"
  std::string content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string body;          // the bytes, unless `file` is set
  std::string file;          // a file on disk, read at each request
  // A file whose URL names its version (the page's model URLs): served only while its size and
  // modification time are still these (WebFileVersion at start), else 503 naming the change, so
  // that no browser keeps new bytes under an old URL. -1: any version.
  int64_t size = -1, mtime = 0;
};

// Size and modification time of a file (for WebFile::size, mtime); size -1 when it is missing.
void WebFileVersion(const std::string& path, int64_t* size, int64_t* mtime);

// GET (and HEAD) routes for every file; at most `max_downloads` files from disk are sent at once.
void ServeWebFiles(httplib::Server* http, const std::vector<WebFile>& files, int max_downloads = 8);

// Whether GET `path` is one of the files (served without a key).
bool IsWebFile(const std::vector<WebFile>& files, const std::string& path);

// The content type for a file name's extension (.html, .js, .mjs, .css, .wasm, .json; else
// application/octet-stream).
std::string WebContentType(const std::string& name);

}  // namespace tlr
