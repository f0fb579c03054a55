// What the tests of the device's HTTP service share (tests only): a one-file page to serve.
#pragma once

#include "device/ui/device_server.h"

namespace tlr {

inline constexpr char kTestPage[] = "<!doctype html><title>t</title>";
inline constexpr UiAsset kTestAssets[] = {{"/", "text/html; charset=utf-8", kTestPage}};

}  // namespace tlr
