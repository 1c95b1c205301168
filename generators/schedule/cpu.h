// CPU schedule (x86 SSE4.1/AVX2/AVX-512, ARM NEON) for the SDPA Funcs of algorithm/sdpa.h.
//
// Prefill work item: one query tile of one (batch, head). The tile walks its keys split by split;
// per split, the scores of its queries against the split's keys live in a buffer stored key-major
// (queries innermost), so Q·Kᵀ vectorizes over queries and the softmax runs down columns; the score
// matrix never exists beyond one tile and split.
// Decode work item: one key split of one (batch, head) (split-KV, see schedule_decode_stages).
#pragma once

#include <string>

#include "Halide.h"
#include "algorithm/sdpa.h"
#include "contract/kernel_contract.h"
#include "schedule/rope.h"

namespace attention_gen {

using attention_contract::CpuTiling;

// AVX-512 and AArch64 have 32 vector registers, SSE/AVX2 16. Any AVX-512 feature counts (16 fp32
// lanes): "x86-64-linux-avx512_skylake" alone, as tiling_as gives it, lacks Target::AVX512.
inline int vector_registers(const Halide::Target& target) {
  using Halide::Target;
  const bool avx512 = target.arch == Target::X86 && target.natural_vector_size<float>() >= 16;
  const bool aarch64 = target.arch == Target::ARM && target.bits == 64;
  return avx512 || aarch64 ? 32 : 16;
}

// The target's default tiling (kernel_contract.h, which the runtime's split rules read too).
inline CpuTiling cpu_tiling(const Halide::Target& target, bool wide_queries) {
  return attention_contract::cpu_tiling(target.natural_vector_size<float>(),
                                        vector_registers(target), wide_queries);
}

// A row statistic's reduction across a split's keys (row_max, row_sum), a vector of keys at a
// time. With whole splits (no predicate on the keys: SdpaFuncs::whole_stats) each lane keeps its
// own partial result and the lanes meet once at the end; otherwise each vector is reduced as it
// comes (in order: a chain of scalar adds).
inline void reduce_key_vectors(SdpaFuncs& f, const CpuTiling& t, Halide::Func stat) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var lane("lane");
  RVar key_outer("key_outer"), key_lane("key_lane");
  Stage update = stat.update();
  if (!f.whole_stats) {
    update.split(f.r_stats, key_outer, key_lane, t.vector).atomic().vectorize(key_lane);
    return;
  }
  Func lanes = update.split(f.r_stats, key_outer, key_lane, t.vector).rfactor(key_lane, lane);
  lanes.compute_at(stat, x.i).vectorize(lane);
  lanes.update().reorder(lane, key_outer).vectorize(lane);
  stat.update().atomic().vectorize(key_lane);
}

// Prefill P·V. Each head's v is copied once into an aligned buffer whose rows are padded with zeros
// to whole blocks (user rows may be misaligned: loads straddling cache lines cost ~15%), so blocks
// round Dv up freely. Keys go in chunks: every pv_rows × pv_cols register block of the tile passes
// over one chunk of v and of the weights while it is in L1/L2, then adds its partial sums into the
// tile.
//
// bf16_pairs: v regrouped into value_pairs instead, chunks of key_chunk / 2 pairs, and each step
// of a register block takes a pair of keys (the pair's lanes reduced by vdpbf16ps).
inline void schedule_weighted_sum_by_key_chunks(SdpaFuncs& f, const CpuTiling& t,
                                                const Halide::LoopLevel& at) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var blk_i("blk_i"), lane_i("lane_i"), blk_c("blk_c"), lane_c("lane_c"), chunk("key_chunk");
  RVar chunk_r("key_chunk_r"), key_r("key_r");
  Func chunk_sum;
  if (f.bf16_pairs) {
    f.value_pairs.compute_at(f.out, x.h)
        .reorder(x.p, x.c, x.j)
        .unroll(x.p)
        .vectorize(x.c, t.vector, TailStrategy::RoundUp);
    chunk_sum = f.weighted_sum.update()
                    .split(f.r_pairs.y, chunk_r, key_r, t.key_chunk / 2)
                    .rfactor(chunk_r, chunk);
  } else {
    f.values.compute_at(f.out, x.h).vectorize(f.values.args()[0], t.vector);
    chunk_sum =
        f.weighted_sum.update().split(f.r_pv, chunk_r, key_r, t.key_chunk).rfactor(chunk_r, chunk);
  }
  f.weighted_sum.compute_at(at).vectorize(x.c, t.vector);
  f.weighted_sum.update()
      .split(x.i, blk_i, lane_i, t.pv_rows, TailStrategy::RoundUp)
      .split(x.c, blk_c, lane_c, t.pv_cols, TailStrategy::RoundUp)
      .reorder(lane_c, lane_i, blk_c, blk_i, chunk_r)
      .vectorize(lane_c, t.vector)
      .unroll(lane_c)
      .unroll(lane_i);
  // bound_extent: with masks, bounds inference narrows the rows a chunk serves (the predicate
  // involves i); the unrolled block needs its constant pv_rows.
  chunk_sum.compute_at(f.weighted_sum, blk_c)
      .bound_extent(x.i, t.pv_rows)
      .reorder(x.c, x.i)
      .vectorize(x.c, t.vector)
      .unroll(x.c)
      .unroll(x.i);
  if (f.bf16_pairs) {
    const RVar in_pair(f.r_pairs.x);
    chunk_sum.update().reorder(in_pair, x.c, x.i, key_r).atomic().vectorize(in_pair);
  } else {
    chunk_sum.update().reorder(x.c, x.i, key_r);
  }
  chunk_sum.update().vectorize(x.c, t.vector).unroll(x.c).unroll(x.i);
  // v without NaN/Inf (checked by the caller): plain FMAs, no test of each weight. Specialized
  // here, not on chunk_sum, so each version has its own register-block loop: one loop entered from
  // both versions got an AVX2 accumulator spilled (causal 2048², 1 thread: 98 vs 74 ms).
  if (f.hides_keys && !Internal::is_const_one(f.values_finite)) {
    f.weighted_sum.update().specialize(f.values_finite);
  }
}

