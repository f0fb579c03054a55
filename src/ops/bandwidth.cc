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

// The bytes read as 64-bit lanes and folded by XOR (any bit pattern, no float assists, no
// overflow), four independent accumulators.
uint64_t XorBytes(const uint8_t* p, size_t n) {
  const hn::ScalableTag<uint64_t> d;
  const size_t L = hn::Lanes(d), step = 4 * L * sizeof(uint64_t);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  const auto* q = reinterpret_cast<const uint64_t*>(p);
  size_t i = 0;
  // XOR, not a sum: the bytes are arbitrary and a lane sum could overflow (AVX-512's signed
  // horizontal add is undefined behaviour then, which UBSan reports); every byte is still read.
  for (; (i + 1) * step <= n; ++i) {
    a0 = hn::Xor(a0, hn::LoadU(d, q + 4 * L * i));
    a1 = hn::Xor(a1, hn::LoadU(d, q + 4 * L * i + L));
    a2 = hn::Xor(a2, hn::LoadU(d, q + 4 * L * i + 2 * L));
    a3 = hn::Xor(a3, hn::LoadU(d, q + 4 * L * i + 3 * L));
  }
  HWY_ALIGN uint64_t lanes[HWY_MAX_BYTES / sizeof(uint64_t)];
  hn::Store(hn::Xor(hn::Xor(a0, a1), hn::Xor(a2, a3)), d, lanes);
  uint64_t s = 0;
  for (size_t k = 0; k < L; ++k) s ^= lanes[k];
  for (size_t k = i * step; k < n; ++k) s ^= p[k];
  return s;
}
// Runs `iters` rounds of 8 independent FMA chains; returns a value so nothing is optimised out.
float FmaLoop(int64_t iters) {
  const hn::ScalableTag<float> d;
  auto a0 = hn::Set(d, 1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, c); a1 = hn::MulAdd(a1, m, c); a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c); a4 = hn::MulAdd(a4, m, c); a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c); a7 = hn::MulAdd(a7, m, c);
  }
  const auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

size_t FloatLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

// Runs `iters` rounds of 8 independent 8-bit dot-product chains, the instruction the
// quantized kernels are made of (vpdpbusd with AVX-512 VNNI, maddubs + madd elsewhere on x86,
// widening multiply-adds on other targets); returns the int8 multiply-adds done.
int64_t Int8DotLoop(int64_t iters, int32_t* sink) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  // Eight named accumulators (an array would live in memory around the asm statements).
  __m256i c0 = _mm256_set1_epi32(0), c1 = _mm256_set1_epi32(1), c2 = _mm256_set1_epi32(2),
          c3 = _mm256_set1_epi32(3), c4 = _mm256_set1_epi32(4), c5 = _mm256_set1_epi32(5),
          c6 = _mm256_set1_epi32(6), c7 = _mm256_set1_epi32(7);
  const __m256i w = _mm256_set1_epi8(3), a = _mm256_set1_epi8(-2);
#if HWY_TARGET == HWY_AVX3_DL && (HWY_COMPILER_GCC_ACTUAL || HWY_COMPILER_CLANG)
#define TLR_DOT(c) asm volatile("%{evex%} vpdpbusd %2, %1, %0" : "+v"(c) : "v"(w), "v"(a))
#else
#define TLR_DOT(c) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)))
#endif
  for (int64_t i = 0; i < iters; ++i) {
    TLR_DOT(c0); TLR_DOT(c1); TLR_DOT(c2); TLR_DOT(c3);
    TLR_DOT(c4); TLR_DOT(c5); TLR_DOT(c6); TLR_DOT(c7);
  }
#undef TLR_DOT
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                     _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
  *sink = _mm256_extract_epi32(s, 0);
  return iters * 8 * 32;
#elif HWY_TARGET == HWY_SCALAR
  int32_t acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  volatile int8_t wv = 3, av = -2;
  const int32_t w = wv, a = av;
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < 8; ++k) acc[k] += w * a;
  }
  *sink = acc[0] + acc[7];
  return iters * 8;
#else
  const hn::ScalableTag<int32_t> di;
  const hn::Repartition<int16_t, decltype(di)> d16;
  auto s0 = hn::Zero(di), s1 = hn::Zero(di), s2 = hn::Zero(di), s3 = hn::Zero(di);
  auto s4 = hn::Zero(di), s5 = hn::Zero(di), s6 = hn::Zero(di), s7 = hn::Zero(di);
  const auto w = hn::Set(d16, 3), a = hn::Set(d16, -2);
  for (int64_t i = 0; i < iters; ++i) {
    s0 = hn::ReorderWidenMulAccumulate(di, w, a, s0, s1);
    s2 = hn::ReorderWidenMulAccumulate(di, w, a, s2, s3);
    s4 = hn::ReorderWidenMulAccumulate(di, w, a, s4, s5);
    s6 = hn::ReorderWidenMulAccumulate(di, w, a, s6, s7);
  }
  *sink = hn::GetLane(hn::Add(hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)), hn::Add(hn::Add(s4, s5), hn::Add(s6, s7))));
  return iters * 4 * static_cast<int64_t>(hn::Lanes(d16));
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr {
HWY_EXPORT(SumRange);
HWY_EXPORT(XorBytes);
HWY_EXPORT(FmaLoop);
HWY_EXPORT(FloatLanes);
HWY_EXPORT(Int8DotLoop);

double MeasurePeakInt8Gops(ThreadPool* pool) {
  const int threads = pool->n_threads();
  const int64_t iters = 20'000'000;
  double best = 0;
  std::vector<int32_t> sink(threads);
  std::vector<int64_t> macs(threads);
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool->ParallelFor(threads, 1, [&](int64_t b, int64_t, int) {
      macs[b] = HWY_DYNAMIC_DISPATCH(Int8DotLoop)(iters, &sink[b]);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = 0;
    for (int64_t m : macs) total += static_cast<double>(m);
    best = std::max(best, 2.0 * total / s / 1e9);
  }
  volatile int32_t keep = sink[0];
  (void)keep;
  return best;
}

double MeasurePeakGflops(ThreadPool* pool) {
  const int threads = pool->n_threads();
  const int64_t iters = 20'000'000;
  const double lanes = static_cast<double>(HWY_DYNAMIC_DISPATCH(FloatLanes)());
  double best = 0;
  std::vector<float> sink(threads);
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool->ParallelFor(threads, 1, [&](int64_t b, int64_t, int) {
      sink[b] = HWY_DYNAMIC_DISPATCH(FmaLoop)(iters);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, threads * iters * 8.0 * lanes * 2.0 / s / 1e9);
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
}

double ReadPassGbps(ThreadPool* pool, const uint8_t* p, size_t bytes) {
  const int threads = pool->n_threads();
  std::vector<uint64_t> sink(threads);
  const auto t0 = std::chrono::steady_clock::now();
  pool->ParallelFor(threads, 1, [&](int64_t b, int64_t, int) {
    const size_t lo = bytes / threads * b, hi = b + 1 == threads ? bytes : bytes / threads * (b + 1);
    sink[b] = HWY_DYNAMIC_DISPATCH(XorBytes)(p + lo, hi - lo);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile uint64_t keep = sink[0];
  (void)keep;
  return static_cast<double>(bytes) / s / 1e9;
}

BandwidthResult MeasureReadBandwidth(ThreadPool* pool, size_t bytes, int repetitions) {
  const size_t n = bytes / sizeof(float);
  // Distinct values on every page: pages of identical content can be merged by the host
  // (KSM, zero pages), and reading one shared page over and over measures the cache.
  std::vector<float> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i % 65521);
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
