// Elapsed time on the monotonic clock (util layer).
#pragma once

#include <chrono>

namespace tlr {

// Seconds from `t` to now on std::chrono::steady_clock.
inline double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace tlr
