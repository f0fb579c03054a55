// K-quant and IQ4 block (de)quantizers (quant layer). See quantize_k.h.
#include "quant/quantize_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tlr::quant_internal {
namespace {

int NearestInt(float x) { return static_cast<int>(std::lrintf(x)); }

// The value of largest magnitude among n, with its sign (0 for an all-zero run).
float SignedMax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Asymmetric quantization of n_sub sub-blocks of `len` values to codes 0..nmax, each
// sub-block with a scale sc and a minimum m in 0..smax against two f16 super-scales
// (x ~= d * sc * q - dmin * m). Minimums and scales are rounded up so each sub-block's
// range [-dmin * m, -dmin * m + nmax * d * sc] covers its values.
struct KMin {
  uint16_t d, dmin;
  uint8_t sc[16], m[16];
  uint8_t q[256];
};
void QuantKMin(const float* x, int n_sub, int len, int nmax, int smax, KMin* out) {
  float lo[16], hi[16], max_m = 0;
  for (int j = 0; j < n_sub; ++j) {
    lo[j] = 0;  // the range always includes 0 so minimums stay >= 0
    hi[j] = x[j * len];
    for (int l = 0; l < len; ++l) {
      lo[j] = std::min(lo[j], x[j * len + l]);
      hi[j] = std::max(hi[j], x[j * len + l]);
    }
    max_m = std::max(max_m, -lo[j]);
  }
  out->dmin = F16RoundUp(max_m / smax);
  const float dmin = F16ToF32(out->dmin);
  float offset[16], step[16], max_step = 0;
  for (int j = 0; j < n_sub; ++j) {
    const int m = dmin > 0 ? static_cast<int>(std::ceil(-lo[j] / dmin)) : 0;
    out->m[j] = static_cast<uint8_t>(std::min(m, smax));
    offset[j] = dmin * out->m[j];
    step[j] = std::max(0.0f, hi[j] + offset[j]) / nmax;
    max_step = std::max(max_step, step[j]);
  }
  out->d = F16RoundUp(max_step / smax);
  const float d = F16ToF32(out->d);
  for (int j = 0; j < n_sub; ++j) {
    const int sc = d > 0 ? static_cast<int>(std::ceil(step[j] / d)) : 0;
    out->sc[j] = static_cast<uint8_t>(std::min(sc, smax));
    const float e = d * out->sc[j];
    for (int l = 0; l < len; ++l) {
      const int q = e > 0 ? NearestInt((x[j * len + l] + offset[j]) / e) : 0;
      out->q[j * len + l] = static_cast<uint8_t>(std::clamp(q, 0, nmax));
    }
  }
}

// Symmetric sub-block scales: in each of n_sub runs of `len` values the value of largest
// magnitude maps to the code `bottom` (negative), i.e. the signed scale s_j = max_j / bottom,
// so the other values fall in [bottom, -bottom]. Each s_j becomes an integer multiple
// sc[j] in -31..31 of one f16 super-scale (returned), rounded away from zero so that
// |d * sc[j]| >= |s_j| keeps the values inside the code range.
uint16_t SymmetricScales(const float* x, int n_sub, int len, float bottom, int* sc) {
  float s[16], smax = 0;
  for (int j = 0; j < n_sub; ++j) {
    s[j] = SignedMax(x + j * len, len) / bottom;
    smax = std::max(smax, std::fabs(s[j]));
  }
  const uint16_t d16 = F16RoundUp(smax / 31);
  const float d = F16ToF32(d16);
  for (int j = 0; j < n_sub; ++j) {
    const int a = d > 0 ? std::min(31, static_cast<int>(std::ceil(std::fabs(s[j]) / d))) : 0;
    sc[j] = s[j] < 0 ? -a : a;
  }
  return d16;
}

// The index of the kIq4nlValues entry nearest to v.
int NearestIq4(float v) {
  int lo = 0, hi = 15;  // binary search over the sorted table, then the closer neighbour
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (v < kIq4nlValues[mid] ? hi : lo) = mid;
  }
  return std::fabs(v - kIq4nlValues[lo]) <= std::fabs(v - kIq4nlValues[hi]) ? lo : hi;
}

// Q4_K / Q5_K: 6-bit scales and minimums of 8 sub-blocks packed in 12 bytes (ScaleMinK4).
void PackScalesK4(const uint8_t* sc, const uint8_t* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

}  // namespace

