// Q8_0 prefill on Intel AMX tiles (ops layer; included by matmul_legacy.cc, compiled for the
// AVX3_DL target on x86-64 Linux only; Highway 1.0.3 knows no AMX, so the tile instructions
// are written out as assembly, as vpdpbusd is in matmul_quant-inl.h).
//
// Two adjacent panels (16 rows) are staged once per call into the tile layout TDPBSUD reads
// (per 32-column group 8 rows of 64 bytes: quad c of the 16 rows, +128 as the VNNI kernels
// make them unsigned), then every 16 tokens' activations (a 16 x 32-byte tile per group) are
// multiplied into a 16 x 16 int32 tile. Those integer sums are exactly the VNNI kernels'
// isum, and the float steps after them are PanelDot2's, lane for lane and group for group in
// the same order: a row's result is bit-identical to decode's (the decoder's speculation
// relies on that). Tokens past the last whole 16 go through a zero-padded tile.
//
// AMX needs the kernel's permission per process (Linux arch_prctl ARCH_REQ_XCOMP_PERM); where
// the CPU lacks AMX-INT8 or the kernel refuses, AmxUsable() is false and the VNNI kernels run.

#if defined(TLR_OPS_MATMUL_AMX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TLR_OPS_MATMUL_AMX_INL_H_
#undef TLR_OPS_MATMUL_AMX_INL_H_
#else
#define TLR_OPS_MATMUL_AMX_INL_H_
#endif

#include <cstdlib>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "ops/matmul_panel-inl.h"

#undef TLR_AMX
#if defined(TLR_PANEL512) && defined(__linux__) && defined(__x86_64__)
#define TLR_AMX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {

#ifdef TLR_AMX