// The split-KV combine (both tilings): a few floats per split and row, at the tile of `out`.
inline void schedule_split_combine(SdpaFuncs& f, const CpuTiling& t, Halide::Var tile) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  for (Func stat : {f.lse_max, f.split_weight, f.weight_total}) stat.compute_at(f.out, tile);
  f.out_total.compute_at(f.out, tile).vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
  f.out_total.update().reorder(x.c, x.i, f.r_s).vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
}

// Prefill (both schedules below): the tile's keys go in splits one after another, each computing
// every stage it needs in place. Schedules split_result at the tile and each split's logsumexp,
// and returns the level inside a split where its stages go.
inline Halide::LoopLevel schedule_prefill_splits(SdpaFuncs& f, const CpuTiling& t,
                                                 Halide::Var tile) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  LoopLevel split_level(f.out, tile);
  if (f.split_gathered.defined()) {
    // mask_mod: the tile's splits one visited split at a time (SdpaFuncs::split_gathered).
    f.split_gathered.compute_at(f.out, tile).vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
    f.split_gathered.update()
        .reorder(x.c, x.group_row, f.r_visited, x.g)
        .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
    split_level = LoopLevel(f.split_gathered, f.r_visited.x);
  }
  f.split_result.compute_at(split_level)
      .reorder(x.c, x.i, x.s, x.h, x.b)
      .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
  const LoopLevel at(f.split_result, x.s);
  f.split_lse.compute_at(at).vectorize(x.i, t.vector, TailStrategy::GuardWithIf);
  return at;
}

// The rest of a prefill split: P·V by key chunks, then each per-split buffer allocated once per
// tile (hoist_storage) and reused by every split, and the combine of the splits.
inline void finish_prefill_splits(SdpaFuncs& f, const CpuTiling& t, Halide::Var tile,
                                  const Halide::LoopLevel& at) {
  using namespace Halide;
  schedule_weighted_sum_by_key_chunks(f, t, at);
  const LoopLevel tile_level(f.out, tile);
  // Halide 21 sizes a hoisted allocation from the lets around it as they were before storage
  // flattening, so a size that depends on query_lengths (the masked kernels) reached codegen as
  // an unlowered call. Bounded storage keeps the sizes free of it: a tile's rows (blocks of a
  // short tile shift inwards, up to a block below the tile), a split's keys (and a register
  // block's worth of padding). Halide checks each bound at run time.
  const AttentionVars& x = f.vars;
  for (Func stage : {f.split_lse, f.logits, f.row_max, f.weights, f.row_sum, f.weighted_sum}) {
    stage.hoist_storage(tile_level);
    if (f.grouped) continue;
    stage.bound_storage(x.i, t.query_tile + t.score_queries);
    if (stage.name() == f.logits.name() || stage.name() == f.weights.name()) {
      stage.bound_storage(x.j, f.key_split + 64);
    }
  }
  schedule_split_combine(f, t, tile);
}

// Fused rotary embeddings (prefill): the cos/sin table once per call, before the tiles (every tile
// and head reads its rows); a tile's queries rotated with the tile, before the scale; a head's
// keys rotated once, before its tiles, into a buffer (Sk × D floats, in L2 for a few thousand
// keys) that Q·Kᵀ reads in place of k. Rotating each split's keys per query tile instead
// recomputed them Sq / query_tile times: +17-28% over the call without RoPE at 8×2048²×64 causal,
// against +6-10% once per head (standalone harness, AVX-512).
inline void schedule_fused_rope(SdpaFuncs& f, const CpuTiling& t, Halide::Var tile) {
  using namespace Halide;
  const Var pair = f.rope_table.args()[0], position = f.rope_table.args()[1];
  Var block("rope_block"), row("rope_row");
  f.rope_table.compute_root()
      .split(position, block, row, 64, TailStrategy::GuardWithIf)
      .parallel(block)
      .vectorize(pair, t.vector, TailStrategy::GuardWithIf);
  schedule_rotated_rows(f.rotated_q, LoopLevel(f.out, tile), t.vector);
  schedule_rotated_rows(f.rotated_k, LoopLevel(f.out, f.vars.h), t.vector);
}