uint16_t F16RoundUp(float v) {
  uint16_t h = F32ToF16(v);
  if (F16ToF32(h) < v) ++h;  // positive halves are ordered like their bit patterns
  return h;
}

void DequantQ2K(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    for (int c = 0; c < 8; ++c) {  // 32-element chunks
      const uint8_t* q = x[i].qs + 32 * (c / 4);
      const int shift = 2 * (c % 4);
      for (int h = 0; h < 2; ++h) {
        const uint8_t sc = x[i].scales[2 * c + h];
        const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
        for (int l = 16 * h; l < 16 * h + 16; ++l) *y++ = dl * ((q[l] >> shift) & 3) - ml;
      }
    }
  }
}

void DequantQ3K(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int c = 0; c < 8; ++c) {
      const uint8_t* q = x[i].qs + 32 * (c / 4);
      const int shift = 2 * (c % 4);
      for (int h = 0; h < 2; ++h) {
        const float dl = d * (Q3KScale(x[i].scales, 2 * c + h) - 32);
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((x[i].hmask[l] >> c) & 1 ? 0 : 4);
          *y++ = dl * v;
        }
      }
    }
  }
}

namespace {
// Q4_K and Q5_K (see QuantQ45K for the layout).
template <typename B, bool kFive>
void DequantQ45K(const B* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      ScaleMinK4(j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        int v = q[l] & 0xF;
        if constexpr (kFive) v += (x[i].qh[l] >> j) & 1 ? 16 : 0;
        *y++ = d1 * v - m1;
      }
      for (int l = 0; l < 32; ++l) {
        int v = q[l] >> 4;
        if constexpr (kFive) v += (x[i].qh[l] >> (j + 1)) & 1 ? 16 : 0;
        *y++ = d2 * v - m2;
      }
    }
  }
}
}  // namespace

void DequantQ4K(const BlockQ4_K* x, float* y, int64_t nb) { DequantQ45K<BlockQ4_K, false>(x, y, nb); }
void DequantQ5K(const BlockQ5_K* x, float* y, int64_t nb) { DequantQ45K<BlockQ5_K, true>(x, y, nb); }

void DequantQ6K(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQKK; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void DequantIQ4NL(const BlockIQ4_NL* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * kIq4nlValues[x[i].qs[j] & 0xF];
      y[j + 16] = d * kIq4nlValues[x[i].qs[j] >> 4];
    }
  }
}

void DequantIQ4XS(const BlockIQ4_XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < 8; ++j, y += 32) {
      const float dl = d * (Iq4XsScale(x[i], j) - 32);
      const uint8_t* qs = x[i].qs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        y[l] = dl * kIq4nlValues[qs[l] & 0xF];
        y[l + 16] = dl * kIq4nlValues[qs[l] >> 4];
      }
    }
  }
}

void QuantQ2K(const float* x, BlockQ2_K* y, int64_t nb) {
  KMin k;
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    QuantKMin(x, 16, 16, 3, 15, &k);
    y[i].d = k.d;
    y[i].dmin = k.dmin;
    for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(k.sc[j] | (k.m[j] << 4));
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    for (int e = 0; e < kQKK; ++e) {  // element 32 c + l: bits 2 (c % 4) of qs[32 (c / 4) + l]
      const int c = e / 32, l = e % 32;
      y[i].qs[32 * (c / 4) + l] |= static_cast<uint8_t>(k.q[e] << (2 * (c % 4)));
    }
  }
}

void QuantQ3K(const float* x, BlockQ3_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    // Codes -4..3 per 16 values: only values near -max (the other sign) clamp to 3.
    int sc[16];
    y[i].d = SymmetricScales(x, 16, 16, -4.0f, sc);
    const float d = F16ToF32(y[i].d);
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    for (int j = 0; j < 16; ++j) {
      const int v = sc[j] + 32;  // 6 bits: low nibble in scales[j % 8], high 2 bits in scales[8 + j % 4]
      y[i].scales[j % 8] |= static_cast<uint8_t>((v & 0xF) << (j < 8 ? 0 : 4));
      y[i].scales[8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
      const float e = d * sc[j];
      for (int l = 0; l < 16; ++l) {
        const int q = (e != 0 ? std::clamp(NearestInt(x[16 * j + l] / e), -4, 3) : 0) + 4;
        const int el = 16 * j + l, c = el / 32, pos = el % 32;
        y[i].qs[32 * (c / 4) + pos] |= static_cast<uint8_t>((q & 3) << (2 * (c % 4)));
        y[i].hmask[pos] |= static_cast<uint8_t>((q >> 2) << c);
      }
    }
  }
}

