// float32 -> bfloat16 by hand, for the generators that round to bfloat16 (the convert kernels,
// the native bf16 prefill's softmax weights). No scheduling here.
#pragma once

#include "Halide.h"

namespace attention_gen {

// `value` (float32) rounded to bfloat16, to nearest even; NaN stays NaN (quiet, sign and high
// payload kept). By hand, in integer operations: Halide 21's conversion is emulated on x86 even
// with avx512_zen4 (no vcvtneps2bf16), rounds a NaN's bits like a number's (NaNs became ±inf or
// -0), and evaluates its operand without fast-math, which kept a softmax polynomial from fusing
// into FMAs.
inline Halide::Expr round_to_bfloat16(const Halide::Expr& value) {
  using namespace Halide;
  Expr bits = reinterpret<uint32_t>(value);
  Expr is_nan = (bits & 0x7fffffff) > 0x7f800000;
  Expr nan16 = (bits >> 16) | 0x40;
  Expr number16 = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
  return reinterpret(BFloat(16), cast<uint16_t>(select(is_nan, nan16, number16)));
}

}  // namespace attention_gen
