// GPU schedule (CUDA; the same code serves OpenCL, which CI runs on PoCL) for the SDPA Funcs of
// algorithm/sdpa.h.
//
// Two kernels, both tilings:
// - Splits: one GPU block per (key split, query tile, head·batch) computes the split's output and
//   logsumexp. The tile's scaled q and the split's k are staged in shared memory; Q·Kᵀ runs one
//   thread per (key, query), the softmax statistics one thread per query, P·V one thread per
//   (value feature, query) reading v in place (consecutive threads read consecutive features).
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
  Var tile("tile"), i_in("i_in"), hb("hb"), c_out("c_out"), c_in("c_in"), j_out("j_out"),
      j_in("j_in"), d_out("d_out"), d_in("d_in");
  const TailStrategy guard = TailStrategy::GuardWithIf;

  // Kernel 1: the splits. Whole tiles (RoundUp: split_result is internal, q and k are clamped, v
  // zero-padded): a guard around the block's body would put its barriers in divergent code.
  const TailStrategy round_up = TailStrategy::RoundUp;
  f.split_result.compute_root()
      .split(x.i, tile, i_in, t.query_tile, round_up)
      .split(x.c, c_out, c_in, t.feature_threads, round_up)
      .fuse(x.h, x.b, hb)
      .reorder(c_in, i_in, c_out, x.s, tile, hb)
      .gpu_blocks(x.s, tile, hb)
      .gpu_threads(c_in, i_in);
  const LoopLevel block(f.split_result, x.s);

  // q·scale for the tile, then the split's keys, in shared memory.
  f.q_scaled.compute_at(block)
      .split(x.d, d_out, d_in, t.feature_threads, guard)
      .reorder(d_in, x.i, d_out)
      .gpu_threads(d_in, x.i);
  Func keys = f.keys.in(f.scores);
  const Var key_d = keys.args()[0], key_j = keys.args()[1];
  keys.compute_at(block)
      .split(key_d, d_out, d_in, t.feature_threads, guard)
      .split(key_j, j_out, j_in, 256 / t.feature_threads, guard)
      .reorder(d_in, j_in, d_out, j_out)
      .gpu_threads(d_in, j_in);

  // Q·Kᵀ and the weights: a thread per (key, query).
  auto key_query_threads = [&](Stage stage) {
    stage.split(x.j, j_out, j_in, t.key_threads, guard)
        .reorder(j_in, x.i, j_out)
        .gpu_threads(j_in, x.i);
  };
  f.scores.compute_at(block);
  key_query_threads(f.scores);
  key_query_threads(f.scores.update());
  f.weights.compute_at(block);
  key_query_threads(f.weights);

  // Row statistics: a thread per query, the split's keys in a loop.
  for (Func stat : {f.row_max, f.row_sum}) {
    stat.compute_at(block).gpu_threads(x.i);
    stat.update().gpu_threads(x.i);
  }

  // P·V: a thread per (value feature, query), accumulating over the split's keys.
  f.weighted_sum.compute_at(block)
      .split(x.c, c_out, c_in, t.feature_threads, guard)
      .reorder(c_in, x.i, c_out)
      .gpu_threads(c_in, x.i);
  f.weighted_sum.update()
      .split(x.c, c_out, c_in, t.feature_threads, guard)
      .reorder(c_in, x.i, f.r_j, c_out)
      .gpu_threads(c_in, x.i);

  // The combine: per row, the largest split logsumexp and the weight total (a kernel each, a
  // thread per query), then out (a thread per (value feature, query), its sum over the splits in
  // a register) and logsumexp (a thread per query).
  auto row_blocks = [&](Func func, bool features) {
    func.split(x.i, tile, i_in, t.query_tile, guard).fuse(x.h, x.b, hb);
    if (features) {
      func.split(x.c, c_out, c_in, t.feature_threads, guard)
          .reorder(c_in, i_in, c_out, tile, hb)
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
        .split(x.i, tile, i_in, t.query_tile, guard)
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