namespace {
// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and minimums; 64-element groups store
// the low 4 bits of their first 32 codes in the low nibbles of 32 bytes, the next 32 in the
// high nibbles, and (Q5_K) the 5th bits of group j at bits 2j and 2j + 1 of qh.
template <typename B, bool kFive>
void QuantQ45K(const float* x, B* y, int64_t nb) {
  KMin k;
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    QuantKMin(x, 8, 32, kFive ? 31 : 15, 63, &k);
    y[i].d = k.d;
    y[i].dmin = k.dmin;
    PackScalesK4(k.sc, k.m, y[i].scales);
    if constexpr (kFive) std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q0 = k.q[64 * j + l], q1 = k.q[64 * j + 32 + l];
        y[i].qs[32 * j + l] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
        if constexpr (kFive) {
          y[i].qh[l] |= static_cast<uint8_t>(((q0 >> 4) << (2 * j)) | ((q1 >> 4) << (2 * j + 1)));
        }
      }
    }
  }
}
}  // namespace

void QuantQ4K(const float* x, BlockQ4_K* y, int64_t nb) { QuantQ45K<BlockQ4_K, false>(x, y, nb); }
void QuantQ5K(const float* x, BlockQ5_K* y, int64_t nb) { QuantQ45K<BlockQ5_K, true>(x, y, nb); }

void QuantQ6K(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scale[16];
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      scale[j] = amax / 31.0f;
    }
    const float max_scale = *std::max_element(scale, scale + 16);
    y[i].d = F16RoundUp(max_scale / 127.0f);  // rounded up, like each sub-block scale below
    const float dd = F16ToF32(y[i].d);
    uint8_t L[kQKK];
    for (int j = 0; j < 16; ++j) {
      const int s = dd > 0 ? std::min(127, static_cast<int>(std::ceil(scale[j] / dd))) : 0;
      y[i].scales[j] = static_cast<int8_t>(s);
      const float ds = dd * s;
      for (int l = 0; l < 16; ++l) {
        const int q = ds != 0 ? NearestInt(x[16 * j + l] / ds) : 0;
        L[16 * j + l] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQKK; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = q1 | (q3 << 4);
        ql[l + 32] = q2 | (q4 << 4);
        qh[l] = (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                ((L[j + l + 96] >> 4) << 6);
      }
      ql += 64;
      qh += 32;
    }
  }
}

void QuantIQ4NL(const float* x, BlockIQ4_NL* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    // The value of largest magnitude maps to the table's -127.
    const float max = SignedMax(x, 32);
    const float a = F16ToF32(F16RoundUp(std::fabs(max) / 127));
    y[i].d = F32ToF16(max > 0 ? -a : a);
    const float d = F16ToF32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = d != 0 ? NearestIq4(x[j] / d) : 8, q1 = d != 0 ? NearestIq4(x[j + 16] / d) : 8;
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantIQ4XS(const float* x, BlockIQ4_XS* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int sc[8];  // the table's bottom value -127 per 32 values
    y[i].d = SymmetricScales(x, 8, 32, -127.0f, sc);
    const float d = F16ToF32(y[i].d);
    y[i].scales_h = 0;
    std::memset(y[i].scales_l, 0, sizeof(y[i].scales_l));
    for (int j = 0; j < 8; ++j) {
      const int ls = sc[j] + 32;
      y[i].scales_l[j / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (j % 2)));
      y[i].scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * j));
      const float e = d * sc[j];
      const float* v = x + 32 * j;
      for (int l = 0; l < 16; ++l) {
        const int q0 = e != 0 ? NearestIq4(v[l] / e) : 8, q1 = e != 0 ? NearestIq4(v[l + 16] / e) : 8;
        y[i].qs[16 * j + l] = static_cast<uint8_t>(q0 | (q1 << 4));
      }
    }
  }
}

}  // namespace tlr::quant_internal
