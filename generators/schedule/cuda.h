// GPU schedule (CUDA; the same code serves OpenCL, which CI runs on PoCL) for the SDPA Funcs of
// algorithm/sdpa.h, with the tiling of contract/kernel_contract.h (GpuTiling).
//
// Two kernels, both tilings:
// - Splits: one GPU block per (key split, query tile, head·batch) computes the split's output and
//   logsumexp, every thread a register tile (FlashAttention's SIMT layout):
//   - Q·Kᵀ: each thread accumulates score_queries × score_keys scores in registers over d, reading
//     q and k from blocks of feature_block features staged in shared memory, 4 features per load;
//     the tile's logits (scores with masks) then go to shared memory, queries innermost.
//   - softmax statistics: a thread per query; weights: the same tiles as the scores.
//   - P·V: each thread accumulates pv_queries × pv_features outputs in registers over the split's
//     keys, in passes of feature_threads × pv_features features; the weights of 4 queries per
//     shared load, v from global memory. A thread's features are adjacent: its accumulators must
//     be a compact region to stay in registers.
//   Splits a masked tile cannot see have empty key loops.
// - Combine: one thread per (value feature, query) merges the splits by logsumexp weights in
//   registers (split-KV / flash-decoding for every Sq), and one thread per query its logsumexp.
#pragma once

#include "Halide.h"
#include "algorithm/linear.h"
#include "algorithm/sdpa.h"
#include "contract/kernel_contract.h"

namespace attention_gen {

using attention_contract::GpuApi;
using attention_contract::GpuTiling;

inline GpuApi gpu_api(const Halide::Target& target) {
  return target.has_feature(Halide::Target::CUDA) ? GpuApi::CUDA : GpuApi::OpenCL;
}

// The target's tiling (kernel_contract.h, which the runtime's split rules read too).
inline GpuTiling gpu_tiling(const Halide::Target& target, bool wide_queries) {
  return attention_contract::gpu_tiling(gpu_api(target), wide_queries);
}

inline void schedule_sdpa_gpu(SdpaFuncs& f, const GpuTiling& t) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var tile("tile"), i_in("i_in"), hb("hb"), c_pass("c_pass"), c_in("c_in"), c_t("c_t"), c_r("c_r"),
      i_t("i_t"), i_r("i_r"), j_t("j_t"), j_r("j_r"), o("o"), in("in"), chunk("chunk");
  RVar d_step("d_step"), d_lane("d_lane");
  const TailStrategy guard = TailStrategy::GuardWithIf, round_up = TailStrategy::RoundUp;
  const int block_threads = std::max(t.score_threads(), t.pv_threads());
  // Registers belong to one GPU thread: every accumulator below is computed inside the loops over
  // threads (a Func stored in registers outside them gives each thread a private copy of the
  // whole block's array, in local memory).

  // Kernel 1: the splits. Whole tiles (RoundUp: split_result is internal, q and k are clamped, v
  // zero-padded): a guard around the block's body would put its barriers in divergent code. The
  // value features go in passes of feature_threads × pv_features.
  f.split_result.compute_root()
      .split(x.i, tile, i_in, t.query_tile, round_up)
      .split(x.c, c_pass, c_in, t.feature_threads * t.pv_features, round_up)
      .fuse(x.h, x.b, hb)
      .split(c_in, c_t, c_r, t.pv_features, round_up)
      .split(i_in, i_t, i_r, t.pv_queries, round_up)
      .reorder(c_r, i_r, c_t, i_t, c_pass, x.s, tile, hb)
      .gpu_blocks(x.s, tile, hb)
      .gpu_threads(c_t, i_t)
      .unroll(c_r)
      .unroll(i_r);
  const LoopLevel block(f.split_result, x.s);

