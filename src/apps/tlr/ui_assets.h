// The web UI's static files (apps layer), compiled into the binary: src/apps/tlr/ui/ is turned
// into byte arrays at build time by ui/embed.cmake (the generated ui_assets.cc sits in the
// build tree), so `tlr ui` needs no files beside it and the page needs no network.
#pragma once

#include <span>
#include <string_view>

namespace tlr::cli {

struct UiAsset {
  const char* path;          // URL path: "/", "/index.html", "/app.js", ...
  const char* content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view data;     // the file's bytes (static storage)
};

// Every embedded file; immutable, safe from any thread.
std::span<const UiAsset> UiAssets();

}  // namespace tlr::cli
