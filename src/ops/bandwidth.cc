// STREAM-like read bandwidth (ops layer): a SIMD sum over a large buffer, split over the
// pool's threads, four independent accumulators so the adds never limit the loads.
#include "ops/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "ops/thread_pool.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/bandwidth.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float SumRange(const float* p, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t L = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + i + L));
    a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * L));
    a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * L));
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += p[i];
  return s;
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr {
HWY_EXPORT(SumRange);

BandwidthResult MeasureReadBandwidth(ThreadPool* pool, size_t bytes, int repetitions) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> buf(n, 1.0f);  // touched: the pages exist before timing
  const int threads = pool->n_threads();
  std::vector<double> gbps;
  std::vector<float> sink(threads);
  for (int r = 0; r < repetitions; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool->ParallelFor(threads, 1, [&](int64_t b, int64_t, int) {
      const size_t lo = n / threads * b, hi = b + 1 == threads ? n : n / threads * (b + 1);
      sink[b] = HWY_DYNAMIC_DISPATCH(SumRange)(buf.data() + lo, hi - lo);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  volatile float keep = sink[0];
  (void)keep;
  std::sort(gbps.begin(), gbps.end());
  return {gbps.back(), gbps[gbps.size() / 2]};
}

}  // namespace tlr
#endif