// Prefill: many queries per tile, so Q·Kᵀ reuses each key across a register block of queries.
// The tile's keys go in splits (an online softmax over key blocks): every stage below runs once per
// split, so the score and weight buffers hold query_tile × key_split floats (96 KiB each at 512
// keys, inside L2) however long the sequence; each split leaves its (out, logsumexp) for the
// combine at the end of the tile.
inline void schedule_prefill_stages(SdpaFuncs& f, const CpuTiling& t, Halide::Var tile) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var blk_i("blk_i"), blk_j("blk_j"), lane_i("lane_i"), lane_j("lane_j");

  // The query tile transposed once (queries innermost), pre-multiplied by the scale.
  f.q_scaled.compute_at(f.out, tile)
      .reorder_storage(x.i, x.d, x.h, x.b)
      .reorder(x.i, x.d)
      .vectorize(x.i, t.vector);

  const LoopLevel at = schedule_prefill_splits(f, t, tile);
  if (f.rope_table.defined()) schedule_fused_rope(f, t, tile);

  // Q·Kᵀ: the split's logits stored key-major; each score_queries × score_keys block of scores is
  // accumulated in registers over d, then masked and copied out.
  Func scores_tile = f.logits;
  std::vector<Var> scores_storage{x.i, x.j, x.h, x.b};
  if (f.grouped) {
    // The same blocks over the keys the group may see (SdpaFuncs::r_logit_keys), an update.
    const RVar lane_r(f.r_logit_keys.x), blk_r(f.r_logit_keys.y);
    f.logits.compute_at(at).reorder_storage(x.i, x.j, x.s, x.g, x.h, x.b);
    Stage blocks = f.logits.update();
    blocks.split(x.i, blk_i, lane_i, t.score_queries)
        .reorder(lane_i, lane_r, blk_i, blk_r, x.s, x.g, x.h, x.b)
        .vectorize(lane_i, t.vector)
        .unroll(lane_i)
        .unroll(lane_r);
    if (f.masked) blocks.specialize(f.has_bias);
    scores_storage.insert(scores_storage.begin() + 2, x.g);
  } else {
    scores_tile.compute_at(at)
        .reorder_storage(x.i, x.j, x.h, x.b)
        .split(x.j, blk_j, lane_j, t.score_keys)
        .split(x.i, blk_i, lane_i, t.score_queries)
        .reorder(lane_i, lane_j, blk_i, blk_j)
        .vectorize(lane_i, t.vector)
        .unroll(lane_i)
        .unroll(lane_j);
    // Calls without biases skip the bias terms and the mask tensors.
    if (f.masked) scores_tile.specialize(f.has_bias);
    for (const Expr& form : f.logit_cases) scores_tile.specialize(form);
  }
  // One register block: blk_i is the last stage's, the update's when grouped.
  f.scores.compute_at(scores_tile, blk_i)
      .reorder_storage(scores_storage)
      .reorder(x.i, x.j)
      .vectorize(x.i, t.vector)
      .unroll(x.i)
      .unroll(x.j);
  f.scores.update().reorder(x.i, x.j, f.r_d).vectorize(x.i, t.vector).unroll(x.i).unroll(x.j);
  // Other score forms cost far more per term than an FMA: unrolling them only slows compiles.
  for (int head_dim : f.dot_score ? std::vector<int>{64, 128} : std::vector<int>{}) {
    RVar d_outer("d_outer"), d_inner("d_inner");
    f.scores.update()
        .specialize(f.head_dim == head_dim)
        .split(f.r_d, d_outer, d_inner, 4)
        .unroll(d_inner);
  }

  // Softmax statistics, vectorized across the tile's queries.
  f.row_max.compute_at(at).vectorize(x.i, t.vector);
  f.row_max.update().reorder(x.i, f.r_j).vectorize(x.i, t.vector);
  if (f.grouped) {
    f.weights.compute_at(at).reorder_storage(x.i, x.j, x.s, x.g, x.h, x.b);
    f.weights.update().reorder(x.i, f.r_weight_keys.x, x.s, x.g, x.h, x.b).vectorize(x.i, t.vector);
  } else {
    f.weights.compute_at(at)
        .reorder_storage(x.i, x.j, x.s, x.h, x.b)
        .reorder(x.i, x.j)
        .vectorize(x.i, t.vector);
  }
  f.row_sum.compute_at(at).vectorize(x.i, t.vector);
  f.row_sum.update().reorder(x.i, f.r_j).vectorize(x.i, t.vector);

  finish_prefill_splits(f, t, tile, at);
}

// Prefill of bfloat16 q, k and v (SdpaFuncs::bf16_pairs): the same tiles and splits as
// schedule_prefill_stages, but every vector holds pairs (vdpbf16ps: 16 lanes of two bfloat16
// products each), so the stages run along keys. Each head's k is regrouped once into key_pairs
// (a vector: 16 keys × one pair of features) and its v into value_pairs (16 features × one pair
// of keys). Q·Kᵀ blocks of score_queries queries × score_keys keys broadcast a pair of a query's
// features against key vectors; the softmax runs along each row; P·V blocks of pv_rows rows ×
// pv_cols features broadcast a pair of a row's weights against value vectors.
inline void schedule_prefill_pair_stages(SdpaFuncs& f, const CpuTiling& t, Halide::Var tile) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var blk_i("blk_i"), blk_j("blk_j"), lane_i("lane_i"), lane_j("lane_j");

  // Per head, before its tiles: k and v regrouped into pairs (a head's k and v: small next to
  // the head's Sq × Sk × (D + Dv) products).
  // key_pairs: a vector of keys at a time (strided loads of k, one dense interleaved store);
  // value_pairs: rows of v, two at a time, interleaved (schedule_weighted_sum_by_key_chunks).
  f.key_pairs.compute_at(f.out, x.h)
      .reorder(x.p, x.j, x.d)
      .unroll(x.p)
      .vectorize(x.j, t.vector, TailStrategy::RoundUp);

  const LoopLevel at = schedule_prefill_splits(f, t, tile);

  // Q·Kᵀ: the split's logits stored query-major (keys innermost); each block accumulates in
  // registers over the feature pairs.
  Func scores_tile = f.logits;
  scores_tile.compute_at(at)
      .split(x.j, blk_j, lane_j, t.score_keys)
      .split(x.i, blk_i, lane_i, t.score_queries)
      .reorder(lane_j, lane_i, blk_i, blk_j)
      .vectorize(lane_j, t.vector)
      .unroll(lane_j)
      .unroll(lane_i);
  // bound_extent: the logits need no scores past Sk (bounds inference trims the block there),
  // but the unrolled block needs its constant shape.
  f.scores.compute_at(scores_tile, blk_i)
      .bound_extent(x.j, t.score_keys)
      .vectorize(x.j, t.vector)
      .unroll(x.j)
      .unroll(x.i);
  RVar pair_x(f.r_d.x), pair_y(f.r_d.y);
  f.scores.update()
      .reorder(pair_x, x.j, x.i, pair_y)
      .atomic()
      .vectorize(pair_x)
      .vectorize(x.j, t.vector)
      .unroll(x.j)
      .unroll(x.i);

  // Softmax along each row (every split is whole: f.hides_keys), each lane keeping its own max
  // and sum over the split's keys.
  f.row_max.compute_at(at);
  reduce_key_vectors(f, t, f.row_max);
  f.weights.compute_at(at).vectorize(x.j, t.vector);
  f.row_sum.compute_at(at);
  reduce_key_vectors(f, t, f.row_sum);

  finish_prefill_splits(f, t, tile, at);
}

