// Scalar reference (de)quantization (quant layer). The dequantizers follow ggml's
// dequantize_row_* exactly; they are the definition the SIMD kernels are tested against.
#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tlr {

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      u = sign | ((127 - 15 - e) << 23) | ((m & 0x3FF) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7F800000 | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t abs = u & 0x7FFFFFFF;
  if (abs > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00);  // NaN
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // overflow -> inf
  if (abs < 0x38800000) {  // below the smallest normal half: a subnormal half, or zero
    const uint32_t e = abs >> 23;
    if (e == 0) return static_cast<uint16_t>(sign);  // float subnormals are far below
    const uint32_t m = (abs & 0x7FFFFF) | 0x800000;  // value = m * 2^(e-150)
    const uint32_t shift = 126 - e;                  // half subnormal unit is 2^-24
    if (shift >= 25) return static_cast<uint16_t>(sign);
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ((abs >> 13) - (112u << 10));
  const uint32_t low = abs & 0x1FFF;
  if (low > 0x1000 || (low == 0x1000 && (r & 1))) ++r;
  return static_cast<uint16_t>(sign | r);
}

uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

bool CanDequantize(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1: case GgmlType::kQ8_0:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K: case GgmlType::kQ8_K:
      return true;
    default:
      return false;
  }
}

bool CanQuantize(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ8_0: case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

namespace {

void DequantQ4K(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < 8; j += 2) {
      uint8_t sc, m;
      ScaleMinK4(j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}

void DequantQ5K(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2) {
      uint8_t sc, m;
      ScaleMinK4(j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

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

int NearestInt(float x) { return static_cast<int>(std::lrintf(x)); }

void QuantQ4K(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scale[8], minv[8];
    for (int j = 0; j < 8; ++j) {
      float lo = 0, hi = 0;  // the range always includes 0 so mins stay >= 0
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, x[32 * j + l]);
        hi = std::max(hi, x[32 * j + l]);
      }
      scale[j] = (hi - lo) / 15.0f;
      minv[j] = -lo;
    }
    const float max_scale = *std::max_element(scale, scale + 8);
    const float max_min = *std::max_element(minv, minv + 8);
    const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
    y[i].d = F32ToF16(d);
    y[i].dmin = F32ToF16(dmin);
    const float dd = F16ToF32(y[i].d), ddmin = F16ToF32(y[i].dmin);
    uint8_t sc[8], mq[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(std::clamp(dd > 0 ? NearestInt(scale[j] / dd) : 0, 0, 63));
      mq[j] = static_cast<uint8_t>(std::clamp(ddmin > 0 ? NearestInt(minv[j] / ddmin) : 0, 0, 63));
    }
    std::memset(y[i].scales, 0, 12);
    for (int j = 0; j < 4; ++j) {
      y[i].scales[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
      y[i].scales[j + 4] = mq[j] | ((mq[j + 4] >> 4) << 6);
      y[i].scales[j + 8] = (sc[j + 4] & 0xF) | ((mq[j + 4] & 0xF) << 4);
    }
    uint8_t L[kQKK];
    for (int j = 0; j < 8; ++j) {
      const float ds = dd * sc[j], dm = ddmin * mq[j];
      for (int l = 0; l < 32; ++l) {
        const int q = ds > 0 ? NearestInt((x[32 * j + l] + dm) / ds) : 0;
        L[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, 15));
      }
    }
    for (int j = 0; j < kQKK; j += 64) {
      for (int l = 0; l < 32; ++l) y[i].qs[j / 2 + l] = L[j + l] | (L[j + l + 32] << 4);
    }
  }
}

void QuantQ6K(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scale[16];
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      scale[j] = amax / 31.0f;
    }
    float max_scale = *std::max_element(scale, scale + 16);
    const float d = max_scale / 127.0f;
    y[i].d = F32ToF16(d);
    const float dd = F16ToF32(y[i].d);
    uint8_t L[kQKK];
    for (int j = 0; j < 16; ++j) {
      const int s = dd > 0 ? std::clamp(NearestInt(scale[j] / dd), -128, 127) : 0;
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

}  // namespace

Status Dequantize(GgmlType type, const void* src, float* y, int64_t n) {
  const auto& tr = GgmlTraits(type);
  if (n % tr.block_size != 0) return Status::Error("dequantize: n is not a multiple of the block size");
  const int64_t nb = n / tr.block_size;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(y, src, n * 4);
      return Status::Ok();
    case GgmlType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = F16ToF32(h[i]);
      return Status::Ok();
    }
    case GgmlType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = Bf16ToF32(h[i]);
      return Status::Ok();
    }
    case GgmlType::kQ4_0: {
      const auto* x = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < nb; ++i, y += 32) {
        const float d = F16ToF32(x[i].d);
        for (int j = 0; j < 16; ++j) {
          y[j] = ((x[i].qs[j] & 0xF) - 8) * d;
          y[j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
        }
      }
      return Status::Ok();
    }
    case GgmlType::kQ4_1: {
      const auto* x = static_cast<const BlockQ4_1*>(src);
      for (int64_t i = 0; i < nb; ++i, y += 32) {
        const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
        for (int j = 0; j < 16; ++j) {
          y[j] = (x[i].qs[j] & 0xF) * d + m;
          y[j + 16] = (x[i].qs[j] >> 4) * d + m;
        }
      }
      return Status::Ok();
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const bool has_min = type == GgmlType::kQ5_1;
      const size_t stride = has_min ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
      const auto* base = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < nb; ++i, y += 32) {
        const Q5Fields q = ParseQ5(base + i * stride, has_min);
        const uint32_t qh = q.qh;
        const uint8_t* qs = q.qs;
        const float d = F16ToF32(q.d), m = has_min ? F16ToF32(q.m) : 0.0f;
        const int off = has_min ? 0 : 16;
        for (int j = 0; j < 16; ++j) {
          const int h0 = ((qh >> j) << 4) & 0x10;
          const int h1 = (qh >> (j + 12)) & 0x10;
          y[j] = (((qs[j] & 0xF) | h0) - off) * d + m;
          y[j + 16] = (((qs[j] >> 4) | h1) - off) * d + m;
        }
      }
      return Status::Ok();
    }
    case GgmlType::kQ8_0: {
      const auto* x = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < nb; ++i, y += 32) {
        const float d = F16ToF32(x[i].d);
        for (int j = 0; j < 32; ++j) y[j] = x[i].qs[j] * d;
      }
      return Status::Ok();
    }
    case GgmlType::kQ4_K:
      DequantQ4K(static_cast<const BlockQ4_K*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kQ5_K:
      DequantQ5K(static_cast<const BlockQ5_K*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kQ6_K:
      DequantQ6K(static_cast<const BlockQ6_K*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kQ8_K: {
      const auto* x = static_cast<const BlockQ8_K*>(src);
      for (int64_t i = 0; i < nb; ++i, y += kQKK) {
        for (int j = 0; j < kQKK; ++j) y[j] = x[i].d * x[i].qs[j];
      }
      return Status::Ok();
    }
    default:
      return Status::Error("dequantize: type " + std::string(tr.name) + " is not supported");
  }
}

Status Quantize(GgmlType type, const float* x, void* dst, int64_t n) {
  const auto& tr = GgmlTraits(type);
  if (n % tr.block_size != 0) return Status::Error("quantize: n is not a multiple of the block size");
  const int64_t nb = n / tr.block_size;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, x, n * 4);
      return Status::Ok();
    case GgmlType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = F32ToF16(x[i]);
      return Status::Ok();
    }
    case GgmlType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = F32ToBf16(x[i]);
      return Status::Ok();
    }
    case GgmlType::kQ8_0: {
      auto* y = static_cast<BlockQ8_0*>(dst);
      for (int64_t i = 0; i < nb; ++i, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        y[i].d = F32ToF16(d);
        const float id = d > 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; ++j) y[i].qs[j] = static_cast<int8_t>(NearestInt(x[j] * id));
      }
      return Status::Ok();
    }
    case GgmlType::kQ4_0: {
      auto* y = static_cast<BlockQ4_0*>(dst);
      for (int64_t i = 0; i < nb; ++i, x += 32) {
        float amax = 0, max = 0;  // the value of largest magnitude, with its sign
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
          }
        }
        const float d = max / -8.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = F32ToF16(d);
        for (int j = 0; j < 16; ++j) {
          const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
          const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
          y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return Status::Ok();
    }
    case GgmlType::kQ4_1: {
      auto* y = static_cast<BlockQ4_1*>(dst);
      for (int64_t i = 0; i < nb; ++i, x += 32) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; ++j) {
          lo = std::min(lo, x[j]);
          hi = std::max(hi, x[j]);
        }
        const float d = (hi - lo) / 15.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = F32ToF16(d);
        y[i].m = F32ToF16(lo);
        for (int j = 0; j < 16; ++j) {
          const int q0 = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
          const int q1 = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
          y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return Status::Ok();
    }
    case GgmlType::kQ5_0: {
      auto* y = static_cast<BlockQ5_0*>(dst);
      for (int64_t i = 0; i < nb; ++i, x += 32) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
          }
        }
        const float d = max / -16.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = F32ToF16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
          const int q0 = std::min(31, static_cast<int>(x[j] * id + 16.5f));
          const int q1 = std::min(31, static_cast<int>(x[j + 16] * id + 16.5f));
          y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
          qh |= ((q0 & 0x10u) >> 4) << j;
          qh |= ((q1 & 0x10u) >> 4) << (j + 16);
        }
        std::memcpy(y[i].qh, &qh, 4);
      }
      return Status::Ok();
    }
    case GgmlType::kQ4_K:
      QuantQ4K(x, static_cast<BlockQ4_K*>(dst), nb);
      return Status::Ok();
    case GgmlType::kQ6_K:
      QuantQ6K(x, static_cast<BlockQ6_K*>(dst), nb);
      return Status::Ok();
    default:
      return Status::Error("quantize: type " + std::string(tr.name) + " is not supported");
  }
}

}  // namespace tlr
