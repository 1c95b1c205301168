// Scaled dot-product attention as pure Halide definitions: scores -> numerically safe softmax ->
// weighted sum of values. No scheduling calls here; generators/schedule/ decides loop order and
// storage.
//
// Halide dimension 0 is innermost, so the row-major [B, H, S, D] tensors appear as (d, s, h, b).
#pragma once

#include <functional>
#include <vector>

#include "Halide.h"
#include "algorithm/bfloat16.h"
#include "algorithm/masks.h"
#include "algorithm/rope.h"
#include "algorithm/softmax_math.h"

namespace attention_gen {

// Variables shared by every attention Func so schedules can name loops.
struct AttentionVars {
  Halide::Var c{"c"};          // value feature (0..Dv)
  Halide::Var d{"d"};          // query/key feature (0..D)
  Halide::Var i{"i"};          // query position (0..Sq)
  Halide::Var j{"j"};          // key position (0..Sk)
  Halide::Var h{"h"};          // query head (0..H)
  Halide::Var b{"b"};          // batch (0..B)
  Halide::Var s{"s"};          // key split
  Halide::Var p{"p"};          // bf16_pairs: the feature (Q·Kᵀ) or key (P·V) within a pair
  Halide::Var g{"mod_group"};  // mask_mod's scan and split gathering: the query group
  Halide::Var group_row{"group_row"};  // split gathering: the row within its query group
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
  Halide::Expr query_rows;    // Sq, where schedules may specialize on it (undefined elsewhere)
  // Masks and biases; null for plain attention (no masking code at all).
  const MaskInputs* mask = nullptr;
  // With masks or hides_keys: false when v may hold NaN/Inf. P·V then skips zero weights, so a
  // non-finite value at a key a row cannot see never reaches it (0 · NaN would be NaN).
  Halide::Expr values_finite;
  // The pair score the softmax starts from: Σ_d score_term(scale·q_d, k_d, d), by default the
  // product (scale · q·k). Other forms: the squared distance (kernel regression), w_d·tanh(q + k)
  // (additive attention); they pass scale 1. logit_of_score, if set, maps the score to the logit,
  // the log of the pair's unnormalized weight (-inf: weight 0, so set hides_keys).
  std::function<Halide::Expr(const Halide::Expr&, const Halide::Expr&, const Halide::Expr&)>
      score_term;
  std::function<Halide::Expr(const Halide::Expr&)> logit_of_score;
  bool hides_keys = false;
  // Run-time choices inside logit_of_score (a kernel picked by an input): the schedule gives the
  // logits one version per condition, so a call computes only the form it picked.
  std::vector<Halide::Expr> logit_cases;
  // Keys per split (required): the keys are reduced split by split, each split yielding its own
  // (out, logsumexp), which a logsumexp-weighted sum combines (split-KV / online softmax over key
  // blocks; a split of >= Sk keys is one pass). Masked: a multiple of MaskInputs::key_block.
  Halide::Expr key_split;
  // GPU: features in blocks of this many (D rounded up, q and k read as zeros past D; r_d is then
  // two-dimensional, r_d.x within a block and r_d.y the block), so the schedule stages and loads
  // whole blocks of features without a tail. 0: r_d spans exactly D (the CPU schedules).
  int feature_block = 0;
  // bfloat16 q, k and v (CPUs with AVX-512 BF16): products summed two at a time in fp32 (x86
  // vdpbf16ps: a pair of features per lane for Q·Kᵀ, a pair of keys for P·V). q is not
  // pre-scaled (a scaled q would be rounded to bfloat16 again): the scale multiplies the score.
  // The softmax weights are rounded to bfloat16 for P·V (FlashAttention's P); the row sums, and
  // so logsumexp, add the fp32 weights. Needs an even D and an even key_split; keys past Sk get
  // weight 0 against v read as zeros there.
  bool bf16_pairs = false;
  // Row statistics (max, sum) over whole splits, keys outside the reduction's predicate selected
  // out, so schedules can vectorize them along keys (CPU decode; prefill vectorizes them across
  // rows).
  bool whole_key_stats = false;
  // With whole_key_stats and masks: P·V too runs over every key of the split, without r_j's
  // predicate (SdpaFuncs::r_pv). Keys past a sequence's end are then read, so this suits a paged
  // cache whose runtime points them at a row the call reads anyway.
  bool whole_split_pv = false;
  // CPU: out is one Tuple over (c, i, h, b), the output and the row's logsumexp at every feature,
  // so a single loop nest writes both (the runtime's logsumexp view has a stride-0 feature
  // dimension). A separate logsumexp fused to out's loops (compute_with) made Halide's loop
  // trimming re-simplify each tile's whole body under the fusion's guards: ten times the
  // generation time of a masked prefill (commit body). GPU: out and logsumexp apart.
  bool stats_in_out = false;
  // Rotary embeddings fused in (undefined without): q and k are rotated_q.out and rotated_k.out,
  // both reading rope_table (pair, key position, b), the {cos, sin} of each pair at each key
  // position (queries read the rows of their own positions). Schedules place all three.
  RotatedRows rotated_q, rotated_k;
  Halide::Func rope_table;
};

// Every stage of the computation, named like the math, for the schedule to place.
struct SdpaFuncs {
  AttentionVars vars;
  Halide::Expr head_dim;      // D: schedules may specialize the Q·Kᵀ reduction on it
  Halide::Expr heads_per_kv;  // H / Hkv: decode work items cover a kv head's query heads
  Halide::Expr value_dim;     // Dv: schedules specialize their value-feature blocking on it
  Halide::Expr query_rows;    // Sq (undefined where the generator does not give it)
  Halide::Func keys;          // in.k, so a schedule can stage it
  Halide::Func values;        // in.v, so a schedule can stage (pack) it
  // bf16_pairs: k and v regrouped so that a pair (two features of a key, the values of two keys
  // at one feature) is 32 contiguous bits: key_pairs (p, j, d/2, kv_head, b) = k(2·(d/2) + p, j),
  // value_pairs (p, c, j/2, kv_head, b) = v(c, 2·(j/2) + p). Schedules compute them per head.
  Halide::Func key_pairs, value_pairs;
  Halide::RDom r_pairs;  // bf16_pairs: P·V over (key in pair, pair) of a split
  Halide::RDom r_d;      // over D (feature_block: over (feature in block, block))
  Halide::RDom r_j;      // over Sk (masked: rounded up to whole key blocks, visible ones only)
  // P·V's keys: r_j, or every key of the split (SdpaInputs::whole_split_pv: whole_split_pv).
  Halide::RDom r_pv;
  bool whole_split_pv = false;
  Halide::Func q_scaled;  // (d, i, h, b)  q * scale: folds the scale into the smaller operand
  Halide::Func scores;    // (j, i, h, b)  scale * q·k
  Halide::Func logits;    // (j, i, h, b)  scores with masks and biases (-inf: hidden key)
  // Per split s: each reduces over that split's keys only.
  Halide::Func row_max;        // (s, i, h, b)     max_j logits
  Halide::Func weights;        // (j, s, i, h, b)  exp(logits - row_max), unnormalized
  Halide::Func weights_bf16;   // (j, s, i, h, b)  bf16_pairs: the weights P·V takes, rounded
  Halide::Func row_sum;        // (s, i, h, b)     sum_j weights
  Halide::Func weighted_sum;   // (c, s, i, h, b)  sum_j weights * v
  Halide::Func split_out;      // (c, s, i, h, b)  the split's own normalized output
  Halide::Func split_lse;      // (s, i, h, b)     the split's own logsumexp (-inf: no visible key)
  Halide::Func split_result;   // (c, s, i, h, b)  Tuple(split_out, split_lse)
  Halide::Func lse_max;        // (i, h, b)        max_s split_lse
  Halide::Func split_weight;   // (s, i, h, b)     exp(split_lse - lse_max)
  Halide::Func weight_total;   // (i, h, b)        sum_s split_weight
  Halide::Func out_total;      // (c, i, h, b)     sum_s split_weight * split_out
  Halide::RDom r_s;            // over the splits
  Halide::Func out;            // (c, i, h, b)     out_total / weight_total
  Halide::Func logsumexp;      // (i, h, b)        lse_max + log(weight_total), natural log
  // SdpaInputs::stats_in_out: out is Tuple(out_total / weight_total, the row's logsumexp) and
  // logsumexp is undefined.
  bool stats_in_out = false;
  Halide::Expr key_split;      // SdpaInputs::key_split
  bool masked = false;         // MaskInputs given (masks.h)
  bool hides_keys = false;     // some logits may be -inf (masks, or a score form with zero weights)
  bool custom_logits = false;  // logits are more than the scores: worth computing once
  std::vector<Halide::Expr> logit_cases;  // SdpaInputs::logit_cases
  bool whole_splits = false;   // r_j has no predicate: every split reduces over key_split keys
  Halide::RDom r_stats;        // keys of row_max and row_sum: r_j, or whole splits (whole_stats)
  bool whole_stats = false;    // r_stats has no predicate
  bool dot_score = true;       // the score is q·k (schedules unroll its FMA chain for common D)
  bool bf16_pairs = false;     // SdpaInputs::bf16_pairs
  Halide::Expr has_bias;       // masked: whether logits use the bias terms (schedules specialize)
  Halide::Expr values_finite;  // hides_keys: whether P·V may skip its NaN-safe form (same)
  // mask_mod's scan (mod_key_scan), undefined without one: mod_key_seen (j, g, h, b) whether a
  // row of query group g sees key j, mod_key_range (g, h, b) the first and last such key.
  Halide::Func mod_key_seen, mod_key_range;
  Halide::RDom r_mod_rows;  // mod_key_seen's rows of the group
  Halide::RDom r_mod_keys;  // mod_key_range's keys
  // With mask_mod (prefill): split_gathered (c, s, group_row, g, h, b), the split results of
  // query group g, copied in split by split over r_visited (the splits that meet the group's keys)
  // and (0, -inf) elsewhere: a schedule that computes split_result inside r_visited computes no
  // other split (bounds inference cannot narrow a split range that comes from the scan's values).
  Halide::Func split_gathered;
  Halide::RDom r_visited;
  RotatedRows rotated_q, rotated_k;  // SdpaInputs' fused rotary embeddings
  Halide::Func rope_table;
  // Grouped (prefill with a mask_mod range read from an input, split_gathered): the per-split
  // stages, scores through split_result, index rows by query group, (..., i, g, h, b) for query
  // g · query_group + i, and logits and weights are (j, s, i, g, h, b), each an update over the
  // keys its group may see in the split (r_logit_keys in whole blocks of MaskInputs::score_keys,
  // r_weight_keys). Their predicates depend on the group alone and read its range from an input,
  // so Halide turns them into the key loops' bounds: Q·Kᵀ and exp stop at the range as P·V does.
  // (Bounds inference cannot do it: a stage computed beside its consumers is bounded over their
  // regions, given as separate min and max variables, so a load at the group is never one value.)
  bool grouped = false;
  Halide::RDom r_logit_keys, r_weight_keys;
};

// Exact float tests done on the bits. Halide compiles float compares with LLVM's no-NaN flag, so a
// compare that meets a NaN is poison, and a guard such as `sum == 0 && !is_nan(sum)` is folded
// away (a NaN weight sum came out as "exactly 0: fully masked", turning NaN rows into zeros).
inline Halide::Expr float_bits(const Halide::Expr& x) { return Halide::reinterpret<uint32_t>(x); }
inline Halide::Expr is_exact_zero(const Halide::Expr& x) {
  return (float_bits(x) & Halide::cast<uint32_t>(0x7fffffff)) == Halide::cast<uint32_t>(0);
}
inline Halide::Expr is_minus_infinity(const Halide::Expr& x) {
  return float_bits(x) == float_bits(Halide::Float(32).min());
}

// The scores after the masks and biases of `m` (see algorithm/masks.h for each piece).
// Query i (a position: a row of a query group, SdpaFuncs::grouped), key j, head h, batch b.
inline Halide::Expr masked_logits(const MaskInputs& m, Halide::Expr score, const Halide::Expr& i,
                                  const Halide::Expr& j, const Halide::Expr& h,
                                  const Halide::Expr& b) {
  using namespace Halide;
  if (m.score_mod) score = m.score_mod(score, i, j, h, b);
  Expr capped = select(m.softcap > 0.0f, apply_softcap(score, m.softcap), score);
  Expr additive = m.additive(j, i, h, b);
  Expr biased = capped + alibi_bias(m, i, j, h) + additive;
  Expr tensors_allow = m.allowed(j, i, h, b) != 0 && !is_minus_infinity(additive);
  Expr visible =
      band_visible(m, i, j) && lengths_visible(m, i, j, b) && (!m.has_bias || tensors_allow);
  if (m.mask_mod) visible = visible && m.mask_mod(i, j, h, b);
  return select(visible, select(m.has_bias, biased, score), Float(32).min());
}

// What a row's softmax subtracts given its max: the max, or 0 for a row without any visible key
// (max -inf), whose weights then stay exp(-inf) = 0 instead of exp(-inf + inf) = NaN.
inline Halide::Expr softmax_shift(const Halide::Expr& max) {
  return Halide::select(is_minus_infinity(max), 0.0f, max);
}

// A row's output from its unnormalized weighted sum and weight sum. Masked: a row without any
// visible key outputs zeros (its sum is exactly 0; a NaN sum is not, and stays NaN).
inline Halide::Expr normalized_output(const Halide::Expr& weighted, const Halide::Expr& sum,
                                      bool masked) {
  Halide::Expr normalized = weighted / sum;
  return masked ? Halide::select(is_exact_zero(sum), 0.0f, normalized) : normalized;
}

// A row's natural logsumexp, max + log(sum) for weights taken relative to max. Halide's log() maps
// NaN to a finite value, so a NaN sum (a NaN score) is kept; masked: -inf for a row without any
// visible key.
inline Halide::Expr row_logsumexp(const Halide::Expr& max, const Halide::Expr& sum, bool masked) {
  using namespace Halide;
  Expr lse = select(is_nan(sum), sum, max + log(sum));
  return masked ? select(is_exact_zero(sum), Float(32).min(), lse) : lse;
}

// The keys a masked row's reductions visit (its group's visible range in whole key blocks), or an
// undefined `any_row` for every key.
struct VisitedKeys {
  Halide::Expr any_row;  // false: the row sees no key at all
  Halide::Expr first, last;
};

// Split-KV: merges the splits' (out, logsumexp) pairs into f.out and f.logsumexp. With
// m = max_s lse_s and w_s = exp(lse_s - m): out = sum_s w_s out_s / sum_s w_s and
// lse = m + log(sum_s w_s). A split without visible keys has lse_s = -inf, so w_s = 0; masked, the
// combine visits only the splits that meet `visited` (block skipping at split granularity), so
// no split outside them is ever computed.
// group_visited (may be null): the keys of query group g (rows [g · group, (g + 1) · group)), to
// gather the splits that meet them (SdpaFuncs::split_gathered).
inline void combine_splits(
    SdpaFuncs& f, const Halide::Expr& key_split, const Halide::Expr& num_splits,
    const VisitedKeys& visited,
    const std::function<VisitedKeys(const Halide::Expr&)>& group_visited = {}, int group = 1) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var c = x.c, s = x.s, i = x.i, h = x.h, b = x.b;
  // One Func holds everything a split hands on, so a schedule computes each split in one place:
  // (out, lse) at every feature, the lse repeated so the pair needs no clamp or select per feature.
  f.split_result = Func("split_result");
  Func results = f.split_result;
  if (group_visited) {
    // The per-split stages are grouped (SdpaFuncs::grouped): rows (i, g).
    Var g = x.g, row = x.group_row;
    f.split_result(c, s, i, g, h, b) =
        Tuple(f.split_out(c, s, i, g, h, b), f.split_lse(s, i, g, h, b));
    const VisitedKeys keys = group_visited(g);
    f.split_gathered = Func("split_gathered");
    f.split_gathered(c, s, row, g, h, b) = Tuple(0.0f, Float(32).min());
    // Hoisted to the split loop when the range is read from an input (a call to a Func in the
    // same pipeline keeps a predicate inside the copy's loops, under the split it guards).
    f.r_visited = RDom(0, num_splits, "r_visited");
    const RDom& r = f.r_visited;
    f.r_visited.where(keys.any_row && r >= keys.first / key_split && r <= keys.last / key_split);
    f.split_gathered(c, r, row, g, h, b) = f.split_result(c, r, row, g, h, b);
    results = Func("split_results_gathered");
    results(c, s, i, h, b) = f.split_gathered(c, s, i % group, i / group, h, b);
  } else {
    f.split_result(c, s, i, h, b) = Tuple(f.split_out(c, s, i, h, b), f.split_lse(s, i, h, b));
  }
  auto split_lse = [&](const Expr& split) { return results(0, split, i, h, b)[1]; };
  f.r_s = RDom(0, num_splits, "r_s");
  const RDom& r_s = f.r_s;
  Expr split = r_s;
  if (visited.any_row.defined()) {
    Expr first = visited.first / key_split, last = visited.last / key_split;
    f.r_s.where(visited.any_row && r_s >= first && r_s <= last);
    // As for keys: the clamp only tells bounds inference which splits a tile needs (kept inside
    // [0, num_splits) even for a row that sees no key).
    Expr lo = clamp(first, 0, num_splits - 1);
    split = clamp(r_s, lo, clamp(last, lo, num_splits - 1));
  }
  f.lse_max = Func("lse_max");
  f.lse_max(i, h, b) = Float(32).min();
  f.lse_max(i, h, b) = max(f.lse_max(i, h, b), split_lse(split));
  // Every split empty (a fully masked row): subtract 0, so each weight is exp(-inf) = 0.
  Expr shift = softmax_shift(f.lse_max(i, h, b));
  f.split_weight = Func("split_weight");
  f.split_weight(s, i, h, b) = exp2_nonpositive((split_lse(s) - shift) * float(M_LOG2E));
  f.weight_total = Func("weight_total");
  f.weight_total(i, h, b) = 0.0f;
  f.weight_total(i, h, b) += f.split_weight(split, i, h, b);
  f.out_total = Func("out_total");
  f.out_total(c, i, h, b) = 0.0f;
  f.out_total(c, i, h, b) += f.split_weight(split, i, h, b) * results(c, split, i, h, b)[0];

