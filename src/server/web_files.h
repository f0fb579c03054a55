// Static files for browsers (server layer): what `tlr serve --web` serves beside its API, the web
// UI's page with the SLM running in the visitor's tab (the browser build, web/), and the model
// files that page downloads. Files on disk are mapped per request and sent in slices, so a model
// of hundreds of MB costs no copy. Every reply carries Cross-Origin-Opener-Policy and
// Cross-Origin-Embedder-Policy (and Cross-Origin-Resource-Policy), so the page is cross-origin
// isolated and its worker may take the threaded build; the files need no API key (the page has
// to load before anyone types one).
#pragma once

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
  std::string file;          // a file on disk, read at each request (it may change between them)
  bool immutable = false;    // cacheable for a year (the URL changes with the content)
};

// GET routes for every file; a file on disk that cannot be read answers 404 naming it.
void ServeWebFiles(httplib::Server* http, const std::vector<WebFile>& files);

// Whether GET `path` is one of the files (served without a key).
bool IsWebFile(const std::vector<WebFile>& files, const std::string& path);

// The content type for a file name's extension (.html, .js, .mjs, .css, .wasm, .json; else
// application/octet-stream).
std::string WebContentType(const std::string& name);

}  // namespace tlr
