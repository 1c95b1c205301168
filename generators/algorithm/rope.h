// Rotary position embeddings (RoPE) as pure Halide expressions: each pair of features (x_a, x_b)
// of a query or key at position p is rotated by the angle p·θ_i of its pair i. No scheduling here.
//
// Pairs: GPT-NeoX / Llama ("half-split", HF's rotate_half) pair feature i with i + R/2; GPT-J
// ("interleaved") pairs 2i with 2i + 1. R = rotary_dim <= D; features from R on pass unchanged.
// θ_i = base^(-2i/R) comes in as inv_freq (fp32, as the frameworks compute it), and the angle is
// the fp32 product p·θ_i, also as they compute it; its cosine and sine are evaluated to about one
// ulp (rotation_of), not with a fast approximation.
#pragma once

#include "Halide.h"

namespace attention_gen {

// {cos x, sin x} for an fp32 angle: reduction by π/2 in double (exact enough for any angle below
// 2^24, where positions stay exact in fp32; an fp32 Cody–Waite reduction drifted past ~1e5) and
// Cephes' minimax polynomials on [-π/4, π/4] in fp32. Vectorizes (no table, no libm call).
inline std::pair<Halide::Expr, Halide::Expr> cos_sin(const Halide::Expr& x) {
  using namespace Halide;
  Expr wide = cast<double>(x);
  Expr n = round(wide * Expr(0.63661977236758134308));  // x / (π/2)
  Expr quadrant = cast<int32_t>(n);
  // strict_float: Halide's simplifier may otherwise reassociate the reduction.
  Expr r = strict_float(cast<float>(wide - n * Expr(1.57079632679489661923)));
  Expr r2 = r * r;
  Expr sin_r = r + r * r2 * (-1.6666654611e-1f + r2 * (8.3321608736e-3f + r2 * -1.9515295891e-4f));
  Expr cos_r = 1.0f - 0.5f * r2 +
               r2 * r2 * (4.166664568298827e-2f + r2 * (-1.388731625493765e-3f + r2 * 2.443315711809948e-5f));
  Expr q = quadrant & 3;
  Expr c = select(q == 0, cos_r, q == 1, -sin_r, q == 2, -cos_r, sin_r);
  Expr s = select(q == 0, sin_r, q == 1, cos_r, q == 2, -sin_r, -cos_r);
  return {c, s};
}

// The rotated feature d of a row: x(d) at d, its pair's partner x_partner, the pair's cos/sin.
// `first`: d is the pair's first feature (rotated by -sin), else its second (+sin).
inline Halide::Expr rotated(const Halide::Expr& x_d, const Halide::Expr& x_partner,
                            const Halide::Expr& cos, const Halide::Expr& sin,
                            const Halide::Expr& first) {
  return x_d * cos + Halide::select(first, -x_partner, x_partner) * sin;
}

}  // namespace attention_gen
