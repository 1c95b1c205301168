// Attention masks and score biases as pure Halide expressions, applied to the scaled scores before
// the softmax. Each piece stands alone; algorithm/sdpa.h composes the ones a call asks for. No
// scheduling here.
//
// Positions: query i in [0, Sq), key j in [0, Sk). Every structural mask is a band around a
// diagonal diag(i) = i + diag_offset (0 for top-left alignment, Sk - Sq for bottom-right), which is
// what lets a kernel bound its key loop per block of queries instead of testing every key.
#pragma once

#include <functional>

#include "Halide.h"
#include "algorithm/softmax_math.h"

namespace attention_gen {

// Everything a masked call may carry. The runtime fills neutral values for the pieces a call does
// not use (all-true boolean mask, zero additive mask, zero slopes, softcap 0), so one kernel serves
// every combination.
struct MaskInputs {
  Halide::Expr diag_offset;   // diag(i) = i + diag_offset
  Halide::Expr band_back;     // key j visible only if j >= diag(i) - band_back
  Halide::Expr band_forward;  // ... and j <= diag(i) + band_forward (causal: 0)
  Halide::Func key_length;    // (b): keys [key_length, Sk) are padding
  Halide::Func query_length;  // (b): query rows [query_length, Sq) output zeros
  // True when any of the score terms below is present. When false, softcap, slopes and both mask
  // tensors are neutral, and the schedule may specialize them away.
  Halide::Expr has_bias;
  Halide::Func allowed;      // (j, i, h, b) uint8: 0 = may not attend (boolean mask)
  Halide::Func additive;     // (j, i, h, b) float added to the score; -inf also hides the key
  Halide::Func alibi_slope;  // (h): score -= slope * |j - diag(i)|
  Halide::Expr softcap;      // > 0: score = softcap * tanh(score / softcap), before the biases
  // A user mod (attention/generator/mod.h), absent when null. score_mod maps the scaled score
  // before everything above; mask_mod hides the keys where it is false, beside the masks above.
  // Arguments: (score,) query i, key j, head h, batch b.
  std::function<Halide::Expr(const Halide::Expr&, const Halide::Expr&, const Halide::Expr&,
                             const Halide::Expr&, const Halide::Expr&)>
      score_mod;
  std::function<Halide::Expr(const Halide::Expr&, const Halide::Expr&, const Halide::Expr&,
                             const Halide::Expr&)>
      mask_mod;
  // With mask_mod: mod_keys (g, h, b) = Tuple(first, last), the first and last key that a row of
  // query group g (rows [g · query_group, (g + 1) · query_group)) may see through mask_mod, from a
  // scan of every row and key (algorithm/sdpa.h: mod_key_scan; first > last when none), in the
  // kernel or read from an input (mod_sdpa's key_ranges). Kernels skip the key splits outside it;
  // only a range read from an input can bound the loop over splits (combine_splits).
  Halide::Func mod_keys;
  // Every row is in query group 0 (a kernel that runs for Sq <= query_group only, decode): the
  // group's range is then one value per (head, batch).
  bool single_group = false;
  // With a range read from an input (prefill): gather each tile's visited splits one at a time
  // (SdpaFuncs::split_gathered), so a CPU tile computes no other split. The GPU schedule launches
  // every split as a block and leaves this off: a hidden split's key loops are empty.
  bool gather_mod_splits = true;
  // Reductions for query i run over the keys visible to any row of its group of query_group
  // consecutive rows, in whole blocks of key_block keys. The extra keys are masked to -inf, so
  // results do not depend on these; schedules set them to their tile sizes, which makes the key
  // range uniform over a tile and lets fully masked key blocks be skipped.
  int query_group = 1;
  int key_block = 1;
  // The keys of one register block of the prefill's Q·Kᵀ (grouped stages: logits are computed in
  // whole blocks of them).
  int score_keys = 1;
};

// The causal/sliding-window band: j in [diag(i) - back, diag(i) + forward].
inline Halide::Expr band_visible(const MaskInputs& m, const Halide::Expr& i,
                                 const Halide::Expr& j) {
  Halide::Expr diag = i + m.diag_offset;
  return j >= diag - m.band_back && j <= diag + m.band_forward;
}

// Padding: the key is one of the batch's valid keys and the query one of its valid rows.
inline Halide::Expr lengths_visible(const MaskInputs& m, const Halide::Expr& i,
                                    const Halide::Expr& j, const Halide::Expr& b) {
  return j < m.key_length(b) && i < m.query_length(b);
}

// cap · tanh(score / cap): bounds logits smoothly to (-cap, cap).
inline Halide::Expr apply_softcap(const Halide::Expr& score, const Halide::Expr& cap) {
  return cap * tanh_vectorizable(score / cap);
}

// ALiBi: a linear penalty in the distance from the diagonal, per head.
inline Halide::Expr alibi_bias(const MaskInputs& m, const Halide::Expr& i, const Halide::Expr& j,
                               const Halide::Expr& h) {
  return -m.alibi_slope(h) * Halide::cast<float>(Halide::abs(j - (i + m.diag_offset)));
}

// The keys that rows [first, last] of batch b can see through the band and the key length: the
// half-open range [begin, end), if any row is below the query length (monotone in i, so the end
// rows decide it). Kept as separate comparisons so a kernel can turn them into loop bounds.
struct KeyRange {
  Halide::Expr begin, end, any_row;
};
inline KeyRange visible_keys(const MaskInputs& m, const Halide::Expr& first,
                             const Halide::Expr& last, const Halide::Expr& b,
                             const Halide::Expr& seq_k) {
  using Halide::min;
  return {first + m.diag_offset - m.band_back,
          min(min(last + m.diag_offset + m.band_forward + 1, m.key_length(b)), seq_k),
          first < m.query_length(b)};
}

}  // namespace attention_gen
