#include "half_reference.h"

#include <cmath>
#include <cstring>

uint16_t to_half_bits(float value, attention::DType dtype) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const uint32_t abs = x & 0x7fffffffu;
  if (dtype == attention::DType::BFloat16) {
    if (abs > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);      // carries to inf
  }
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  if (abs > 0x7f800000u) return sign | 0x7e00u | ((abs >> 13) & 0x3ffu);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (65504 + half an ulp, a tie to odd)
  if (abs < 0x38800000u) {
    // Below 2^-14: a subnormal in units of 2^-24 (the scaling is exact; nearbyint ties to even).
    return sign | static_cast<uint16_t>(std::nearbyint(std::fabs(value) * 16777216.0f));
  }
  uint32_t half = ((abs >> 23) - 112) << 10 | ((abs >> 13) & 0x3ffu);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry bumps the exponent
  return sign | static_cast<uint16_t>(half);
}

float from_half_bits(uint16_t bits, attention::DType dtype) {
  uint32_t x;
  if (dtype == attention::DType::BFloat16) {
    x = static_cast<uint32_t>(bits) << 16;
  } else {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
    if (exponent == 0) {
      const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
      return sign ? -magnitude : magnitude;
    }
    x = exponent == 31 ? sign | 0x7f800000u | mantissa << 13 | (mantissa ? 0x400000u : 0u)
                       : sign | (exponent + 112) << 23 | mantissa << 13;
  }
  float value;
  std::memcpy(&value, &x, sizeof value);
  return value;
}
