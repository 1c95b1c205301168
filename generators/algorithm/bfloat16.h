// Half-precision conversions by hand, for the generators: float32 -> bfloat16 rounding (the convert
// kernels, the native bf16 prefill's softmax weights), and the GPU kernels' conversions between
// float32 and the raw bits of a float16 or bfloat16. No scheduling here.
#pragma once

#include "Halide.h"

namespace attention_gen {

// `value` (float32) rounded to bfloat16, to nearest even; NaN stays NaN (quiet, sign and high
// payload kept), as UInt(16) bits. By hand, in integer operations: Halide 21's conversion is
// emulated on x86 even with avx512_zen4 (no vcvtneps2bf16), rounds a NaN's bits like a number's
// (NaNs became ±inf or -0), and evaluates its operand without fast-math, which kept a softmax
// polynomial from fusing into FMAs.
inline Halide::Expr bfloat16_bits_of(const Halide::Expr& value) {
  using namespace Halide;
  Expr bits = reinterpret<uint32_t>(value);
  Expr is_nan = (bits & 0x7fffffff) > 0x7f800000;
  Expr nan16 = (bits >> 16) | 0x40;
  Expr number16 = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
  return cast<uint16_t>(select(is_nan, nan16, number16));
}

// The same as a BFloat(16) value.
inline Halide::Expr round_to_bfloat16(const Halide::Expr& value) {
  return Halide::reinterpret(Halide::BFloat(16), bfloat16_bits_of(value));
}

// GPU kernels take float16 and bfloat16 tensors as their raw bits (UInt(16)) and convert them in
// integer operations: OpenCL C loads `half` only with cl_khr_fp16 (PoCL on x86 has none), and
// Halide 21's CUDA backend crashed LLVM on bfloat16. CPU kernels keep the half types.
inline Halide::Type stored_type(const Halide::Type& type, const Halide::Target& target) {
  const bool half = type.is_float() && type.bits() == 16;  // float16 or bfloat16
  return half && target.has_gpu_feature() ? Halide::UInt(16) : type;
}

// The float32 value of `bits`, a `half` (Float(16) or BFloat(16)) as UInt(16) bits: exact, ±inf
// kept, float16 subnormals included; a NaN keeps its sign and payload (shifted up), and float16's
// come out quiet, as F16C's vcvtph2ps makes them.
inline Halide::Expr half_bits_to_float(const Halide::Expr& bits, const Halide::Type& half) {
  using namespace Halide;
  Expr b = cast<uint32_t>(bits);
  if (half.is_bfloat()) return reinterpret<float>(b << 16);
  Expr sign = (b & 0x8000) << 16;
  Expr magnitude = b & 0x7fff;                                         // exponent and mantissa
  Expr normal = (magnitude << 13) + cast<uint32_t>((127 - 15) << 23);  // exponent rebiased
  Expr special = (magnitude << 13) | select(magnitude > 0x7c00, cast<uint32_t>(0x7fc00000),
                                            cast<uint32_t>(0x7f800000));  // NaN, inf
  // Subnormal (and zero): magnitude · 2^-24, exact in float32.
  Expr tiny = reinterpret<uint32_t>(cast<float>(magnitude) * (1.0f / 16777216.0f));
  return reinterpret<float>(sign |
                            select(magnitude >= 0x7c00, special, magnitude < 0x400, tiny, normal));
}

// `value` (float32) rounded to `half` (Float(16) or BFloat(16)), to nearest even, as UInt(16)
// bits, with the CPU convert kernels' results: beyond float16's range ±inf, NaN a quiet NaN with
// the sign and high payload kept.
inline Halide::Expr float_to_half_bits(const Halide::Expr& value, const Halide::Type& half) {
  using namespace Halide;
  if (half.is_bfloat()) return bfloat16_bits_of(value);
  Expr bits = reinterpret<uint32_t>(value);
  Expr sign = (bits >> 16) & 0x8000;
  Expr a = bits & 0x7fffffff;
  Expr nan16 = 0x7e00 | ((a >> 13) & 0x3ff);
  // Normal results (|x| >= 2^-14): exponent rebiased, mantissa rounded to 10 bits (a carry may
  // reach the exponent, up to inf: correct).
  Expr rebiased = a - cast<uint32_t>((127 - 15) << 23);
  Expr normal16 = (rebiased + 0xfff + ((rebiased >> 13) & 1)) >> 13;
  // Subnormal results: |x| · 2^24 (exact) rounded to an integer, ties to even (1024 is the
  // smallest normal's bits).
  Expr tiny16 = cast<uint32_t>(round(reinterpret<float>(a) * 16777216.0f));
  Expr magnitude = select(a > 0x7f800000, nan16, a >= 0x47800000, cast<uint32_t>(0x7c00),
                          a >= 0x38800000, normal16, tiny16);
  return cast<uint16_t>(sign | magnitude);
}

}  // namespace attention_gen
