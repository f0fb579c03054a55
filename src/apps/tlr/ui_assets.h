// The web UI's static files (apps layer), compiled into the binary: src/apps/tlr/ui/ is turned
// into byte arrays at build time by ui/embed.cmake (the generated ui_assets.cc sits in the
// build tree), so `tlr ui` needs no files beside it and the page needs no network.
#pragma once

#include <span>

#include "device/ui/device_server.h"

namespace tlr::cli {

// Every embedded file; immutable, safe from any thread.
std::span<const UiAsset> UiAssets();

}  // namespace tlr::cli
