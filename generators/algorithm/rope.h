// Rotary position embeddings (RoPE) as pure Halide expressions: each pair of features (x_a, x_b)
// of a query or key at position p is rotated by the angle p·θ_i of its pair i. No scheduling here.
//
// Pairs: GPT-NeoX / Llama ("half-split", HF's rotate_half) pair feature i with i + R/2; GPT-J
// ("interleaved") pairs 2i with 2i + 1. R = rotary_dim <= D; features from R on pass unchanged.
// θ_i = base^(-2i/R) comes in as inv_freq (fp32, as the frameworks compute it), and the angle is
// the fp32 product p·θ_i, also as they compute it; its cosine and sine are evaluated to about one
// ulp (rotation_of), not with a fast approximation.
#pragma once

#include <string>

#include "Halide.h"

namespace attention_gen {

// {cos x, sin x} for an fp32 angle: reduction by π/2 in double (exact enough for any angle below
// 2^24, where positions stay exact in fp32; an fp32 Cody–Waite reduction drifted past ~1e5) and
// Cephes' minimax polynomials on [-π/4, π/4] in fp32. Vectorizes (no table, no libm call).
inline std::pair<Halide::Expr, Halide::Expr> cos_sin(const Halide::Expr& x) {
  using namespace Halide;
  // The double constants 2/π and π/2 as sums of floats (each part a float, so exact in any
  // backend's source: Halide 21's OpenCL C prints a double immediate through its float bits, which
  // cost the reduction its accuracy past ~1e3). π/2's parts have 24 bits each, so n times each
  // (n < 2^24) is exact in double; the sum keeps 72 bits of π/2.
  const double two_over_pi = 0.63661977236758134308, half_pi = 1.57079632679489661923;
  const auto part = [](double value, int k) {
    double rest = value;
    float p = 0.0f;
    for (int i = 0; i <= k; ++i) {
      p = static_cast<float>(rest);
      rest -= static_cast<double>(p);
    }
    return cast<double>(Expr(p));
  };
  Expr wide = cast<double>(x);
  // strict_float: Halide's simplifier may otherwise reassociate the reduction or fold the parts.
  Expr n = strict_float(round(wide * part(two_over_pi, 0) + wide * part(two_over_pi, 1)));
  Expr quadrant = cast<int32_t>(n);
  Expr r = strict_float(cast<float>(((wide - n * part(half_pi, 0)) - n * part(half_pi, 1)) -
                                    n * part(half_pi, 2)));
  Expr r2 = r * r;
  Expr sin_r = r + r * r2 * (-1.6666654611e-1f + r2 * (8.3321608736e-3f + r2 * -1.9515295891e-4f));
  Expr cos_r =
      1.0f - 0.5f * r2 +
      r2 * r2 *
          (4.166664568298827e-2f + r2 * (-1.388731625493765e-3f + r2 * 2.443315711809948e-5f));
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

// The rows of x (d, s, h, b) with their pairs rotated; `cos_sin` (i, s, b) is the Tuple {cos, sin}
// of pair i at row s. Every piece is a Func for the schedule to place (schedule/rope.h).
struct RotatedRows {
  Halide::Func out;  // (d, s, h, b): the rotated rows (a select of the two pairings)
  // Interleaved (GPT-J): pair i is features 2i and 2i + 1, read with stride-2 loads
  // (deinterleaved); pairs (i, s, h, b) is the Tuple of its two rotated features, which out
  // interleaves back by d's parity.
  Halide::Func pairs;
  // Half-split (NeoX, Llama): pair i is features i and i + R/2. split_row (d, s, h, b) is the row,
  // then its two halves overwritten by update definitions over the pairs r (dense loads of both
  // halves; no clamped lanes, which became gathers).
  Halide::Func split_row;
  Halide::RDom r;
  Halide::Expr interleaved;  // which pairing out takes (schedules specialize out on it)
};

// Feature d of row (s, h, b) of x rotated through rot's pieces: what rot.out holds. The select on
// d < R keeps bounds inference from asking pairs (and so x) past the rotated features.
inline Halide::Expr rotated_feature(const RotatedRows& rot, const Halide::Func& x,
                                    const Halide::Expr& rotary_dim, const Halide::Expr& d,
                                    const Halide::Expr& s, const Halide::Expr& h,
                                    const Halide::Expr& b) {
  using Halide::select;
  const Halide::Expr in_pairs =
      select(d % 2 == 0, rot.pairs(d / 2, s, h, b)[0], rot.pairs(d / 2, s, h, b)[1]);
  return select(rot.interleaved, select(d < rotary_dim, in_pairs, x(d, s, h, b)),
                rot.split_row(d, s, h, b));
}

inline RotatedRows rotate_rows(const Halide::Func& x, const Halide::Func& cos_sin,
                               const Halide::Expr& rotary_dim, const Halide::Expr& interleaved,
                               const std::string& name) {
  using namespace Halide;
  Var d("d"), s("s"), h("h"), b("b"), i("i");
  RotatedRows rot;
  rot.interleaved = interleaved;
  const Expr half = rotary_dim / 2;
  const Expr cos_i = cos_sin(i, s, b)[0], sin_i = cos_sin(i, s, b)[1];
  const Expr x_even = x(2 * i, s, h, b), x_odd = x(2 * i + 1, s, h, b);
  rot.pairs = Func(name + "_pairs");
  rot.pairs(i, s, h, b) = {rotated(x_even, x_odd, cos_i, sin_i, true),
                           rotated(x_odd, x_even, cos_i, sin_i, false)};
  rot.split_row = Func(name + "_split_row");
  rot.split_row(d, s, h, b) = x(d, s, h, b);
  rot.r = RDom(0, half, name + "_r");
  const RVar r = rot.r.x;
  const Expr lo = x(r, s, h, b), hi = x(r + half, s, h, b);
  const Expr cos_r = cos_sin(r, s, b)[0], sin_r = cos_sin(r, s, b)[1];
  rot.split_row(r, s, h, b) = rotated(lo, hi, cos_r, sin_r, true);
  rot.split_row(r + half, s, h, b) = rotated(hi, lo, cos_r, sin_r, false);
  rot.out = Func(name);
  rot.out(d, s, h, b) = rotated_feature(rot, x, rotary_dim, d, s, h, b);
  return rot;
}

}  // namespace attention_gen