// Decode Q·Kᵀ as a transposing reduction, where `when` holds: each key's dot product first as a
// vector of partial sums over d (`parts`, rfactor of d's vector lanes), then the scores `keys` keys
// at a time (every row and head inside the block of keys), reduced from the block's vectors by a
// tree of two-source permutes and adds (about 3 per key instead of a 15-step horizontal add per key
// and row). The caller places `parts`, whose update runs over `d_outer`. The Var names start with
// `prefix`: they must be unique in the pipeline (reusing the decode schedule's gave wrong results).
struct TransposedScores {
  Halide::Func parts;
  Halide::Var part;
  Halide::RVar d_outer;
};
inline TransposedScores schedule_transposed_scores(SdpaFuncs& f, const CpuTiling& t,
                                                   const Halide::Expr& when, int keys,
                                                   const std::string& prefix) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var key_block(prefix + "_key_block"), key_lane(prefix + "_key_lane"), part(prefix + "_part");
  RVar d_outer(prefix + "_d_outer"), d_lane(prefix + "_d_lane");
  Func parts = f.scores.update()
                   .specialize(when)
                   .split(f.r_d, d_outer, d_lane, t.vector)
                   .rfactor(d_lane, part);
  f.scores.update()
      .specialize(when)
      .split(x.j, key_block, key_lane, keys, TailStrategy::RoundUp)
      .reorder(d_lane, key_lane, x.i, x.h, key_block)
      .atomic()
      .vectorize(d_lane)
      .vectorize(key_lane);
  return {parts, part, d_outer};
}

// GQA decode Q·Kᵀ (an item's query heads share one kv head): a vector of keys at a time
// (schedule_transposed_scores), each key's row of k read in order, so the first head streams k
// from memory sequentially and the others find it in L1. Only where `when` holds (default: GQA),
// which takes D >= vector, a whole number of vectors.
inline void schedule_grouped_scores(SdpaFuncs& f, const CpuTiling& t,
                                    const Halide::Expr& when = Halide::Expr()) {
  const AttentionVars& x = f.vars;
  const Halide::Expr grouped =
      when.defined() ? when
                     : f.heads_per_kv > 1 && f.head_dim >= t.vector && f.head_dim % t.vector == 0;
  const std::string prefix = when.defined() ? "rows_group" : "group";
  auto [parts, part, d_outer] = schedule_transposed_scores(f, t, grouped, t.vector, prefix);
  // One row's block: vector × vector partial sums, in registers.
  parts.compute_at(f.scores, x.i)
      .reorder_storage(part, x.j, x.i, x.h, x.b)
      .vectorize(part)
      .unroll(x.j);
  parts.update().reorder(part, d_outer, x.j).vectorize(part).unroll(x.j);
}

// GQA decode P·V: each head's accumulators for a block of value features stay in registers over a
// chunk of keys (32: the chunk's rows of v stay in L1 for the group's other heads), then add into
// the split's sums. Blocks of 8 vectors (the accumulators fill half the registers on AVX-512 and
// NEON, all but a few on AVX2), or 4 where Dv is no multiple of 8. Only where `when` holds.
inline void schedule_grouped_weighted_sum(
    SdpaFuncs& f, const CpuTiling& t, const Halide::Expr& when = Halide::Internal::const_true()) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  for (int vectors : {8, 4}) {
    const int block = vectors * t.vector;
    const Expr whole_blocks = when && f.value_dim % block == 0;
    RVar chunk_r("group_chunk_r"), key_r("group_key_r");
    Var chunk("group_key_chunk"), blk_c("group_blk_c"), lane_c("group_lane_c");
    Func chunk_sum = f.weighted_sum.update()
                         .specialize(whole_blocks)
                         .split(f.r_pv, chunk_r, key_r, 32)
                         .rfactor(chunk_r, chunk);
    f.weighted_sum.update()
        .specialize(whole_blocks)
        .split(x.c, blk_c, lane_c, block)
        .reorder(lane_c, blk_c, x.i, x.h, chunk_r)
        .vectorize(lane_c, t.vector)
        .unroll(lane_c);
    chunk_sum.compute_at(f.weighted_sum, blk_c)
        .bound_extent(x.c, block)
        .vectorize(x.c, t.vector)
        .unroll(x.c);
    chunk_sum.update().reorder(x.c, key_r).vectorize(x.c, t.vector).unroll(x.c);
  }
}

// A paged cache's CPU decode items (schedule_decode_stages).
struct PagedItems {
  // One work item per (key split, batch) covering every head, the heads inside the key loops, for
  // a pool that interleaves kv heads per position.
  bool all_heads = false;
  // Where k's (v's) kv heads lie further apart than its key positions (a [blocks, Hkv, slots, D]
  // pool), Q·Kᵀ (P·V) takes the heads outside the keys, so it still reads its pool in order.
  // Undefined: never.
  Halide::Expr k_heads_outer, v_heads_outer;
  // The pools, which the GQA row blocks' Q·Kᵀ and the whole-split P·V prefetch prefetch_keys key
  // positions ahead, one line per vector, and every other dot product line by line: a key
  // position ahead in the whole-split kernel (its keys in pairs), as it reads them in the
  // predicated one (undefined: no prefetch).
  Halide::Parameter k_pool, v_pool;
  Halide::Expr prefetch_keys;
};

