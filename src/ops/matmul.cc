// MatMul entry points (ops layer): activation quantization (Q8A, SIMD per target), routing
// of each weight type to its family's kernels (matmul_kernels.h) and the threading. See
// matmul.h for the contract.
//
// Quantized weights are dotted as integers with the tokens' 8-bit activations: each 32-weight
// block's integer sum becomes a float scaled by d_w * d_a; offsets (Q4_0's -8, Q4_1's min,
// K-quant minimums) contribute offset_w * s_a per block, where s_a = d_a * sum(q_a). Threads
// take runs of whole panels (8 rows), so every row goes through the same kernel whatever
// the thread count.
#include <cmath>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstring>
#include <string>

#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_lowbit.h"
#include "ops/panel_layout.h"
#include "ops/thread_pool.h"
#include "quant/quantize.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void QuantizeQ8ARows(const float* x, int64_t ld, int64_t n_cols, int8_t* qs, float* ds,
                     float* ss, int16_t* s16, int64_t t0, int64_t t1) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  const int64_t nb = n_cols / 32;
  for (int64_t t = t0; t < t1; ++t) {
    const float* row = x + t * ld;
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = row + b * 32;
      float amax = 0;
      if (L <= 32) {
        auto m = hn::Zero(df);
        for (size_t i = 0; i < 32; i += L) m = hn::Max(m, hn::Abs(hn::LoadU(df, v + i)));
        amax = hn::GetLane(hn::MaxOfLanes(df, m));
      } else {
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      }
      const float d = amax / 127.0f;
      const float id = d > 0 ? 1.0f / d : 0.0f;
      int sum[2] = {0, 0};
      int8_t* q = qs + t * n_cols + b * 32;
      if (L <= 16) {
        // Round to nearest even (as lrintf in the default mode), narrow to int8, and sum each
        // half of the block (the K-quant kernels need per-16 sums).
        const hn::RebindToSigned<decltype(df)> di;
        const hn::Rebind<int8_t, decltype(df)> d8;
        const auto vid = hn::Set(df, id);
        for (int h = 0; h < 2; ++h) {
          auto vsum = hn::Zero(di);
          for (size_t i = 16 * static_cast<size_t>(h); i < 16 * static_cast<size_t>(h + 1); i += L) {
            const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, v + i), vid));
            vsum = hn::Add(vsum, qi);
            hn::StoreU(hn::DemoteTo(d8, qi), d8, q + i);
          }
          sum[h] = hn::GetLane(hn::SumOfLanes(di, vsum));
        }
      } else {
        for (int j = 0; j < 32; ++j) {
          const int qi = static_cast<int>(std::lrintf(v[j] * id));
          q[j] = static_cast<int8_t>(qi);
          sum[j / 16] += qi;
        }
      }
      ds[t * nb + b] = d;
      ss[t * nb + b] = d * static_cast<float>(sum[0] + sum[1]);
      s16[t * 2 * nb + 2 * b] = static_cast<int16_t>(sum[0]);
      s16[t * 2 * nb + 2 * b + 1] = static_cast<int16_t>(sum[1]);
    }
  }
}

