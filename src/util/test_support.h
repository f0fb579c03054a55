// Test support every layer's tests share (util layer, header-only; for tests: TLR_SOURCE_DIR is
// defined by tlr_test, cmake/tlr_helpers.cmake). What a test of a higher layer needs beyond it
// sits beside that layer's code (device: decode/decode_test_support.h).
#pragma once

#include <string>

namespace tlr {

#ifdef TLR_SOURCE_DIR
// The bundled demo pair's folder, with its trailing slash: kDemo + "slm.gguf".
inline const std::string kDemo = std::string(TLR_SOURCE_DIR) + "/models/demo/";
#endif

}  // namespace tlr
