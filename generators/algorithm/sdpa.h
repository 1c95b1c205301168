// Scaled dot-product attention as pure Halide definitions: scores -> numerically safe softmax ->
// weighted sum of values. No scheduling calls here; generators/schedule/ decides loop order and
// storage.
//
// Halide dimension 0 is innermost, so the row-major [B, H, S, D] tensors appear as (d, s, h, b).
#pragma once

#include "Halide.h"
#include "algorithm/softmax_math.h"

namespace attention_gen {

// Variables shared by every attention Func so schedules can name loops.
struct AttentionVars {
  Halide::Var c{"c"};  // value feature (0..Dv)
  Halide::Var d{"d"};  // query/key feature (0..D)
  Halide::Var i{"i"};  // query position (0..Sq)
  Halide::Var j{"j"};  // key position (0..Sk)
  Halide::Var h{"h"};  // query head (0..H)
  Halide::Var b{"b"};  // batch (0..B)
};

// The inputs of one SDPA instance. Extents are Exprs so the same math serves any shape.
struct SdpaInputs {
  Halide::Func q;  // (d, i, h, b)
  Halide::Func k;  // (d, j, kv_head, b)
  Halide::Func v;  // (c, j, kv_head, b)
  Halide::Expr scale;
  Halide::Expr head_dim;      // D
  Halide::Expr value_dim;     // Dv
  Halide::Expr seq_k;         // Sk
  Halide::Expr heads_per_kv;  // H / Hkv (grouped-query attention)
};

// Every stage of the computation, named like the math, for the schedule to place.
struct SdpaFuncs {
  AttentionVars vars;
  Halide::Expr head_dim;      // D: schedules may specialize the Q·Kᵀ reduction on it
  Halide::Expr value_dim;     // Dv: schedules specialize their value-feature blocking on it
  Halide::Func values;        // in.v, so a schedule can stage (pack) it
  Halide::RDom r_d;           // over D
  Halide::RDom r_j;           // over Sk
  Halide::Func q_scaled;      // (d, i, h, b)  q * scale: folds the scale into the smaller operand
  Halide::Func scores;        // (j, i, h, b)  scale * q·k
  Halide::Func row_max;       // (i, h, b)     max_j scores
  Halide::Func weights;       // (j, i, h, b)  exp(scores - row_max), unnormalized
  Halide::Func row_sum;       // (i, h, b)     sum_j weights
  Halide::Func weighted_sum;  // (c, i, h, b)  sum_j weights * v
  Halide::Func out;           // (c, i, h, b)  weighted_sum / row_sum
  Halide::Func logsumexp;     // (i, h, b)     row_max + log(row_sum), natural log
};

inline SdpaFuncs scaled_dot_product(const SdpaInputs& in) {
  using namespace Halide;
  SdpaFuncs f;
  const AttentionVars& x = f.vars;
  Var c = x.c, d = x.d, i = x.i, j = x.j, h = x.h, b = x.b;
  Expr kv_head = h / in.heads_per_kv;

  f.head_dim = in.head_dim;
  f.value_dim = in.value_dim;
  f.values = in.v;
  f.r_d = RDom(0, in.head_dim, "r_d");
  f.r_j = RDom(0, in.seq_k, "r_j");

  f.q_scaled = Func("q_scaled");
  f.q_scaled(d, i, h, b) = in.q(d, i, h, b) * in.scale;

  f.scores = Func("scores");
  f.scores(j, i, h, b) = 0.0f;
  f.scores(j, i, h, b) += f.q_scaled(f.r_d, i, h, b) * in.k(f.r_d, j, kv_head, b);

  f.row_max = Func("row_max");
  f.row_max(i, h, b) = Float(32).min();
  f.row_max(i, h, b) = max(f.row_max(i, h, b), f.scores(f.r_j, i, h, b));

  // exp(s - m) = 2^((s - m) * log2(e)); subtracting the max first keeps the rounding of the
  // multiply relative to the (small) distance from the max, not to the logit's magnitude.
  f.weights = Func("weights");
  f.weights(j, i, h, b) =
      exp2_nonpositive((f.scores(j, i, h, b) - f.row_max(i, h, b)) * float(M_LOG2E));

  f.row_sum = Func("row_sum");
  f.row_sum(i, h, b) = 0.0f;
  f.row_sum(i, h, b) += f.weights(f.r_j, i, h, b);

  f.weighted_sum = Func("weighted_sum");
  f.weighted_sum(c, i, h, b) = 0.0f;
  f.weighted_sum(c, i, h, b) += f.weights(f.r_j, i, h, b) * in.v(c, f.r_j, kv_head, b);

  f.out = Func("out");
  f.out(c, i, h, b) = f.weighted_sum(c, i, h, b) / f.row_sum(i, h, b);

  f.logsumexp = Func("logsumexp");
  // Halide's log() maps NaN to a finite value: keep a NaN row_sum (a NaN score) visible.
  Expr row_sum = f.row_sum(i, h, b);
  f.logsumexp(i, h, b) = select(is_nan(row_sum), row_sum, f.row_max(i, h, b) + log(row_sum));
  return f;
}

}  // namespace attention_gen
