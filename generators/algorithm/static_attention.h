// Static attention, out[b] = softmax(W) · X[b]: the weights are a learned [Sq, Sk] matrix, not a
// function of queries and keys, so the softmax runs once for every batch. Pure Halide definitions;
// the product with X is algorithm/linear.h's.
#pragma once

#include "Halide.h"
#include "algorithm/linear.h"
#include "algorithm/sdpa.h"
#include "algorithm/softmax_math.h"

namespace attention_gen {

struct StaticAttentionFuncs {
  Halide::Var j{"j"}, i{"i"};
  Halide::RDom r_j;            // over Sk
  Halide::Func row_max;        // (i)     max_j W(j, i)
  Halide::Func exps;           // (j, i)  exp(W - row_max)
  Halide::Func row_sum;        // (i)     Σ_j exps
  Halide::Func probabilities;  // (j, i)  exps / row_sum: softmax over keys (0 for a row all -inf)
  LinearFuncs product;         // out (c, i, b) = Σ_j probabilities(j, i) · X(c, j, b)
};

// `weight` (j, i) is W [Sq, Sk]; `values` (c, j, b) is X [B, Sk, D] (clamped or padded as the
// schedule's blocks need). A row of W that is all -inf has no key: its output row is zeros.
inline StaticAttentionFuncs static_attention(const Halide::Func& weight, const Halide::Func& values,
                                             const Halide::Expr& seq_k) {
  using namespace Halide;
  StaticAttentionFuncs f;
  const Var j = f.j, i = f.i;
  f.r_j = RDom(0, seq_k, "r_j");
  f.row_max = Func("row_max");
  f.row_max(i) = Float(32).min();
  f.row_max(i) = max(f.row_max(i), weight(f.r_j, i));
  f.exps = Func("exps");
  f.exps(j, i) = exp2_nonpositive((weight(j, i) - softmax_shift(f.row_max(i))) * float(M_LOG2E));
  f.row_sum = Func("row_sum");
  f.row_sum(i) = 0.0f;
  f.row_sum(i) += f.exps(f.r_j, i);
  f.probabilities = Func("probabilities");
  f.probabilities(j, i) = normalized_output(f.exps(j, i), f.row_sum(i), /*masked=*/true);

  Var k, m, b, n, c;
  Func x("probabilities_of_batch"), w("values_as_weight"), zero("no_bias");
  x(k, m, b) = f.probabilities(k, m);
  w(k, n, b) = values(n, k, b);
  zero(n) = 0.0f;
  f.product = linear_product(x, w, zero, {seq_k});
  return f;
}

}  // namespace attention_gen