std::string TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tlr {

HWY_EXPORT(QuantizeQ8ARows);
HWY_EXPORT(TargetNameImpl);

bool MatMulSupports(GgmlType t) {
  if (LowBitSupports(t)) return true;  // Q2_K, Q3_K, IQ4_NL, IQ4_XS: matmul_lowbit.cc
  switch (t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

bool MatMulUsesQ8A(GgmlType t) {
  return MatMulSupports(t) && t != GgmlType::kF32 && t != GgmlType::kF16 && t != GgmlType::kBF16;
}

void MatMulInput::Prepare(GgmlType type, const float* xs, int64_t n_tok, int64_t cols, int64_t ldx,
                          ThreadPool* pool) {
  x = xs;
  n_tokens = n_tok;
  n_cols = cols;
  ld = ldx;
  qs = nullptr;
  d = s = nullptr;
  s16 = nullptr;
  if (!MatMulUsesQ8A(type)) return;
  const size_t nq = static_cast<size_t>(n_tok * cols), ng = static_cast<size_t>(n_tok * (cols / 32));
  if (qs_storage_.size() < nq) qs_storage_.resize(nq);
  if (d_storage_.size() < ng) {
    d_storage_.resize(ng);
    s_storage_.resize(ng);
    s16_storage_.resize(2 * ng);
  }
  int8_t* q = qs_storage_.data();
  float* dd = d_storage_.data();
  float* sd = s_storage_.data();
  int16_t* s16d = s16_storage_.data();
  if (pool && n_tok > 1) {
    pool->ParallelFor(n_tok, 0, [&](int64_t b, int64_t e, int) {
      HWY_DYNAMIC_DISPATCH(QuantizeQ8ARows)(xs, ldx, cols, q, dd, sd, s16d, b, e);
    });
  } else {
    HWY_DYNAMIC_DISPATCH(QuantizeQ8ARows)(xs, ldx, cols, q, dd, sd, s16d, 0, n_tok);
  }
  qs = q;
  d = dd;
  s = sd;
  s16 = s16d;
}

void MatMulRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  switch (w.type) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16:
      return kernels::FloatRows(w, in, y, ldy, r0, r1);
    case GgmlType::kQ8_0: case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
      return kernels::LegacyRows(w, in, y, ldy, r0, r1);
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return kernels::KQuantRows(w, in, y, ldy, r0, r1);
    case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS: case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: {  // whole panels in the panel kernel, the rest in the low-bit one
      const int64_t panel_end = w.repacked ? w.n_rows / kPanelRows * kPanelRows : 0;
      if (r0 < panel_end) {
        if (w.type == GgmlType::kIQ4_NL) kernels::LegacyRows(w, in, y, ldy, r0, std::min(r1, panel_end));
        else kernels::KQuantRows(w, in, y, ldy, r0, std::min(r1, panel_end));
      }
      if (r1 > panel_end) MatMulRowsLowBit(w, in, y, ldy, std::max(r0, panel_end), r1);
      return;
    }
    default:
      return;
  }
}

namespace {
int64_t AlignToPanels(int64_t rows) { return (rows + kPanelRows - 1) / kPanelRows * kPanelRows; }

struct RowRange {
  int32_t matrix;
  int64_t r0, r1;
};
constexpr int kMaxRanges = 128;

// The parallel loop's work items over the rows of all matrices, largest first ("guided"):
// each takes 1/threads of the rows not yet handed out, in whole panels, never fewer than
// ~64 KiB of weights nor across two matrices. Threads start on long contiguous streams (what
// the hardware prefetcher wants; every new stream starts slow) and finish together (with
// two equal chunks per thread the caller waited ~10% of a decode step for the other
// thread's last chunk). 1/threads rather than 1/(2 threads), alternated at 2 threads:
// matmul_bench Q5_0 896x896 62% -> 75% of the read pass, 4864x896 86-89% -> 95-98%;
// decode Q5_0 96 -> 99-103 tok/s, Q4_0 132 -> 139-142; Q8_0, the Q4_K_M mix and pp128 the same.
int GuidedRanges(std::span<const WeightView> ws, int threads, RowRange* out) {
  int64_t remaining = 0;
  for (const WeightView& w : ws) remaining += w.n_rows;
  int n = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    const WeightView& w = ws[i];
    const int64_t min_rows = AlignToPanels(std::max<int64_t>(1, 65536 / static_cast<int64_t>(std::max<size_t>(1, w.row_bytes))));
    for (int64_t r = 0; r < w.n_rows;) {
      int64_t size = AlignToPanels(std::max(min_rows, remaining / threads));
      // Near the limit on ranges, the rest of each matrix is one range.
      if (n >= kMaxRanges - static_cast<int>(ws.size())) size = w.n_rows - r;
      size = std::min(size, w.n_rows - r);
      out[n++] = {static_cast<int32_t>(i), r, r + size};
      r += size;
      remaining -= size;
    }
  }
  return n;
}
}  // namespace

void MatMulFused(std::span<const WeightView> ws, const MatMulInput& in, std::span<float* const> ys,
                 ThreadPool* pool) {
  constexpr size_t kMax = 8;
  const size_t m = std::min(ws.size(), kMax);
  const int threads = pool ? pool->n_threads() : 1;
  if (threads == 1) {
    for (size_t i = 0; i < m; ++i) MatMulRows(ws[i], in, ys[i], ws[i].n_rows, 0, ws[i].n_rows);
    return;
  }
  // One parallel loop over the rows of all matrices.
  RowRange ranges[kMaxRanges];
  const int n = GuidedRanges(ws.first(m), threads, ranges);
  pool->ParallelFor(n, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t k = b; k < e; ++k) {
      const RowRange& r = ranges[k];
      MatMulRows(ws[r.matrix], in, ys[r.matrix], ws[r.matrix].n_rows, r.r0, r.r1);
    }
  });
}

