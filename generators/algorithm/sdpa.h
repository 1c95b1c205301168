// Scaled dot-product attention as pure Halide definitions: scores -> numerically safe softmax ->
// weighted sum of values. No scheduling calls here; generators/schedule/ decides loop order and
// storage.
//
// Halide dimension 0 is innermost, so the row-major [B, H, S, D] tensors appear as (d, s, h, b).
#pragma once

#include "Halide.h"
#include "algorithm/masks.h"
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
  // Masks and biases; null for plain attention (no masking code at all).
  const MaskInputs* mask = nullptr;
  // Masked attention only: false when v may hold NaN/Inf. P·V then skips zero weights, so a
  // non-finite value at a key a row cannot see never reaches it (0 · NaN would be NaN).
  Halide::Expr values_finite;
};

// Every stage of the computation, named like the math, for the schedule to place.
struct SdpaFuncs {
  AttentionVars vars;
  Halide::Expr head_dim;      // D: schedules may specialize the Q·Kᵀ reduction on it
  Halide::Expr value_dim;     // Dv: schedules specialize their value-feature blocking on it
  Halide::Func values;        // in.v, so a schedule can stage (pack) it
  Halide::RDom r_d;           // over D
  Halide::RDom r_j;           // over Sk (masked: rounded up to whole key blocks, visible ones only)
  Halide::Func q_scaled;      // (d, i, h, b)  q * scale: folds the scale into the smaller operand
  Halide::Func scores;        // (j, i, h, b)  scale * q·k
  Halide::Func logits;        // (j, i, h, b)  scores with masks and biases (-inf: hidden key)
  Halide::Func row_max;       // (i, h, b)     max_j logits
  Halide::Func weights;       // (j, i, h, b)  exp(logits - row_max), unnormalized
  Halide::Func row_sum;       // (i, h, b)     sum_j weights
  Halide::Func weighted_sum;  // (c, i, h, b)  sum_j weights * v
  Halide::Func out;           // (c, i, h, b)  weighted_sum / row_sum
  Halide::Func logsumexp;     // (i, h, b)     row_max + log(row_sum), natural log
  bool masked = false;
  Halide::Expr has_bias;       // masked: whether logits use the bias terms (schedules specialize)
  Halide::Expr values_finite;  // masked: whether P·V may skip its NaN-safe form (same)
};

// The scores after the masks and biases of `m` (see algorithm/masks.h for each piece).
inline Halide::Expr masked_logits(const MaskInputs& m, const Halide::Expr& score,
                                  const AttentionVars& x) {
  using namespace Halide;
  Expr capped = select(m.softcap > 0.0f, apply_softcap(score, m.softcap), score);
  Expr additive = m.additive(x.j, x.i, x.h, x.b);
  Expr biased = capped + alibi_bias(m, x.i, x.j, x.h) + additive;
  Expr tensors_allow = m.allowed(x.j, x.i, x.h, x.b) != 0 && additive != Float(32).min();
  Expr visible = band_visible(m, x.i, x.j) && lengths_visible(m, x.i, x.j, x.b) &&
                 (!m.has_bias || tensors_allow);
  return select(visible, select(m.has_bias, biased, score), Float(32).min());
}

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
  // The key each reduction step reads.
  Expr key;
  if (in.mask == nullptr) {
    f.r_j = RDom(0, in.seq_k, "r_j");
    key = f.r_j;
  } else {
    // Keys in whole blocks, and only blocks that meet the range visible to the row's group.
    const MaskInputs& m = *in.mask;
    const int kb = m.key_block, group = m.query_group;
    f.r_j = RDom(0, (in.seq_k + kb - 1) / kb * kb, "r_j");
    Expr first = i / group * group;
    KeyRange range = visible_keys(m, first, first + group - 1, b, in.seq_k);
    Expr lo = max(range.begin, 0) / kb * kb;
    Expr hi = (range.end + kb - 1) / kb * kb - 1;
    f.r_j.where(range.any_row && f.r_j >= lo && f.r_j <= hi);
    // The clamp never changes a key the predicate lets through; it tells bounds inference (which
    // ignores predicates) that a tile's stages only need keys in its range, so the score and
    // weight tiles shrink with the mask instead of spanning Sk.
    key = clamp(f.r_j, lo, hi);
  }

  f.q_scaled = Func("q_scaled");
  f.q_scaled(d, i, h, b) = in.q(d, i, h, b) * in.scale;

  f.scores = Func("scores");
  f.scores(j, i, h, b) = 0.0f;
  f.scores(j, i, h, b) += f.q_scaled(f.r_d, i, h, b) * in.k(f.r_d, j, kv_head, b);

  f.logits = Func("logits");
  f.masked = in.mask != nullptr;
  f.logits(j, i, h, b) =
      f.masked ? masked_logits(*in.mask, f.scores(j, i, h, b), x) : f.scores(j, i, h, b);
  if (f.masked) {
    f.has_bias = in.mask->has_bias;
    f.values_finite = in.values_finite;
  }

  f.row_max = Func("row_max");
  f.row_max(i, h, b) = Float(32).min();
  f.row_max(i, h, b) = max(f.row_max(i, h, b), f.logits(key, i, h, b));
  // A fully masked row has max -inf; subtracting 0 instead keeps its weights exp(-inf) = 0, not
  // exp(-inf + inf) = NaN.
  Expr row_max = f.row_max(i, h, b);
  Expr shift = f.masked ? select(row_max == Float(32).min(), 0.0f, row_max) : row_max;

  // exp(s - m) = 2^((s - m) * log2(e)); subtracting the max first keeps the rounding of the
  // multiply relative to the (small) distance from the max, not to the logit's magnitude.
  f.weights = Func("weights");
  f.weights(j, i, h, b) = exp2_nonpositive((f.logits(j, i, h, b) - shift) * float(M_LOG2E));

  f.row_sum = Func("row_sum");
  f.row_sum(i, h, b) = 0.0f;
  f.row_sum(i, h, b) += f.weights(key, i, h, b);

  f.weighted_sum = Func("weighted_sum");
  f.weighted_sum(c, i, h, b) = 0.0f;
  Expr weight = f.weights(key, i, h, b);
  Expr term = weight * in.v(c, key, kv_head, b);
  if (f.masked) term = select(in.values_finite, term, select(weight == 0.0f, 0.0f, term));
  f.weighted_sum(c, i, h, b) += term;

  f.out = Func("out");
  Expr row_sum = f.row_sum(i, h, b);
  Expr normalized = f.weighted_sum(c, i, h, b) / row_sum;
  // Masked: a row without any visible key outputs zeros (its sum is exactly 0; a NaN sum is not).
  f.out(c, i, h, b) = f.masked ? select(row_sum == 0.0f, 0.0f, normalized) : normalized;

  f.logsumexp = Func("logsumexp");
  // Halide's log() maps NaN to a finite value: keep a NaN row_sum (a NaN score) visible.
  Expr lse = select(is_nan(row_sum), row_sum, row_max + log(row_sum));
  f.logsumexp(i, h, b) = f.masked ? select(row_sum == 0.0f, Float(32).min(), lse) : lse;
  return f;
}

}  // namespace attention_gen