// Whether the CPU has AMX-TILE and AMX-INT8 and this process may use them (asked once);
// TLR_AMX=0 in the environment turns the tiles off (the VNNI kernels run: an A/B on one host).
inline bool AmxUsable() {
  static const bool usable = [] {
    const char* env = std::getenv("TLR_AMX");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return false;  // AMX-TILE, AMX-INT8
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

// The tile configuration (palette 1): tmm0 C 16 x 16 int32, tmm1 A 16 tokens x 32 bytes,
// tmm2 B 8 quads x 16 rows x 4 bytes; tmm3-5 the same for a second group in flight.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 32, 64, 64, 32, 64};
  uint8_t rows[16] = {16, 16, 8, 16, 16, 8};
};

// Whole pairs of adjacent panels of rows [r0, r1) of a repacked Q8_0 matrix, every token of
// `in`: returns the first row it did not compute (r0 when it did none).
inline int64_t AmxQ8Rows(const WeightView& w, const MatMulInput& in, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  constexpr PanelFormat f = PanelFormatOf(GgmlType::kQ8_0);
  const int64_t ng = in.n_cols / 32;
  const size_t panel_bytes = static_cast<size_t>(kPanelRows) * w.row_bytes;
  const int64_t panel_end = w.n_rows / kPanelRows * kPanelRows;
  if (r0 % kPanelRows != 0) return r0;
  const int64_t pairs = (std::min(r1, panel_end) - r0) / (2 * kPanelRows);
  if (pairs <= 0) return r0;

  thread_local std::vector<uint8_t> staged_storage;
  thread_local std::vector<int8_t> tail_qs;
  thread_local std::vector<float> tail_ds;
  const size_t staged_bytes = static_cast<size_t>(ng) * (512 + 64) + 64;
  if (staged_storage.size() < staged_bytes) staged_storage.resize(staged_bytes);
  uint8_t* staged = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(staged_storage.data()) + 63) & ~uintptr_t{63});
  float* scales = reinterpret_cast<float*>(staged + ng * 512);  // [group][16 rows]
  // The last tokens, zero-padded to a whole tile (values, block scales and sums).
  const int64_t whole = in.n_tokens / 16 * 16;
  const int64_t tail = in.n_tokens - whole;
  if (tail > 0) {
    tail_qs.assign(static_cast<size_t>(16 * in.n_cols), 0);
    tail_ds.assign(static_cast<size_t>(2 * 16 * ng), 0.0f);
    std::memcpy(tail_qs.data(), in.qs + whole * in.n_cols, static_cast<size_t>(tail * in.n_cols));
    std::memcpy(tail_ds.data(), in.d + whole * ng, static_cast<size_t>(tail * ng) * sizeof(float));
    std::memcpy(tail_ds.data() + 16 * ng, in.s + whole * ng, static_cast<size_t>(tail * ng) * sizeof(float));
  }

  static const AmxTileConfig config;
  asm volatile("ldtilecfg %0" ::"m"(config));
  alignas(64) int32_t c[4][16][16];  // four groups' sums: two are read while two are made
  alignas(64) float acc_out[16][16];
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  constexpr float kOff = PanelOffsetScale<GgmlType::kQ8_0>();
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t p = r0 / kPanelRows + 2 * pair;
    const uint8_t* p0 = w.data + p * panel_bytes;
    const uint8_t* p1 = p0 + panel_bytes;
    for (int64_t g = 0; g < ng; ++g) {
      const uint8_t* g0 = p0 + g * f.group_bytes;
      const uint8_t* g1 = p1 + g * f.group_bytes;
      for (int q = 0; q < 8; ++q) {
        const __m512i v = _mm512_xor_si512(Load2Panels(g0 + f.values_off + 32 * q, g1 + f.values_off + 32 * q), bias);
        _mm512_store_si512(reinterpret_cast<__m512i*>(staged + g * 512 + 64 * q), v);
      }
      _mm512_storeu_ps(scales + 16 * g, Scales2Panels(g0, g1));
    }
    for (int64_t t0 = 0; t0 < in.n_tokens; t0 += 16) {
      const int m = static_cast<int>(std::min<int64_t>(16, in.n_tokens - t0));
      const bool padded = m < 16;
      const int8_t* qs = padded ? tail_qs.data() : in.qs + t0 * in.n_cols;
      const float* ds = padded ? tail_ds.data() : in.d + t0 * ng;
      const float* ss = padded ? tail_ds.data() + 16 * ng : in.s + t0 * ng;
      __m512 acc[16];
      for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
      // acc[t] += isum * (d_w * d_a), group g's sums from c[g & 3].
      const auto accumulate = [&](int64_t g) HWY_ATTR {
        const __m512 wd = _mm512_loadu_ps(scales + 16 * g);
        for (int t = 0; t < 16; ++t) {
          const __m512i isum = _mm512_load_si512(reinterpret_cast<const __m512i*>(c[g & 3][t]));
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wd, _mm512_set1_ps(ds[t * ng + g])), acc[t]);
        }
      };
      // Two groups per step in two sets of tiles, so that one group's multiply does not wait
      // for the other's store; the sums are read a step after they were stored.
      const int64_t lda = in.n_cols, ldb = 64;
      const auto issue2 = [&](int64_t g) {
        asm volatile(
            "tilezero %%tmm0\n\t"
            "tilezero %%tmm3\n\t"
            "tileloadd (%0,%2,1), %%tmm1\n\t"
            "tileloadd (%3,%4,1), %%tmm2\n\t"
            "tileloadd (%1,%2,1), %%tmm4\n\t"
            "tileloadd (%5,%4,1), %%tmm5\n\t"
            "tdpbsud %%tmm2, %%tmm1, %%tmm0\n\t"
            "tdpbsud %%tmm5, %%tmm4, %%tmm3\n\t"
            "tilestored %%tmm0, (%6,%4,1)\n\t"
            "tilestored %%tmm3, (%7,%4,1)"
            :
            : "r"(qs + 32 * g), "r"(qs + 32 * (g + 1)), "r"(lda), "r"(staged + g * 512), "r"(ldb),
              "r"(staged + (g + 1) * 512), "r"(&c[g & 3][0][0]), "r"(&c[(g + 1) & 3][0][0])
            : "memory");
      };
      const auto issue1 = [&](int64_t g) {
        asm volatile(
            "tilezero %%tmm0\n\t"
            "tileloadd (%0,%1,1), %%tmm1\n\t"
            "tileloadd (%2,%3,1), %%tmm2\n\t"
            "tdpbsud %%tmm2, %%tmm1, %%tmm0\n\t"
            "tilestored %%tmm0, (%4,%3,1)"
            :
            : "r"(qs + 32 * g), "r"(lda), "r"(staged + g * 512), "r"(ldb), "r"(&c[g & 3][0][0])
            : "memory");
      };
      int64_t g = 0, done = 0;
      for (; g + 2 <= ng; g += 2) {
        issue2(g);
        for (; done < g; ++done) accumulate(done);
      }
      if (g < ng) issue1(g);
      for (; done < ng; ++done) accumulate(done);
      for (int t = 0; t < 16; ++t) _mm512_store_ps(acc_out[t], acc[t]);
      // The offset term, 8 tokens' chains at a time, then the result.
      for (int t8 = 0; t8 < m; t8 += 8) {
        __m512 off[8];
        for (int k = 0; k < 8; ++k) off[k] = _mm512_setzero_ps();
        for (int64_t g = 0; g < ng; ++g) {
          const __m512 wd = _mm512_loadu_ps(scales + 16 * g);
          for (int k = 0; k < 8; ++k) off[k] = _mm512_fmadd_ps(wd, _mm512_set1_ps(ss[(t8 + k) * ng + g]), off[k]);
        }
        for (int k = 0; k < 8 && t8 + k < m; ++k) {
          _mm512_storeu_ps(y + (t0 + t8 + k) * ldy + p * kPanelRows,
                           _mm512_fmadd_ps(off[k], _mm512_set1_ps(kOff), _mm512_load_ps(acc_out[t8 + k])));
        }
      }
    }
  }
  asm volatile("tilerelease" ::: "memory");
  return r0 + pairs * 2 * kPanelRows;
}

#endif  // TLR_AMX

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