  // Q·Kᵀ: the split's scores in shared memory (queries innermost: the row statistics' threads
  // read consecutive queries, P·V 4 queries per load), a score_queries × score_keys tile per
  // thread. Per block of feature_block features, q (pre-scaled) and k are staged in shared memory
  // and each thread sums its tile's partial products in registers (rfactor), 4 features per load
  // of q and of k, then adds them into its scores.
  auto score_tile = [&](Stage stage, std::vector<VarOrRVar> outer) {
    stage.split(x.j, j_t, j_r, t.score_keys, round_up)
        .split(x.i, i_t, i_r, t.score_queries, round_up);
    std::vector<VarOrRVar> order = {i_r, j_r, j_t, i_t};
    order.insert(order.end(), outer.begin(), outer.end());
    stage.reorder(order).gpu_threads(j_t, i_t).unroll(j_r).unroll(i_r);
  };
  const RVar feature_in_block(f.r_d.x), feature_block(f.r_d.y);
  Func partial = f.scores.update().rfactor(feature_block, chunk);
  for (Func stage : {f.scores, f.weights}) {
    stage.compute_at(block).bound_extent(x.j, t.split_keys).reorder_storage(x.i, x.j);
    score_tile(stage, {});
  }
  score_tile(f.scores.update(), {feature_block});
  partial.compute_at(f.scores, j_t).unroll(x.i).unroll(x.j);
  partial.update()
      .split(feature_in_block, d_step, d_lane, 4)
      .reorder(x.i, x.j, d_lane, d_step)
      .unroll(x.i)
      .unroll(x.j)
      .unroll(d_lane);
  // The staged blocks: a thread per (feature, row), rows in rounds of the block's threads.
  const LoopLevel staged(f.scores, feature_block);
  for (Func operand : {f.q_scaled, f.keys}) {
    const std::vector<Var> args = operand.args();
    const int row_threads = std::max(1, block_threads / t.feature_block);
    operand.compute_at(staged)
        .split(args[1], o, in, row_threads, guard)
        .reorder(args[0], in, o)
        .gpu_threads(args[0], in);
  }

  // Row statistics: a thread per query, the split's keys in a loop (the logits, scores with
  // masks, are computed where they are read).
  for (Func stat : {f.row_max, f.row_sum}) {
    stat.compute_at(block).gpu_threads(x.i);
    stat.update().gpu_threads(x.i);
  }
  f.split_lse.compute_at(block).gpu_threads(x.i);

  // P·V: each thread's pv_queries × pv_features outputs accumulate in registers over the split's
  // keys, inside split_result's loops over threads.
  f.weighted_sum.compute_at(f.split_result, c_t).unroll(x.c).unroll(x.i);
  f.weighted_sum.update().reorder(x.c, x.i, f.r_j).unroll(x.c).unroll(x.i);

  // The combine: per row, the largest split logsumexp and the weight total (a kernel each, a
  // thread per query), then out (a thread per (value feature, query), its sum over the splits in
  // a register) and logsumexp (a thread per query).
  const int rows = std::min(t.query_tile, 8), features = 32;
  auto row_blocks = [&](Func func, bool with_features) {
    func.split(x.i, tile, i_in, rows, guard).fuse(x.h, x.b, hb);
    if (with_features) {
      func.split(x.c, c_pass, c_in, features, guard)
          .reorder(c_in, i_in, c_pass, tile, hb)
          .gpu_blocks(tile, hb)
          .gpu_threads(c_in, i_in);
    } else {
      func.reorder(i_in, tile, hb).gpu_blocks(tile, hb).gpu_threads(i_in);
    }
  };
  for (Func stat : {f.lse_max, f.weight_total}) {
    stat.compute_root();
    row_blocks(stat, false);
    stat.update()
        .split(x.i, tile, i_in, rows, guard)
        .fuse(x.h, x.b, hb)
        .reorder(i_in, tile, hb)
        .gpu_blocks(tile, hb)
        .gpu_threads(i_in);
  }
  row_blocks(f.out, true);
  row_blocks(f.logsumexp, false);
  f.out_total.compute_at(f.out, c_in);
}

// A matrix product of algorithm/linear.h (the MHA projections): one thread per output element of
// a 16 × 16 tile, one block per (tile, batch), the reduction in a register.
inline void schedule_linear_gpu(LinearFuncs& f) {
  using namespace Halide;
  Var no("no"), ni("ni"), mo("mo"), mi("mi");
  f.y.split(f.n, no, ni, 16, TailStrategy::GuardWithIf)
      .split(f.m, mo, mi, 16, TailStrategy::GuardWithIf)
      .reorder(ni, mi, no, mo, f.b)
      .gpu_blocks(no, mo, f.b)
      .gpu_threads(ni, mi);
  f.product.compute_at(f.y, ni);
}

}  // namespace attention_gen