// GQA decode as one head's rows (attention_contract::kDecodeRowBlock rows at D =
// kDecodeRowBlockDim, one head per kv head; 8 rows as two such blocks, kDecodeRowBlockRows, each
// key block's rows of k from memory for the first block and from L1 for the second: 1x64(8)x1x
// 4096x128 on AVX-512 1.50-1.53 -> 1.30-1.34 ms, paged with blocks of 16 2.51-2.66 -> 1.72-1.83):
// Q·Kᵀ in register blocks of a few keys × every row,
// each key's row of k read front to back once for all rows (16 accumulators with 32 registers, 8
// with 16), D unrolled (its constant extent leaves no tail guard in the loop, which kept the
// accumulators on the stack), then the block's vectors reduced into scores
// (schedule_transposed_scores). Reading k key after key keeps the stream sequential: the same block
// with the features outside the keys computed faster in cache but ran slower from memory.
// P·V at Dv = kDecodeRowBlockDim where a pair of rows' whole outputs fit half the registers
// (AVX-512: 2 rows × 8 vectors): each pair accumulates over chunks of 8 keys, the first pair
// reading the chunk's rows of v whole and in order, the second from L1 (blocks of features, which
// read half rows at a time, and chunks of 4, 16 or 32 keys ran slower from memory).
// A paged pool's k (PagedItems::k_pool): each vector of a key's row prefetches its line
// prefetch_keys positions ahead, for every row of the block (a prefetch per line and key would
// need the rows outside the features; paged 8x32(8)x1x2048x128, block 16: 5.6-6.2 -> 4.9-5.1
// ms).
inline void schedule_row_block(SdpaFuncs& f, const CpuTiling& t,
                               const PagedItems& paged = PagedItems()) {
  using namespace Halide;
  if (!f.query_rows.defined() || !f.dot_score) return;
  const AttentionVars& x = f.vars;
  const int rows = static_cast<int>(attention_contract::kDecodeRowBlock);
  const int dim = static_cast<int>(attention_contract::kDecodeRowBlockDim);
  if (dim % t.vector != 0) return;
  const int keys = t.vector >= 16 ? 4 : 2;
  // One specialization per row count (a constant each, so the blocks' extents are known). Two
  // blocks of 4 rows only with 32 registers: with 16 (AVX2), 1x64(8)x1x4096x128 took 1.93-1.99 ms
  // so against 1.68-1.79 through the GQA schedules, which AVX2 and NEON keep for 8 rows
  // (schedule_grouped_scores and schedule_grouped_weighted_sum over rows, `rows_group` below).
  const bool rows_group = !attention_contract::two_row_blocks(t);
  for (const int item_rows : attention_contract::kDecodeRowBlockRows) {
    const std::string name = "row" + std::to_string(item_rows);
    const Expr row_block = f.heads_per_kv == 1 && f.query_rows == item_rows && f.head_dim == dim;
    if (item_rows > rows && rows_group) {
      schedule_grouped_scores(f, t, row_block);
      continue;
    }
    auto [parts, part, d_outer] = schedule_transposed_scores(f, t, row_block, keys, name);
    // Two blocks: each key block's 4 rows of k come from memory for the first, from L1 for the
    // second (8 rows × 2 keys would need as many registers but twice the loads of q per k).
    Var block_index(name + "_block"), in_block(name + "_in_block");
    const VarOrRVar rows_loop = item_rows > rows ? VarOrRVar(block_index) : VarOrRVar(x.h);
    if (item_rows > rows) {
      f.scores.update().specialize(row_block).split(x.i, block_index, in_block, rows);
    }
    parts.compute_at(LoopLevel(f.scores, rows_loop))
        .bound_extent(x.i, rows)
        .reorder_storage(part, x.j, x.i, x.h, x.b)
        .vectorize(part)
        .unroll(x.i)
        .unroll(x.j);
    Stage block = parts.update();
    block.reorder(part, d_outer, x.i, x.j).vectorize(part).unroll(d_outer).unroll(x.i).unroll(x.j);
    if (paged.k_pool.defined()) {
      block.prefetch(paged.k_pool, d_outer, x.j, paged.prefetch_keys,
                     PrefetchBoundStrategy::NonFaulting);
    }
  }

  const int pair = 2, chunk_keys = 8;
  for (const int item_rows : attention_contract::kDecodeRowBlockRows) {
    const std::string name = "row" + std::to_string(item_rows);
    if (item_rows > rows && rows_group) {
      schedule_grouped_weighted_sum(f, t, f.heads_per_kv == 1 && f.query_rows == item_rows);
      continue;
    }
    // Not the whole-split P·V (SdpaInputs::whole_split_pv), which prefetches v a key ahead in its
    // own loop (schedule_decode_stages): in these chunks Halide 21 bounds the prefetch as every
    // block of the pool (paged GQA rows 8x32(8)x1x2048x128, block 16: 4.5-4.8 ms in chunks, 3.7
    // without).
    if (dim / t.vector * pair > 16 || f.whole_split_pv) continue;
    const Expr pairs = f.heads_per_kv == 1 && f.query_rows == item_rows && f.value_dim == dim;
    RVar chunk_r(name + "_chunk_r"), key_r(name + "_key_r");
    Var chunk(name + "_key_chunk"), pair_index(name + "_pair"), in_pair(name + "_in_pair");
    Func chunk_sum = f.weighted_sum.update()
                         .specialize(pairs)
                         .split(f.r_pv, chunk_r, key_r, chunk_keys)
                         .rfactor(chunk_r, chunk);
    f.weighted_sum.update()
        .specialize(pairs)
        .split(x.i, pair_index, in_pair, pair)
        .reorder(x.c, in_pair, pair_index, x.h, chunk_r)
        .vectorize(x.c, t.vector);
    chunk_sum.compute_at(f.weighted_sum, pair_index)
        .bound_extent(x.c, dim)
        .bound_extent(x.i, pair)
        .reorder_storage(x.c, x.i)
        .vectorize(x.c, t.vector)
        .unroll(x.c)
        .unroll(x.i);
    chunk_sum.update().reorder(x.c, x.i, key_r).vectorize(x.c, t.vector).unroll(x.c).unroll(x.i);
  }
}