  Expr total = f.weight_total(i, h, b);
  f.out = Func("out");
  Expr normalized = normalized_output(f.out_total(c, i, h, b), total, f.hides_keys);
  Expr lse = row_logsumexp(shift, total, f.hides_keys);
  if (f.stats_in_out) {
    f.out(c, i, h, b) = Tuple(normalized, lse);
    return;
  }
  f.out(c, i, h, b) = normalized;
  f.logsumexp = Func("logsumexp");
  f.logsumexp(i, h, b) = lse;
}

// mask_mod's key range per query group (MaskInputs::mod_keys): whether any row of the group sees
// each key (vectorizable along keys), then the first and last key seen. Computed per head only
// when mask_mod reads the head; otherwise once per batch for every head.
inline void mod_key_scan(MaskInputs& m, SdpaFuncs& f, const Halide::Expr& seq_k) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var j = x.j, h = x.h, b = x.b, g = x.g;
  const int group = m.query_group;
  f.r_mod_rows = RDom(0, group, "mod_row");
  const RDom& r_row = f.r_mod_rows;
  Expr row = g * group + r_row;
  f.r_mod_rows.where(row < m.query_length(b));
  Expr sees = m.mask_mod(row, j, h, b);
  f.mod_key_seen = Func("mod_key_seen");
  f.mod_key_seen(j, g, h, b) = cast<bool>(false);
  f.mod_key_seen(j, g, h, b) = f.mod_key_seen(j, g, h, b) || sees;
  f.r_mod_keys = RDom(0, seq_k, "mod_key");
  const RDom& r_key = f.r_mod_keys;
  Expr seen = f.mod_key_seen(r_key, g, h, b);
  f.mod_key_range = Func("mod_key_range");
  f.mod_key_range(g, h, b) = Tuple(seq_k, -1);
  f.mod_key_range(g, h, b) = Tuple(min(f.mod_key_range(g, h, b)[0], select(seen, r_key, seq_k)),
                                   max(f.mod_key_range(g, h, b)[1], select(seen, r_key, -1)));
  const bool per_head = Internal::expr_uses_var(sees, h.name());
  m.mod_keys = Func("mod_keys");
  m.mod_keys(g, h, b) = f.mod_key_range(g, per_head ? Expr(h) : Expr(0), b);
}

