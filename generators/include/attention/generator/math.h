// Vectorizable elementwise math for attention kernels and user mods (attention/generator/mod.h):
// exp2 of non-positive arguments and tanh. Halide's exp() and tanh() lower to scalar libm calls.
#pragma once

#include "Halide.h"

namespace attention::math {

// 2^x for x <= 0 (the softmax only exponentiates score - row_max), as a degree-6 polynomial on the
// fraction plus an exponent-field shift. Halide's exp() lowers to scalar libm calls; this
// vectorizes. Relative error ~2e-7 (Cephes exp2f coefficients), far inside the fp32 test tolerance.
// x <= -127 (including -inf) yields exactly 0, so masked scores never produce NaN; a NaN stays NaN
// (checked with is_nan, which Halide evaluates strictly: max() alone may drop a NaN operand).
//
// coarse: a degree-4 polynomial instead (relative error 2.7e-6, minimax on [-0.5, 0.5]), two FMAs
// fewer, for weights that are rounded to bfloat16 (2^-9) anyway.
inline Halide::Expr exp2_nonpositive(const Halide::Expr& x_in, bool coarse = false) {
  using namespace Halide;
  Expr x = max(x_in, -127.0f);
  // coarse: round to nearest even by the 1.5 · 2^23 shift (exact for |x| < 2^22; strict, or the
  // simplifier folds it away), two adds where round() on 16 lanes takes two 8-lane vroundps.
  const float shifter = 12582912.0f;
  Expr n = coarse ? strict_float((x + shifter) - shifter) : round(x);  // f in [-0.5, 0.5]
  Expr f = x - n;
  Expr p;
  if (coarse) {
    p = 9.570101276040077e-3f;
    p = p * f + 5.591786280274391e-2f;
    p = p * f + 2.402474433183670e-1f;
    p = p * f + 6.931217908859253e-1f;
    p = p * f + 9.999992847442627e-1f;
  } else {
    p = 1.535336188319500e-4f;
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
  }
  // n in [-127, 0]: biased exponent n + 127 in [0, 127]; 0 encodes +0.0f, which zeroes the product.
  Expr two_to_n = reinterpret<float>((cast<int32_t>(n) + 127) << 23);
  return select(is_nan(x_in), x_in, p * two_to_n);
}

// tanh(x) from exp2_nonpositive, vectorizable (Halide's tanh() is a scalar libm call): for |x| >=
// 1/8, (1 - e) / (1 + e) with e = exp(-2|x|) (relative error < 1e-6 there); below, where 1 - e
// cancels, its Taylor series to x^7 (truncation < 2e-9 relative). Keeps sign, maps ±inf to ±1 and
// NaN to NaN.
inline Halide::Expr tanh_vectorizable(const Halide::Expr& x) {
  using namespace Halide;
  Expr a = abs(x);
  Expr e = exp2_nonpositive(a * float(-2.0 * M_LOG2E));
  Expr large = (1.0f - e) / (1.0f + e);
  Expr a2 = a * a;
  Expr small = a * (1.0f + a2 * (-1.0f / 3 + a2 * (2.0f / 15 + a2 * (-17.0f / 315))));
  Expr t = select(a < 0.125f, small, large);
  return select(x < 0.0f, -t, t);
}

}  // namespace attention::math