// Decode (few queries), split-KV: one parallel work item per (key split, kv head, batch), so even
// a single head with a long KV cache fills every core; each item streams its split of K and V once
// for every query head that reads that kv head (GQA/MQA: the group's queries are a small matrix
// against the same keys, so each row of k and v comes from memory once and serves the whole group
// from L1), and leaves Dv + 1 floats per row (its output and logsumexp), which the tile of `out`
// combines. Every stage runs along keys or features, never across queries, so Sq == 1 wastes no
// lanes. Q·Kᵀ is one dot product per key and row, vectorized over d (rfactor into vector partial
// sums, then one horizontal add), one key at a time so k streams in order; the softmax vectorizes
// over keys; P·V adds each key's whole row of v into every row's accumulators (measured: blocks
// of features that pass over the split once per block read v at ~11 GB/s from memory on one
// core, whole rows at ~18). With GQA, Q·Kᵀ and P·V go by blocks of keys instead
// (schedule_grouped_scores, schedule_grouped_weighted_sum).
//
// PagedItems::all_heads (a paged cache, [blocks, slots, kv heads, D]): one item per (key split,
// batch) with every head inside the key loops, so each key position's rows of all kv heads,
// adjacent in memory, are read together (per-head items read one row per position, a page apart:
// 3-4x slower there). A heads-major pool ([blocks, kv heads, slots, D]: k_heads_outer,
// v_heads_outer) takes the heads outside the keys instead in Q·Kᵀ and P·V, where GQA rows do not
// apply. With GQA the heads go by the same blocks of keys as above; as one head's rows
// (schedule_row_block) each key's rows of every kv head are still read together, the row blocks
// inside the key blocks (paged 8x32(8)x1x2048x128 as rows: see bench/RESULTS.md).
inline void schedule_decode_stages(SdpaFuncs& f, const CpuTiling& t, Halide::Var tile,
                                   const PagedItems& paged = PagedItems()) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  const bool all_heads = paged.all_heads;
  const Expr &k_heads_outer = paged.k_heads_outer, &v_heads_outer = paged.v_heads_outer;
  Var item("item"), split_head("split_head"), lane("lane"), kv_head("kv_head"), group("group");
  Var key_pair("key_pair"), key_in_pair("key_in_pair");
  RVar d_outer("d_outer"), d_lane("d_lane"), key_outer("key_outer"), key_lane("key_lane");
  f.split_result.compute_root();
  if (all_heads) {
    f.split_result.reorder(x.c, x.i, x.h, x.s, x.b)
        .fuse(x.s, x.b, item)
        .parallel(item)
        .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
  } else {
    // Without GQA the items stay per head: the grouped loop nest below took 1.6x the time there.
    f.split_result.specialize(f.heads_per_kv == 1)
        .reorder(x.c, x.i, x.s, x.h, x.b)
        .fuse(x.s, x.h, split_head)
        .fuse(split_head, x.b, item)
        .parallel(item)
        .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
    f.split_result.split(x.h, kv_head, group, f.heads_per_kv, TailStrategy::GuardWithIf)
        .reorder(x.c, x.i, group, x.s, kv_head, x.b)
        .fuse(x.s, kv_head, split_head)
        .fuse(split_head, x.b, item)
        .parallel(item)
        .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
  }
  const LoopLevel at(f.split_result, item);
  f.split_out.compute_at(at).vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
  f.split_lse.compute_at(at);

  // q is not clamped in d: guard instead of rounding up.
  f.q_scaled.compute_at(at).vectorize(x.d, t.vector, TailStrategy::GuardWithIf);
  f.scores.compute_at(at).vectorize(x.j, t.vector);
  // D >= dot_lanes: the lanes' horizontal add has dot_lanes terms (constant, so vectorized).
  const Expr wide_keys = f.head_dim >= t.dot_lanes;
  schedule_row_block(f, t, paged);
  schedule_grouped_scores(f, t);
  Func lanes = f.scores.update()
                   .specialize(wide_keys)
                   .split(f.r_d, d_outer, d_lane, t.dot_lanes)
                   .rfactor(d_lane, lane);
  // Keys outside the query rows and heads: a key's row of k stays in L1 while every row uses it.
  // A heads-major paged pool: heads outside the keys instead, each head's keys read in order
  // (1x32x1x4096x128, blocks of 16 or 64: 7.2 -> 4.0-4.8 ms; across the heads, each head's rows
  // lie a block apart).
  // A paged pool's whole-split kernel: the keys in pairs, the rows outside them, the lanes computed
  // for a pair's every head at once, so their key loop (extent 2) survives lowering and k can be
  // prefetched a key position ahead (below). A heads-major pool keeps one key at a time. Not the
  // predicated kernel: there its heads-major block-16 decode ran 10-15% slower on two threads
  // (4.0-4.3 -> 4.6-5.0 ms, P·V's share up, the lowered Q·Kᵀ the same; partly the binary's or
  // the machine's, see bench/RESULTS.md).
  const bool keys_in_pairs = paged.k_pool.defined() && f.whole_split_pv;
  if (all_heads && k_heads_outer.defined()) {
    f.scores.update()
        .specialize(wide_keys)
        .specialize(k_heads_outer)
        .reorder(d_lane, x.i, x.j, x.h)
        .atomic()
        .vectorize(d_lane);
  }
  Stage keys_outer = f.scores.update().specialize(wide_keys);
  if (keys_in_pairs) {
    keys_outer.split(x.j, key_pair, key_in_pair, 2, TailStrategy::GuardWithIf)
        .reorder(d_lane, x.h, key_in_pair, x.i, key_pair);
  } else {
    keys_outer.reorder(d_lane, x.i, x.h, x.j);
  }
  keys_outer.atomic().vectorize(d_lane);
  // Vectors of dot_lanes lanes: the backend splits them into independent registers.
  lanes.compute_at(f.scores, x.i).vectorize(lane);
  if (keys_in_pairs) {
    // A pair's lanes (every head's), the lane innermost. On the stack: the heads' count would
    // otherwise put them on the heap.
    lanes.store_in(MemoryType::Stack).reorder_storage(lane, x.j);
  }
  // A paged pool: each line of a key's row of k is prefetched one key position ahead (every head's
  // row of that key, in a slots-major pool 16 KiB ahead at 32 kv heads), the dot's vector split
  // into its lines so Halide's prefetch box is one line. Measured on 1x32x1x4096x128 against the
  // line prefetched as it is read (keys one at a time, where the lanes' key loop has extent 1 and
  // Halide 21 drops it and any key offset with it), blocks of 16 / 64: one thread 6.1-6.7 /
  // 6.1-6.7 -> 5.2-5.6 / 5.2-5.4 ms, two 3.6-4.1 / 3.5-3.8 -> 3.4-3.8 / 3.5-3.6 (contiguous
  // 4.1-4.5 and 2.9-3.2). The pairs with the line prefetched as it is read: 4.5-4.6 ms on two.
  // Not for a heads-major pool (4.3-4.5 -> 4.8 ms there).
  if (paged.k_pool.defined()) {
    Var line("lane_line"), in_line("lane_in_line");
    if (paged.k_heads_outer.defined()) {
      lanes.update().specialize(paged.k_heads_outer).reorder(lane, d_outer).vectorize(lane);
    }
    // Both paged kernels. The pairs prefetch a key ahead; keys one at a time (the predicated
    // kernel) prefetch the line as it is read, offset 0 (Halide would drop any other).
    lanes.update()
        .reorder(lane, d_outer, x.i, x.h, x.j)
        .split(lane, line, in_line, t.vector)
        .vectorize(in_line)
        .unroll(line)
        .prefetch(paged.k_pool, line, x.j, keys_in_pairs ? 1 : 0,
                  PrefetchBoundStrategy::NonFaulting);
  } else {
    lanes.update().reorder(lane, d_outer).vectorize(lane);
  }
  // Short keys (kernel regression on a few features): a vector of keys at a time, one feature
  // after another (strided loads of k), instead of mostly empty feature lanes.
  f.scores.update().reorder(f.r_d, x.j, x.i).vectorize(x.j, t.vector);
  for (Func stat : {f.row_max, f.row_sum}) {
    stat.compute_at(at);
    reduce_key_vectors(f, t, stat);
  }
  f.weights.compute_at(at).vectorize(x.j, t.vector);
  if (f.custom_logits) f.logits.compute_at(at).vectorize(x.j, t.vector);
  if (f.masked) f.logits.specialize(f.has_bias);
  for (const Expr& form : f.logit_cases) f.logits.specialize(form);
  // v is read once, in place (copying it would double the memory traffic). Guarded vectors keep
  // the rows inside [0, Dv).
  f.weighted_sum.compute_at(at).vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
  // Whole splits with rows shorter than a vector (kernel regression on a few features): vectors
  // of keys instead (strided loads of v), all of a key vector's features before the next, each
  // lane its own partial sums. Not for SDPA: the specialization alone made its decode loop ~5%
  // slower at Dv = 128.
  if (f.whole_splits) {
    const Expr short_rows = f.value_dim < t.vector;
    Func lanes = f.weighted_sum.update()
                     .specialize(short_rows)
                     .split(f.r_pv, key_outer, key_lane, t.vector)
                     .rfactor(key_lane, lane);
    lanes.compute_at(f.weighted_sum, x.i).reorder_storage(lane, x.c).vectorize(lane);
    lanes.update().reorder(lane, x.c, key_outer).vectorize(lane);
    f.weighted_sum.update()
        .specialize(short_rows)
        .reorder(key_lane, x.c)
        .atomic()
        .vectorize(key_lane);
  }
  if (all_heads) {
    // A paged cache with GQA: by groups too (8x32(8)x1x2048x128, block size 16: 1.5x the
    // contiguous call instead of 2.1x).
    schedule_grouped_weighted_sum(f, t, f.heads_per_kv > 1);
    // Every head inside each key, so v is read in pool order, as k is by Q·Kᵀ; the heads'
    // accumulators (H × Dv floats) stay in L1. Blocks of 4 keys with the heads inside them, each
    // head's 4 rows a page apart, took 1.4x the time from memory (1x32x1x4096x128, block 16 or
    // 64: 7.1 -> 5.0 ms).
    // A heads-major pool: the heads outside the keys, each head's keys in pool order.
    if (v_heads_outer.defined()) {
      f.weighted_sum.update()
          .specialize(v_heads_outer)
          .reorder(x.c, x.i, f.r_pv, x.h)
          .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
    }
    // Without a predicate (SdpaInputs::whole_split_pv), each vector of v prefetches its line of
    // the row prefetch_keys keys ahead: the hardware prefetchers do not keep up with this order
    // (every head's row of a key, then the next key) on their own (see bench/RESULTS.md). A
    // vector is at most one line, so Halide's prefetch covers it exactly (a wider box would not:
    // Halide 21 steps its lines by 64 elements, not bytes). Inside a predicated loop the
    // prefetch would keep the predicate's test per vector instead of per key. Where Dv is whole
    // vectors they go without a tail guard: the guard made each vector's box a computed extent,
    // which kept the table lookup and clamps of its address inside the vector loop (about 30
    // instructions per vector; 1x32x1x256x128, from cache: 0.15 -> 0.11 ms).
    if (f.whole_split_pv && paged.v_pool.defined()) {
      RVar key("pv_key");  // named, so the prefetch can find its loop
      const auto prefetching = [&](Stage pv, TailStrategy tail) {
        pv.rename(f.r_pv, key)
            .reorder(x.c, x.i, x.h, key)
            .vectorize(x.c, t.vector, tail)
            .prefetch(paged.v_pool, x.c, key, paged.prefetch_keys,
                      PrefetchBoundStrategy::NonFaulting);
      };
      prefetching(f.weighted_sum.update().specialize(f.value_dim % t.vector == 0),
                  TailStrategy::RoundUp);
      prefetching(f.weighted_sum.update(), TailStrategy::GuardWithIf);
    } else {
      f.weighted_sum.update()
          .reorder(x.c, x.i, x.h, f.r_pv)
          .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
    }
  } else {
    // Without GQA: heads outside the keys (~10% faster); with GQA each key's row of v serves every
    // head of the group.
    f.weighted_sum.update()
        .specialize(f.heads_per_kv == 1)
        .reorder(x.c, x.i, f.r_pv)
        .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
    schedule_grouped_weighted_sum(f, t);
    f.weighted_sum.update()
        .reorder(x.c, x.i, x.h, f.r_pv)
        .vectorize(x.c, t.vector, TailStrategy::GuardWithIf);
  }

  schedule_split_combine(f, t, tile);
}