void MatMul(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, ThreadPool* pool) {
  if (!pool || pool->n_threads() == 1) {
    MatMulRows(w, in, y, ldy, 0, w.n_rows);
    return;
  }
  RowRange ranges[kMaxRanges];
  const int n = GuidedRanges(std::span<const WeightView>(&w, 1), pool->n_threads(), ranges);
  pool->ParallelFor(n, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t k = b; k < e; ++k) MatMulRows(w, in, y, ldy, ranges[k].r0, ranges[k].r1);
  });
}

namespace {
bool AmdCpu() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0, &a, &b, &c, &d) != 0 && b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
#else
  return false;
#endif
}
}  // namespace

WeightPrefetch DetectedWeightPrefetch() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!AmdCpu() || __get_cpuid(1, &a, &b, &c, &d) == 0) return WeightPrefetch::kEveryLine;
  const unsigned base = (a >> 8) & 0xf;
  const unsigned family = base == 0xf ? base + ((a >> 20) & 0xff) : base;
  if (family == 0x1a) return WeightPrefetch::kFirstLine;  // Zen 5
#endif
  return WeightPrefetch::kEveryLine;
}

WeightPrefetch GetWeightPrefetch() {
  return kernels::prefetch_every_line.load(std::memory_order_relaxed) ? WeightPrefetch::kEveryLine
                                                                     : WeightPrefetch::kFirstLine;
}

void SetWeightPrefetch(WeightPrefetch mode) {
  kernels::prefetch_every_line.store(mode == WeightPrefetch::kEveryLine, std::memory_order_relaxed);
}

int GetFloatDecodeStreams() { return kernels::float_decode_streams.load(std::memory_order_relaxed); }

void SetFloatDecodeStreams(int streams) {
  kernels::float_decode_streams.store(streams == 1 ? 1 : 4, std::memory_order_relaxed);
}

namespace {
// The detected setting, in place before main.
const bool kWeightPrefetchSet = (SetWeightPrefetch(DetectedWeightPrefetch()), true);
const bool kHalfFloatPrefetchSet = (kernels::prefetch_half_floats.store(!AmdCpu(), std::memory_order_relaxed), true);
const bool kFloatDecodeStreamsSet = (SetFloatDecodeStreams(AmdCpu() ? 1 : 4), true);
}  // namespace

#if defined(HWY_COMPILE_ONLY_STATIC) && defined(__EMSCRIPTEN__)
// The browser build: one target chosen at compile time, no Highway runtime linked.
std::vector<std::string> CompiledSimdTargets() { return {hwy::TargetName(HWY_STATIC_TARGET)}; }

std::string ActiveSimdTarget() { return hwy::TargetName(HWY_STATIC_TARGET); }

bool ForceSimdTarget(const std::string& name) { return name.empty() || name == ActiveSimdTarget(); }

Status CheckSimdSupport() { return Status::Ok(); }
#else
std::vector<std::string> CompiledSimdTargets() {
  std::vector<std::string> names;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) names.push_back(hwy::TargetName(t));
  return names;
}

std::string ActiveSimdTarget() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

Status CheckSimdSupport() {
  if (!hwy::SupportedAndGeneratedTargets().empty()) return Status::Ok();
  std::string compiled;
  for (int64_t bits = HWY_TARGETS; bits != 0; bits &= bits - 1) {
    compiled += std::string(compiled.empty() ? "" : ", ") + hwy::TargetName(bits & -bits);
  }
  return Status::Error("this CPU has none of the SIMD instruction sets this build's kernels were compiled for (" +
                       compiled +
                       "; on x86-64, SSE4 means SSE4.2 with AES and CLMUL: Intel since 2010, AMD since 2011): "
                       "build with cmake -DTLR_SIMD_TARGETS=device, whose kernels also run on older CPUs");
}

bool ForceSimdTarget(const std::string& name) {
  hwy::SetSupportedTargetsForTest(0);
  if (name.empty()) return true;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      return true;
    }
  }
  return false;
}
#endif

}  // namespace tlr
#endif  // HWY_ONCE
