// Machine roofline numbers: memory read bandwidth and peak FMA throughput (ops layer), measured the way a decode step reads
// weights: every thread of the pool streams through its share of a buffer much larger than
// the caches. Used by `tlr bench` for the roofline. Allocates and touches `bytes` of memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tlr {

class ThreadPool;

struct BandwidthResult {
  double best_gbps = 0;    // fastest repetition
  double median_gbps = 0;
};

BandwidthResult MeasureReadBandwidth(ThreadPool* pool, size_t bytes = size_t{1} << 30,
                                     int repetitions = 7);

// One read pass over [p, p + bytes) split over the pool's threads (any bytes: integer sums),
// in GB/s. For probes paired with a kernel reading the same memory.
double ReadPassGbps(ThreadPool* pool, const uint8_t* p, size_t bytes);

// Peak single-precision FMA throughput of the pool's threads (GFLOP/s, 2 FLOP per lane per
// FMA), from a register-only loop with enough independent accumulators to hide latency.
double MeasurePeakGflops(ThreadPool* pool);

// Peak 8-bit integer dot-product throughput of the pool's threads (GOP/s, 2 ops per
// multiply-add), from a register-only loop of the instruction the quantized kernels use
// (vpdpbusd / maddubs on x86). The roof for prefill with quantized weights.
double MeasurePeakInt8Gops(ThreadPool* pool);

}  // namespace tlr