// mask_mod's key ranges (mod_key_scan), if any: one parallel pass before the tiles, each group's
// keys a vector at a time (the rows of the group inside, so each key vector is stored once).
inline void schedule_mod_key_scan(SdpaFuncs& f, const CpuTiling& t) {
  if (!f.mod_key_range.defined()) return;
  const AttentionVars& x = f.vars;
  f.mod_key_range.compute_root().parallel(x.b).parallel(x.g);
  f.mod_key_range.update().parallel(x.b).parallel(x.g);
  f.mod_key_seen.compute_at(f.mod_key_range, x.g).vectorize(x.j, t.vector);
  f.mod_key_seen.update().reorder(x.j, f.r_mod_rows).vectorize(x.j, t.vector);
}

// Schedules out and logsumexp (both pipeline outputs) and every stage they consume, with tiling
// `t` (prefill's when wide_queries, else decode's).
inline void schedule_sdpa_cpu(SdpaFuncs& f, const CpuTiling& t, bool wide_queries,
                              const PagedItems& paged = PagedItems()) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  Var tile("tile"), i_in("i_in");

  // One parallel work item per (query tile, head, batch); GuardWithIf so the last tile never writes
  // past Sq (the stages inside round up and read clamped inputs instead). The three loops are
  // nested parallel loops, not fused: with fused loops compute_with gave logsumexp whole-range
  // bounds. The tile loop is not partitioned: Halide's separate copy of every stage for the last
  // tile ran no faster (sdpa_bench: within the noise at every shape), made the kernels up to 45%
  // larger and took a fifth of the build's CPU time. Nor are the head and batch loops: their
  // copies come out empty, but the loop trimming pass analysed each (the same machine code, a
  // quarter to a third less generation time for the prefill kernels; commit body).
  auto tile_loops = [&](Func func) {
    func.split(x.i, tile, i_in, t.query_tile, TailStrategy::GuardWithIf)
        .partition(tile, Partition::Never)
        .partition(x.h, Partition::Never)
        .partition(x.b, Partition::Never)
        .parallel(x.b)
        .parallel(x.h)
        .parallel(tile);
  };
  // out carries the logsumexp too (SdpaInputs::stats_in_out), so no second loop nest is fused.
  _halide_user_assert(f.stats_in_out) << "CPU schedules take out and logsumexp as one Tuple\n";
  tile_loops(f.out);
  f.out.vectorize(x.c, t.vector, TailStrategy::GuardWithIf);

  schedule_mod_key_scan(f, t);

  if (f.bf16_pairs) {
    schedule_prefill_pair_stages(f, t, tile);
  } else if (wide_queries) {
    schedule_prefill_stages(f, t, tile);
  } else {
    schedule_decode_stages(f, t, tile, paged);
  }
}

// The attention weights of a call (the masked generator's output=weights): one row of keys per
// parallel task, its scores vectorized over keys (strided loads of k), one feature at a time.
inline void schedule_attention_weights_cpu(SdpaFuncs& f, Halide::Func weights,
                                           const Halide::Target& target) {
  using namespace Halide;
  const AttentionVars& x = f.vars;
  const int vector = target.natural_vector_size<float>();
  weights.parallel(x.b).parallel(x.h).parallel(x.i).vectorize(x.j, vector,
                                                              TailStrategy::GuardWithIf);
  f.q_scaled.compute_at(weights, x.i);
  f.scores.compute_at(weights, x.i).vectorize(x.j, vector);
  f.scores.update().reorder(f.r_d, x.j).vectorize(x.j, vector);
}

}  // namespace attention_gen
