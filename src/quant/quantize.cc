// Scalar reference (de)quantization (quant layer): half conversions, the 32-element "legacy"
// types, and the dispatch over every type (the K-quants and IQ4 types are in quantize_k.cc).
// The dequantizers follow ggml's dequantize_row_* exactly; they are the definition the SIMD
// kernels are tested against.
#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "quant/quantize_k.h"

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
    case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: case GgmlType::kQ8_K: case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

bool CanQuantize(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1: case GgmlType::kQ8_0:
    case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

namespace {

int NearestInt(float x) { return static_cast<int>(std::lrintf(x)); }

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
    case GgmlType::kQ2_K:
      quant_internal::DequantQ2K(static_cast<const BlockQ2_K*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kQ3_K:
      quant_internal::DequantQ3K(static_cast<const BlockQ3_K*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kQ4_K:
      quant_internal::DequantQ4K(static_cast<const BlockQ4_K*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kQ5_K:
      quant_internal::DequantQ5K(static_cast<const BlockQ5_K*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kQ6_K:
      quant_internal::DequantQ6K(static_cast<const BlockQ6_K*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kIQ4_NL:
      quant_internal::DequantIQ4NL(static_cast<const BlockIQ4_NL*>(src), y, nb);
      return Status::Ok();
    case GgmlType::kIQ4_XS:
      quant_internal::DequantIQ4XS(static_cast<const BlockIQ4_XS*>(src), y, nb);
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
    case GgmlType::kQ5_1: {
      auto* y = static_cast<BlockQ5_1*>(dst);
      for (int64_t i = 0; i < nb; ++i, x += 32) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; ++j) {
          lo = std::min(lo, x[j]);
          hi = std::max(hi, x[j]);
        }
        // Encode against the stored (f16) scale and minimum, the scale rounded up so the
        // codes 0..31 cover [m, hi].
        y[i].m = F32ToF16(lo);
        const float m = F16ToF32(y[i].m);
        y[i].d = quant_internal::F16RoundUp(std::max(0.0f, hi - m) / 31.0f);
        const float d = F16ToF32(y[i].d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
          const int q0 = d > 0 ? std::clamp(NearestInt((x[j] - m) / d), 0, 31) : 0;
          const int q1 = d > 0 ? std::clamp(NearestInt((x[j + 16] - m) / d), 0, 31) : 0;
          y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
          qh |= ((q0 & 0x10u) >> 4) << j;
          qh |= ((q1 & 0x10u) >> 4) << (j + 16);
        }
        std::memcpy(y[i].qh, &qh, 4);
      }
      return Status::Ok();
    }
    case GgmlType::kQ2_K:
      quant_internal::QuantQ2K(x, static_cast<BlockQ2_K*>(dst), nb);
      return Status::Ok();
    case GgmlType::kQ3_K:
      quant_internal::QuantQ3K(x, static_cast<BlockQ3_K*>(dst), nb);
      return Status::Ok();
    case GgmlType::kQ4_K:
      quant_internal::QuantQ4K(x, static_cast<BlockQ4_K*>(dst), nb);
      return Status::Ok();
    case GgmlType::kQ5_K:
      quant_internal::QuantQ5K(x, static_cast<BlockQ5_K*>(dst), nb);
      return Status::Ok();
    case GgmlType::kQ6_K:
      quant_internal::QuantQ6K(x, static_cast<BlockQ6_K*>(dst), nb);
      return Status::Ok();
    case GgmlType::kIQ4_NL:
      quant_internal::QuantIQ4NL(x, static_cast<BlockIQ4_NL*>(dst), nb);
      return Status::Ok();
    case GgmlType::kIQ4_XS:
      quant_internal::QuantIQ4XS(x, static_cast<BlockIQ4_XS*>(dst), nb);
      return Status::Ok();
    default:
      return Status::Error("quantize: type " + std::string(tr.name) + " is not supported");
  }
}

}  // namespace tlr
