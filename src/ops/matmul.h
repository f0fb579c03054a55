// Matrix products against GGUF weight matrices (ops layer): the one entry point the model
// uses for every linear layer, for one token (decode) or many (prefill, batched steps).
//
// Float weights (F32, F16, BF16) multiply float activations directly. Quantized weights
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) use integer dot products against the
// activations quantized on the fly to Q8A blocks (int8 + float scale per 32 values): this is
// what makes them fast (8-bit multiply-adds, maddubs/VNNI on x86), at a cost of ~0.4% relative
// error per activation block, far below the weights' own quantization error.
//
// SIMD lives in one translation unit per family of weight types (matmul_kernels.h; Google
// Highway, runtime dispatch over the compiled targets); every kernel has a scalar reference
// here for tests. Thread-safe: no shared mutable state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "quant/blocks.h"
#include "quant/ggml_type.h"
#include "util/status.h"

namespace tlr {

class ThreadPool;

// A weight matrix as stored in GGUF: n_rows rows of n_cols elements (ggml dims [n_cols,
// n_rows]), each row row_bytes long. A view: the bytes are owned elsewhere (the mmap).
struct WeightView {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t n_rows = 0, n_cols = 0;
  size_t row_bytes = 0;
  // Rows in the kernel layout made by RepackMatrix instead of GGUF's block layout.
  bool repacked = false;
  const uint8_t* Row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

// Repacking (an explicit copy at load, same size): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K
// and Q6_K rows are interleaved in panels of 8 rows (panel_layout.h), so one vector
// instruction works on 8 rows at once and a prefill reads each weight block once per 8
// tokens (AVX-512: 8; else 4). Rows after the last full panel keep GGUF layout. The kernels
// give the same results either way up to float rounding; the layout never changes which
// kernel a row goes through within one matrix, so results do not depend on the batch or on
// the thread count.
bool CanRepack(GgmlType type);
// The version of RepackMatrix's output; bump it whenever the layout changes (weight caches made
// by another version are rebuilt, model/weight_cache.h).
inline constexpr uint32_t kRepackLayoutVersion = 1;
// Writes the repacked rows of `w` (GGUF layout) to dst (w.n_rows * w.row_bytes bytes).
void RepackMatrix(const WeightView& w, uint8_t* dst);
// Row r of a repacked matrix back in GGUF block layout (row_bytes bytes), for references.
void UnrepackRow(const WeightView& w, int64_t r, uint8_t* blocks);

// Whether MatMul has a kernel for `type`, and whether that kernel wants Q8A activations.
bool MatMulSupports(GgmlType type);
bool MatMulUsesQ8A(GgmlType type);

// Activations for one MatMul call: n_tokens rows of n_cols floats, and their 8-bit
// quantization (blocks of 32 values with a float scale) when the weight type uses it. Reusable across calls without reallocating.
class MatMulInput {
 public:
  // Points at float activations [n_tokens, n_cols] (row stride ld floats) and quantizes them
  // if `type` needs it. The floats must stay valid until the MatMul calls are done.
  void Prepare(GgmlType type, const float* x, int64_t n_tokens, int64_t n_cols, int64_t ld,
               ThreadPool* pool);
  const float* x = nullptr;
  int64_t n_tokens = 0, n_cols = 0, ld = 0;
  // Quantized activations, when the weight type uses them (null otherwise), as a structure
  // of arrays so kernels can load a vector of block scales at once:
  const int8_t* qs = nullptr;  // [n_tokens, n_cols]: int8 values
  const float* d = nullptr;    // [n_tokens, n_cols / 32]: block scale (value = d * q)
  const float* s = nullptr;    // [n_tokens, n_cols / 32]: d * sum of the block's q
  // [n_tokens, n_cols / 16]: sum of each 16 consecutive q (Q6_K's -32 offset per 16-value
  // sub-block, applied in the integer sums of the panel kernels)
  const int16_t* s16 = nullptr;
  bool quantized() const { return qs != nullptr; }

 private:
  std::vector<int8_t> qs_storage_;
  std::vector<float> d_storage_, s_storage_;
  std::vector<int16_t> s16_storage_;
};

// y[t * ldy + r] = dot(W row r, x row t) for every row r of W and token t of `in`.
// `in` must have been prepared for w.type with in.n_cols == w.n_cols.
void MatMul(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, ThreadPool* pool);

// Several matrices with the same input (e.g. Q, K and V; gate and up) in one parallel loop:
// ys[i][t * ws[i].n_rows + r] = dot(ws[i] row r, x row t). All must take the same kind of
// input (MatMulUsesQ8A equal) and have in.n_cols columns. At most 8 matrices.
void MatMulFused(std::span<const WeightView> ws, const MatMulInput& in, std::span<float* const> ys,
                 ThreadPool* pool);

// Same over rows [r0, r1) only, single-threaded, with the dispatched SIMD kernel.
void MatMulRows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0,
                int64_t r1);

// Scalar references. MatMulRowsRef computes what the kernels compute (the same integer dot
// products against Q8A activations, summed in double); MatMulRowsDequant dequantizes the
// weights and uses the float activations, i.e. the exact product the model means.
void MatMulRowsRef(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0,
                   int64_t r1);
void MatMulRowsDequant(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy,
                       int64_t r0, int64_t r1);

// How the decode kernels prefetch weights ahead of their stream: the first cache line of
// each weight group, or every line of it. On Zen 5 the hardware prefetcher covers a group
// from its first line (that setting measured best there); on Zen 3 (AVX2) and Zen 4 (AVX-512
// VNNI) one line per group left decode at 51-79% of a read pass, every line at 82-97%
// (matmul_bench 4864x896, Zen 4, alternated: Q4_0 79% -> 97%, Q5_0 57% -> 91%, IQ4_NL 56% ->
// 90%; K-quants and Q8_0 equal). Detected from the CPU at start (AMD family 0x1A: first line;
// anything else: every line); SetWeightPrefetch overrides it (benchmarks, A/B runs). Quantized
// kernels only: float weights keep their per-target rule (matmul_float.cc).
enum class WeightPrefetch { kFirstLine, kEveryLine };
WeightPrefetch DetectedWeightPrefetch();
WeightPrefetch GetWeightPrefetch();
void SetWeightPrefetch(WeightPrefetch mode);

// How many far-apart rows float (F32, F16, BF16) decode reads at once: 4 (Intel hosts: F16
// decode 79-86% -> 98-101% of a read pass) or 1 (AMD hosts, where 4 was not measured). The
// result is the same bits either way. Set from the CPU at start; benchmarks override it.
int GetFloatDecodeStreams();
void SetFloatDecodeStreams(int streams);  // 1 or 4; anything else is taken as 4

// Names of the SIMD targets compiled in and the one dispatch picks on this CPU.
std::vector<std::string> CompiledSimdTargets();
std::string ActiveSimdTarget();
// Tests: restrict dispatch to one compiled target (by name); "" restores the best one.
bool ForceSimdTarget(const std::string& name);
// An error naming what is missing when this CPU runs none of the compiled targets (x86 builds
// with every target start at SSE4: CPUs from before ~2010 need TLR_SIMD_TARGETS=device, whose
// baseline is scalar). Model::Load checks it: the kernels would otherwise die of SIGILL.
Status CheckSimdSupport();

}  // namespace tlr