inline SdpaFuncs scaled_dot_product(const SdpaInputs& in) {
  using namespace Halide;
  SdpaFuncs f;
  const AttentionVars& x = f.vars;
  Var c = x.c, d = x.d, i = x.i, j = x.j, h = x.h, b = x.b, s = x.s;
  Expr kv_head = h / in.heads_per_kv;
  _halide_user_assert(!(in.bf16_pairs && in.mask)) << "bf16_pairs: masks are not supported\n";

  f.head_dim = in.head_dim;
  f.heads_per_kv = in.heads_per_kv;
  f.query_rows = in.query_rows;
  f.value_dim = in.value_dim;
  f.key_split = in.key_split;
  f.stats_in_out = in.stats_in_out;
  f.keys = in.k;
  f.values = in.v;
  f.rotated_q = in.rotated_q;
  f.rotated_k = in.rotated_k;
  f.rope_table = in.rope_table;
  f.masked = in.mask != nullptr;
  // bf16_pairs: keys past Sk in a split's last pair block are hidden (weight 0) rather than left
  // out by a predicate, which the paired P·V could not vectorize.
  f.hides_keys = f.masked || in.hides_keys || in.bf16_pairs;
  f.bf16_pairs = in.bf16_pairs;
  f.custom_logits = f.masked || bool(in.logit_of_score);
  f.logit_cases = in.logit_cases;
  f.dot_score = !in.score_term;
  f.r_d = RDom(0, in.head_dim, "r_d");
  // The masks, with mask_mod's scan added (mod_key_scan).
  MaskInputs mask = f.masked ? *in.mask : MaskInputs{};
  // The keys one reduction covers: split s's. At least 1: a divisor bounds inference knows is
  // positive keeps split indices derived from key ranges tight (with an unknown sign it gives up
  // and assumes every split).
  Expr key_split = in.bf16_pairs ? max(in.key_split / 2, 1) * 2 : max(in.key_split, 1);
  Expr first_key = s * key_split;
  // Grouped (SdpaFuncs::grouped): the per-split stages' rows are (i, g), query g · group + i.
  f.grouped = f.masked && in.mask->mod_keys.defined() && !in.mask->single_group &&
              in.mask->gather_mod_splits;
  const Var g = x.g;
  const Expr query = f.grouped ? g * in.mask->query_group + i : Expr(i);
  // A per-split stage's arguments (Vars to define it, Exprs to call it): `lead`, then its rows,
  // head and batch.
  const auto with_rows = [&](auto lead) {
    lead.push_back(i);
    if (f.grouped) lead.push_back(g);
    lead.push_back(h);
    lead.push_back(b);
    return lead;
  };
  const auto vars_of = [&](std::vector<Var> lead) { return with_rows(std::move(lead)); };
  const auto rows_of = [&](std::vector<Expr> lead) { return with_rows(std::move(lead)); };
  // The key each reduction step reads (P·V: pv_key, over r_pv).
  Expr key, pv_key;
  // r_j's predicate on a raw key first_key + r (empty: none).
  std::function<Expr(const Expr&)> visible_at;
  VisitedKeys visited;
  std::function<VisitedKeys(const Expr&)> group_visited;
  if (!f.masked) {
    f.r_j = RDom(0, key_split, "r_j");
    key = first_key + f.r_j;
    // The last split may run past Sk (reads there are clamped). Those keys are left out: by a
    // predicate, or, where logits can hide keys anyway, by a logit of -inf (below), which keeps
    // every reduction's extent a whole split, so reductions across keys vectorize.
    f.whole_splits = f.hides_keys;
    if (!f.whole_splits) {
      visible_at = [seq_k = in.seq_k](const Expr& raw) { return raw < seq_k; };
      f.r_j.where(visible_at(key));
    }
  } else {
    // Keys in whole blocks, and only blocks that meet the range visible to the row's group.
    const int kb = mask.key_block, group = mask.query_group;
    // mask_mod's ranges: scanned here, unless given (MaskInputs::mod_keys).
    const bool mod_keys_given = mask.mod_keys.defined();
    if (mask.mask_mod && !mod_keys_given) mod_key_scan(mask, f, in.seq_k);
    f.r_j = RDom(0, (key_split + kb - 1) / kb * kb, "r_j");
    // The keys query group g (rows [g · group, (g + 1) · group)) sees through the masks, in whole
    // key blocks.
    const auto masks_keys = [&, kb, group](const Expr& g) {
      const Expr first = g * group;
      const KeyRange r = visible_keys(mask, first, first + group - 1, b, in.seq_k);
      return VisitedKeys{r.any_row, max(r.begin, 0) / kb * kb, (r.end + kb - 1) / kb * kb - 1};
    };
    // The same narrowed by mask_mod's (scanned) range, which skips whole splits; the keys of a
    // visited split outside it are hidden by the logits. Clamped (no-ops on the scan's results)
    // so bounds inference has a range. masks_keys by value: combine_splits calls this after the
    // block ends.
    const auto keys_of_group = [&, masks_keys](const Expr& g) {
      VisitedKeys v = masks_keys(g);
      if (mask.mod_keys.defined()) {
        v.first = max(v.first, clamp(mask.mod_keys(g, h, b)[0], 0, in.seq_k));
        v.last = min(v.last, clamp(mask.mod_keys(g, h, b)[1], -1, in.seq_k - 1));
      }
      return v;
    };
    const Expr row_group = f.grouped ? Expr(g) : i / group;
    const VisitedKeys row_keys = masks_keys(row_group);
    Expr lo = row_keys.first, hi = row_keys.last;
    visited = keys_of_group(mask.single_group ? Expr(0) : i / group);
    if (f.grouped) {
      group_visited = keys_of_group;
    }
    lo = max(lo, first_key);
    hi = min(hi, first_key + key_split - 1);
    Expr raw = first_key + f.r_j;
    const Expr any_row = row_keys.any_row;
    // A given mask_mod range (read from an input, so the test hoists out of the key loops) also
    // narrows the keys a row's statistics and P·V run over inside a visited split, in whole key
    // blocks: on the range's edge they stop where the range does, as they do at the band's.
    Expr seen_lo = lo, seen_hi = hi;
    if (mod_keys_given) {
      const VisitedKeys mod = keys_of_group(row_group);
      seen_lo = max(lo, mod.first / kb * kb);
      seen_hi = min(hi, (mod.last + kb) / kb * kb - 1);
    }
    visible_at = [=](const Expr& r) { return any_row && r >= seen_lo && r <= seen_hi; };
    f.r_j.where(visible_at(raw));
    // The clamp never changes a key the predicate lets through; it tells bounds inference (which
    // ignores predicates) that a tile's stages only need keys in its range, so the score and
    // weight tiles shrink with the mask instead of spanning Sk. Not with a given mask_mod range:
    // the masks are then mod_sdpa's neutral ones, whose range is the whole split, so the clamp
    // narrows nothing, and under the loaded loop bounds it stays in P·V's inner loop (a compare,
    // two conditional moves and a multiply per key). Clamped to the loaded range instead, the
    // bounds of a tile's stages span its whole split anyway (a row tile's bounds are not one
    // query group to bounds inference, so the load is not a single point), and in the outer
    // loops they span Sk.
    // The lower end is capped at the split's last key: where a tile's rows may start seeing keys
    // past this split (a window ahead of it), lo's bound would otherwise lie beyond the split, and
    // the stages' bound_extent of one split would fail (a trap inside a CUDA kernel).
    key = mod_keys_given ? raw : clamp(raw, min(lo, first_key + key_split - 1), hi);
    // whole_split_pv: P·V over the whole split without a predicate, as the statistics
    // (whole_key_stats): a key a row does not see adds an exact 0 (its weight is 0 from a -inf
    // logit, and the sum is always NaN-safe). r_j's predicate is a row's own range, tested with
    // its clamps for every key, row and head of a paged item, which spent most of its
    // instructions there. The key stays free of loads (a clamp to the sequence's length would be
    // one), so a prefetch of the rows ahead is one row, not a span of the pool.
    if (in.whole_split_pv && in.whole_key_stats && !f.grouped && !in.bf16_pairs) {
      f.whole_split_pv = true;
      f.r_pv = RDom(0, key_split, "r_pv");
      pv_key = first_key + f.r_pv.x;
    }
    if (f.grouped) {
      // The keys of the split its group may see (SdpaFuncs::grouped). Logits go in whole blocks
      // of score_keys (x within the block, y the block): the predicate is on the block alone, so
      // it bounds the block loop though the schedule unrolls x.
      const int sk = mask.score_keys;
      f.r_logit_keys = RDom(0, sk, 0, (f.r_j.x.extent() + sk - 1) / sk, "r_logit_keys");
      const Expr block_first = first_key + f.r_logit_keys.y * sk;
      f.r_logit_keys.where(any_row && block_first + (sk - 1) >= seen_lo && block_first <= seen_hi);
      f.r_weight_keys = RDom(0, f.r_j.x.extent(), "r_weight_keys");
      f.r_weight_keys.where(visible_at(first_key + f.r_weight_keys.x));
    }
  }

  f.q_scaled = Func("q_scaled");
  f.scores = Func("scores");
  f.scores(vars_of({j})) = 0.0f;
  Expr q_d, k_d, feature;
  if (in.bf16_pairs) {
    // Pairs of features: r_d.x within the pair, r_d.y the pair.
    Var p = x.p;
    f.r_d = RDom(0, 2, 0, in.head_dim / 2, "r_d");
    feature = f.r_d.x + 2 * f.r_d.y;
    f.key_pairs = Func("key_pairs");
    f.key_pairs(p, j, d, h, b) = in.k(2 * d + p, j, h, b);
    f.q_scaled(d, i, h, b) = in.q(d, i, h, b);  // not scaled: see SdpaInputs::bf16_pairs
    q_d = cast<float>(f.q_scaled(feature, query, h, b));
    k_d = cast<float>(f.key_pairs(f.r_d.x, j, f.r_d.y, kv_head, b));
  } else if (in.feature_block > 1) {
    const int fb = in.feature_block;
    const Expr D = in.head_dim;
    f.r_d = RDom(0, fb, 0, (D + fb - 1) / fb, "r_d");
    feature = f.r_d.x + f.r_d.y * fb;
    // Zeros past D add exactly 0 to every score (0 · 0, never 0 · inf).
    f.keys = Func("keys_padded");
    f.keys(d, j, h, b) = select(d < D, in.k(min(d, D - 1), j, h, b), 0.0f);
    f.q_scaled(d, i, h, b) = select(d < D, in.q(min(d, D - 1), i, h, b) * in.scale, 0.0f);
    q_d = f.q_scaled(feature, query, h, b);
    k_d = f.keys(feature, j, kv_head, b);
  } else {
    feature = f.r_d;
    f.q_scaled(d, i, h, b) = in.q(d, i, h, b) * in.scale;
    q_d = f.q_scaled(f.r_d, query, h, b);
    k_d = in.k(f.r_d, j, kv_head, b);
  }
  f.scores(rows_of({j})) += in.score_term ? in.score_term(q_d, k_d, feature) : q_d * k_d;

  Expr score = f.scores(rows_of({j}));
  if (in.bf16_pairs) score = in.scale * score;
  if (in.logit_of_score) score = in.logit_of_score(score);
  f.logits = Func("logits");
  if (f.masked) {
    score = masked_logits(mask, score, query, j, h, b);
  } else if (f.hides_keys) {
    score = select(j < in.seq_k, score, Float(32).min());
  }
  // Grouped: logits and weights (j, s, i, g, h, b), each an update over the split's seen keys.
  const auto logits_at = [&](const Expr& key_j) {
    return f.grouped ? f.logits(rows_of({key_j, s})) : f.logits(rows_of({key_j}));
  };
  if (f.grouped) {
    const Expr seen = first_key + f.r_logit_keys.y * mask.score_keys + f.r_logit_keys.x;
    f.logits(vars_of({j, s})) = undef<float>();
    f.logits(rows_of({seen, s})) = substitute(j.name(), seen, score);
  } else {
    f.logits(vars_of({j})) = score;
  }
  if (f.masked) f.has_bias = in.mask->has_bias;
  // Plain bf16_pairs SDPA: v's own NaN/Inf reach the output as in the fp32 kernel (0 · NaN); past
  // Sk v is read as zeros.
  if (f.hides_keys) {
    f.values_finite = in.values_finite.defined() ? in.values_finite : Internal::const_true();
  }

  // Per-row statistics of split s (whole_key_stats: over r_stats, every key of the split, with
  // r_j's predicate as a select).
  f.r_stats = f.r_j;
  f.whole_stats = f.whole_splits;
  Expr stat_key = key, stat_visible = Internal::const_true();
  if (in.whole_key_stats && visible_at) {
    f.r_stats = RDom(0, f.r_j.x.extent(), "r_stats");
    f.whole_stats = true;
    // The raw key, unclamped: the logits and weights are then computed for the whole split, not
    // just the mask's range in it (reads there stay in bounds: the inputs are clamped). Clamped
    // to the range as `key` is, Halide 21 failed an internal check adding the input checks
    // (Simplify_Exprs.cpp:229).
    stat_key = first_key + f.r_stats.x;
    stat_visible = visible_at(stat_key);
  }
  auto visible_or = [&](const Expr& value, const Expr& hidden) {
    return is_const_one(stat_visible) ? value : select(stat_visible, value, hidden);
  };
  f.row_max = Func("row_max");
  f.row_max(vars_of({s})) = Float(32).min();
  f.row_max(rows_of({s})) =
      max(f.row_max(rows_of({s})), visible_or(logits_at(stat_key), Float(32).min()));
  Expr row_max = f.row_max(rows_of({s}));
  Expr shift = f.hides_keys ? softmax_shift(row_max) : row_max;

  // exp(s - m) = 2^((s - m) * log2(e)); subtracting the max first keeps the rounding of the
  // multiply relative to the (small) distance from the max, not to the logit's magnitude.
  f.weights = Func("weights");
  Expr weight_j = exp2_nonpositive((logits_at(j) - shift) * float(M_LOG2E), in.bf16_pairs);
  if (in.bf16_pairs) {
    f.weights(vars_of({j, s})) = Tuple(weight_j, round_to_bfloat16(weight_j));
  } else {
    if (f.grouped) {
      const Expr seen = first_key + f.r_weight_keys.x;
      f.weights(vars_of({j, s})) = undef<float>();
      f.weights(rows_of({seen, s})) = substitute(j.name(), seen, weight_j);
    } else {
      f.weights(vars_of({j, s})) = weight_j;
    }
  }

  f.row_sum = Func("row_sum");
  f.row_sum(vars_of({s})) = 0.0f;
  f.row_sum(rows_of({s})) += visible_or(in.bf16_pairs ? Expr(f.weights(rows_of({stat_key, s}))[0])
                                                      : Expr(f.weights(rows_of({stat_key, s}))),
                                        0.0f);

  f.weighted_sum = Func("weighted_sum");
  f.weighted_sum(vars_of({c, s})) = 0.0f;
  Expr weight, term;
  if (in.bf16_pairs) {
    // Pairs of keys: r_pairs.x within the pair, r_pairs.y the split's pair.
    Var p = x.p;
    f.value_pairs = Func("value_pairs");
    f.value_pairs(p, c, j, h, b) = in.v(c, 2 * j + p, h, b);
    Expr half_split = key_split / 2;
    f.r_pairs = RDom(0, 2, 0, half_split, "r_pairs");
    Expr pair = s * half_split + f.r_pairs.y;
    weight = cast<float>(f.weights(rows_of({2 * pair + f.r_pairs.x, s}))[1]);
    term = weight * cast<float>(f.value_pairs(f.r_pairs.x, c, pair, kv_head, b));
  } else {
    if (!f.r_pv.defined()) {
      f.r_pv = f.r_j;
      pv_key = key;
    }
    weight = f.weights(rows_of({pv_key, s}));
    term = weight * in.v(c, pv_key, kv_head, b);
  }
  if (f.hides_keys) {
    // Keys past a sequence's end (whole_split_pv) may hold anything: always NaN-safe there.
    const Expr nan_safe = select(is_exact_zero(weight), 0.0f, term);
    term = f.whole_split_pv ? nan_safe : select(f.values_finite, term, nan_safe);
  }
  f.weighted_sum(rows_of({c, s})) += term;

  Expr row_sum = f.row_sum(rows_of({s}));
  f.split_out = Func("split_out");
  f.split_out(vars_of({c, s})) =
      normalized_output(f.weighted_sum(rows_of({c, s})), row_sum, f.hides_keys);
  f.split_lse = Func("split_lse");
  f.split_lse(vars_of({s})) = row_logsumexp(row_max, row_sum, f.hides_keys);

  combine_splits(f, key_split, (in.seq_k + key_split - 1) / key_split, visited, group_visited,
                 f.masked ? in.mask->query_group : 1);
  return f;
}

}  // namespace attention_gen
