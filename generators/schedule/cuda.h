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

#include <string>

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

// A thread's partial sums over one staged block (an rfactor intermediate) in registers: its
// a × b tile unrolled at `thread` (inside the loops over threads), the block's reduction `r` in
// steps of 4 (`step`, `lane`), so that each operand row is one 4-wide load per step.
inline void schedule_register_partial(Halide::Func partial, const Halide::LoopLevel& thread,
                                      const Halide::Var& a, const Halide::Var& b,
                                      const Halide::RVar& r, const Halide::RVar& step,
                                      const Halide::RVar& lane) {
  partial.compute_at(thread).unroll(a).unroll(b);
  partial.update()
      .split(r, step, lane, 4)
      .reorder(a, b, lane, step)
      .unroll(a)
      .unroll(b)
      .unroll(lane);
}

inline void schedule_sdpa_gpu(SdpaFuncs& f, const GpuTiling& t) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var tile("tile"), i_in("i_in"), hb("hb"), c_pass("c_pass"), c_in("c_in"), c_t("c_t"), c_r("c_r"),
      i_t("i_t"), i_r("i_r"), j_t("j_t"), j_r("j_r"), o("o"), in("in"), chunk("chunk");
  RVar d_step("d_step"), d_lane("d_lane");
  const TailStrategy guard = TailStrategy::GuardWithIf, round_up = TailStrategy::RoundUp;
  const int block_threads = std::max(t.score_threads(), t.pv_threads());
  // Every stage of the splits' kernel lays its threads out as (x: feature_block lanes, y: the
  // rest), `inner` fastest: Halide launches a block with each dimension's largest extent over its
  // stages, so stages shaped differently would launch the product of the maxima (16 × 16 scores,
  // 32 × 8 P·V, 8 × 32 staged rows and 64 row statistics made 2048 threads), over CUDA's 1024 per
  // block (PoCL accepts it). The linear thread index, and so the warps, stay the
  // same. gpu_tiling_error checks that feature_block divides each stage's threads.
  const int lanes = t.feature_block;
  Var thread("thread"), thread_x("thread_x"), thread_y("thread_y");
  auto block_threads_of = [&](Stage stage, const VarOrRVar& inner, const VarOrRVar& outer) {
    stage.fuse(inner, outer, thread)
        .split(thread, thread_y, thread_x, lanes, round_up)
        .gpu_threads(thread_x, thread_y);
  };
  auto row_threads_of = [&](Stage stage) {
    stage.split(x.i, thread_y, thread_x, std::min(lanes, t.query_tile), guard)
        .gpu_threads(thread_x, thread_y);
  };
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
      .unroll(c_r)
      .unroll(i_r);
  block_threads_of(f.split_result, c_t, i_t);
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
    stage.reorder(order).unroll(j_r).unroll(i_r);
    block_threads_of(stage, j_t, i_t);
  };
  const RVar feature_in_block(f.r_d.x), feature_block(f.r_d.y);
  Func partial = f.scores.update().rfactor(feature_block, chunk);
  for (Func stage : {f.scores, f.weights}) {
    stage.compute_at(block).bound_extent(x.j, t.split_keys).reorder_storage(x.i, x.j);
    score_tile(stage, {});
  }
  score_tile(f.scores.update(), {feature_block});
  schedule_register_partial(partial, LoopLevel(f.scores, thread_x), x.i, x.j, feature_in_block,
                            d_step, d_lane);
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
    stat.compute_at(block);
    row_threads_of(stat);
    row_threads_of(stat.update());
  }
  f.split_lse.compute_at(block);
  row_threads_of(f.split_lse);

  // P·V: each thread's pv_queries × pv_features outputs accumulate in registers over the split's
  // keys, inside split_result's loops over threads.
  f.weighted_sum.compute_at(f.split_result, thread_x).unroll(x.c).unroll(x.i);
  f.weighted_sum.update().reorder(x.c, x.i, f.r_pv).unroll(x.c).unroll(x.i);

  // The combine: per row, the largest split logsumexp and the weight total (a kernel each, a
  // thread per query), then out (a thread per (value feature, query), its sum over the splits in
  // a register; a block per 32 features, so a decode call's few rows still fill the GPU: with the
  // feature passes inside a thread, 1×32×1×4096×128's out kernel took 19 µs on an H200, 7.6 µs
  // as blocks) and logsumexp (a thread per query).
  const int rows = std::min(t.query_tile, 8), features = 32;
  auto row_blocks = [&](Func func, bool with_features) {
    func.split(x.i, tile, i_in, rows, guard).fuse(x.h, x.b, hb);
    if (with_features) {
      func.split(x.c, c_pass, c_in, features, guard)
          .reorder(c_in, i_in, c_pass, tile, hb)
          .gpu_blocks(c_pass, tile, hb)
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

// mask_mod's key ranges on the GPU (mod_sdpa output=key_ranges): a block per (query group, head
// or every head, batch) of mod_key_range, whose threads scan interleaved keys (a key a thread per
// step, so a warp reads adjacent keys) for their own first and last seen key, which one thread
// then folds. `ranges`: the kernel's output (e, g, h, b), a thread per (e, g).
inline void schedule_mod_key_scan_gpu(SdpaFuncs& f, Halide::Func ranges) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  constexpr int threads = 128, groups_per_block = 64;
  Var hb("hb"), lane("lane"), g_out("g_out"), g_in("g_in");
  RVar k_outer("k_outer"), k_lane("k_lane");
  Stage scan = f.mod_key_range.update();
  scan.split(f.r_mod_keys.x, k_outer, k_lane, threads, TailStrategy::GuardWithIf);
  Func lanes = scan.rfactor(k_lane, lane);
  f.mod_key_range.compute_root().fuse(x.h, x.b, hb).gpu_blocks(x.g, hb);
  f.mod_key_range.update().fuse(x.h, x.b, hb).gpu_blocks(x.g, hb);
  lanes.compute_at(f.mod_key_range, x.g).gpu_threads(lane);
  lanes.update().reorder(k_outer, lane).gpu_threads(lane);
  // The rows of the group, for the thread's key, in its registers.
  f.mod_key_seen.compute_at(lanes, k_outer);
  const std::vector<Var> args = ranges.args();  // (e, g, h, b)
  ranges.compute_root()
      .split(args[1], g_out, g_in, groups_per_block, TailStrategy::GuardWithIf)
      .fuse(args[2], args[3], hb)
      .reorder(args[0], g_in, g_out, hb)
      .unroll(args[0])
      .gpu_blocks(g_out, hb)
      .gpu_threads(g_in);
}

// The GPU tiling of the matrix products below (the MHA generator's GeneratorParams gpu_proj_tile
// and gpu_proj_k_block).
struct GpuLinearTiling {
  int tile = 64;     // y's columns and rows per block (a thread computes 4 × 4)
  int k_block = 16;  // elements of the innermost reduced dim staged per step
  constexpr int threads() const { return (tile / 4) * (tile / 4); }
};

// Why `t` cannot be scheduled ("" if it can).
inline std::string gpu_linear_tiling_error(const GpuLinearTiling& t) {
  if (t.tile % 4 != 0 || t.tile < 16 || t.tile > 128) {
    return "gpu_proj_tile=" + std::to_string(t.tile) + ": must be a multiple of 4 in [16, 128]";
  }
  if (t.k_block % 4 != 0 || t.k_block < 4 || t.threads() % t.k_block != 0) {
    return "gpu_proj_k_block=" + std::to_string(t.k_block) +
           ": must be a multiple of 4 that divides the block's " + std::to_string(t.threads()) +
           " threads";
  }
  const int64_t shared = 4 * (int64_t{t.tile} * t.tile + 2 * int64_t{t.tile} * t.k_block);
  if (shared > attention_contract::kGpuSharedBudget) {
    return "gpu_proj_tile=" + std::to_string(t.tile) +
           ", gpu_proj_k_block=" + std::to_string(t.k_block) + ": " + std::to_string(shared) +
           " bytes of shared memory per block, above " +
           std::to_string(attention_contract::kGpuSharedBudget);
  }
  return "";
}

// A matrix product of algorithm/linear.h (the MHA projections), register-blocked like the
// attention's Q·Kᵀ: one GPU block per (tile columns × tile rows of y, batch), threads of 4 × 4
// outputs. The block's sums live in shared memory (product); per block of k_block elements of the
// innermost reduced dim, x's rows and the weight's columns are staged in shared memory and each
// thread sums its 4 × 4 partial products in registers (rfactor), 4 reduced elements per load of
// each. Blocks round up past the ends: x is read clamped and the weight zero-padded there (see the
// generator), and only y's guarded stores reach memory.
inline void schedule_linear_gpu(LinearFuncs& f, const GpuLinearTiling& tiling) {
  using namespace Halide;
  constexpr int outputs = 4;
  const int tile = tiling.tile, k_block = tiling.k_block, threads = tiling.threads();
  const TailStrategy guard = TailStrategy::GuardWithIf;
  Var no("no"), ni("ni"), mo("mo"), mi("mi"), nt("nt"), nr("nr"), mt("mt"), mr("mr"), o("o"),
      in("in"), chunk("chunk"), chunk_h("chunk_h");
  RVar ko("ko"), ki("ki"), k_step("k_step"), k_lane("k_lane");
  // A thread's 4 × 4 outputs: adjacent columns (one 4-wide load of the weight) and rows.
  auto thread_tiles = [&](Stage stage, const Var& n, const Var& m, std::vector<VarOrRVar> outer) {
    stage.split(n, nt, nr, outputs).split(m, mt, mr, outputs);
    std::vector<VarOrRVar> order = {nr, mr, nt, mt};
    order.insert(order.end(), outer.begin(), outer.end());
    stage.reorder(order).gpu_threads(nt, mt).unroll(nr).unroll(mr);
  };
  f.y.split(f.n, no, ni, tile, guard)
      .split(f.m, mo, mi, tile, guard)
      .reorder(ni, mi, no, mo, f.b)
      .gpu_blocks(no, mo, f.b);
  thread_tiles(f.y, ni, mi, {no, mo, f.b});

  // The block's sums: a whole tile however far y's guarded edge blocks reach (constant thread
  // tiles), in shared memory.
  f.product.compute_at(f.y, no).bound_extent(f.n, tile).bound_extent(f.m, tile);
  thread_tiles(f.product, f.n, f.m, {});
  Stage update = f.product.update().split(f.r_k[0], ko, ki, k_block, guard);
  std::vector<std::pair<RVar, Var>> preserved = {{ko, chunk}};
  std::vector<VarOrRVar> outer = {ko};
  if (f.r_k.dimensions() > 1) {  // the output projection's heads: one staged block per head
    preserved.emplace_back(f.r_k[1], chunk_h);
    outer.push_back(f.r_k[1]);
  }
  Func partial = update.rfactor(preserved);
  thread_tiles(f.product.update(), f.n, f.m, outer);
  schedule_register_partial(partial, LoopLevel(f.product, nt), f.n, f.m, ki, k_step, k_lane);

  // The staged blocks, a thread per element in rounds of the block's threads: x's (k, row) with
  // the reduced element innermost (coalesced reads), the weight's (column, k) with the column
  // innermost.
  const LoopLevel staged(f.product, ko);
  Func x_block = f.x.in(partial), w_block = f.weight_t.in(partial);
  const std::vector<Var> x_args = x_block.args(), w_args = w_block.args();
  const Var& x_row = x_args[x_args.size() - 2];
  // x stored rows innermost: a thread's 4 rows at one reduced element are one aligned load (the
  // block's 64 rows are a constant stride; its reduced extent is not, at the tail block).
  x_block.compute_at(staged)
      .reorder_storage(x_row, x_args[0])
      .split(x_row, o, in, threads / k_block, guard)
      .reorder(x_args[0], in, o)
      .gpu_threads(x_args[0], in);
  // The weight's (column, round row) threads re-split as (x: 16, y: the rest): its tile-wide x
  // would otherwise launch tile × 16 threads, four times the block's (see schedule_sdpa_gpu).
  Var w_thread("w_thread"), w_x("w_x"), w_y("w_y");
  w_block.compute_at(staged)
      .split(w_args[1], o, in, threads / tile, guard)
      .reorder(w_args[0], in, o)
      .fuse(w_args[0], in, w_thread)
      .split(w_thread, w_y, w_x, tile / 4, guard)
      .gpu_threads(w_x, w_y);
}

}  // namespace attention_gen
