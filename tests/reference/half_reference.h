// Reference conversions between fp32 and the half types (Float16, BFloat16), written from the
// formats' definitions: round to nearest even, beyond Float16's range ±inf, NaN stays a quiet NaN
// of the same sign; widening is exact. The conversion kernels are tested against these.
#pragma once

#include <cstdint>

#include "attention/attention.h"

uint16_t to_half_bits(float value, attention::DType dtype);
float from_half_bits(uint16_t bits, attention::DType dtype);
inline float round_to(attention::DType dtype, float value) {
  return dtype == attention::DType::Float32 ? value
                                            : from_half_bits(to_half_bits(value, dtype), dtype);
}
