// Memory read bandwidth of this machine (ops layer), measured the way a decode step reads
// weights: every thread of the pool streams through its share of a buffer much larger than
// the caches. Used by `tlr bench` for the roofline. Allocates and touches `bytes` of memory.
#pragma once

#include <cstddef>

namespace tlr {

class ThreadPool;

struct BandwidthResult {
  double best_gbps = 0;    // fastest repetition
  double median_gbps = 0;
};

BandwidthResult MeasureReadBandwidth(ThreadPool* pool, size_t bytes = size_t{1} << 30,
                                     int repetitions = 7);

}  // namespace tlr
