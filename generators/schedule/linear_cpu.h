// CPU schedule of algorithm/linear.h: register-blocked, vectorized, parallel matrix products.
#pragma once

#include "Halide.h"
#include "algorithm/linear.h"
#include "schedule/cpu.h"

namespace attention_gen {

// One parallel work item per (panel of pv_cols output columns, batch). An item first copies its
// columns of the weight into a panel with n innermost (K × pv_cols floats, in L2), then runs
// pv_rows × pv_cols register blocks (the P·V block of cpu_tiling) down every row of x, reducing
// over K innermost: the panel is copied once per item however many rows there are. `dense_n`
// (may be undefined) says the weight's n dimension is contiguous: the copy then uses plain vector
// loads instead of gathers.
inline void schedule_linear_cpu(LinearFuncs& f, const Halide::Target& target,
                                const Halide::Expr& dense_n) {
  using namespace Halide;
  const CpuTiling t = cpu_tiling(target, /*wide_queries=*/true);
  const int rows = t.pv_rows, cols = t.pv_cols;
  Var no("no"), ni("ni"), mo("mo"), mi("mi"), item("item"), n_vec("n_vec");

  // Blocks round up past the ends; the stages they compute read clamped x and a zero-padded
  // weight there (see the generator), and only the guarded stores of y reach memory.
  f.y.split(f.n, no, ni, cols, TailStrategy::GuardWithIf)
      .split(f.m, mo, mi, rows, TailStrategy::GuardWithIf)
      .reorder(ni, mi, mo, no, f.b)
      .fuse(no, f.b, item)
      .parallel(item)
      .split(ni, n_vec, ni, t.vector, TailStrategy::GuardWithIf)
      .vectorize(ni)
      .unroll(n_vec)
      .unroll(mi);

  // The accumulator block has a constant size (y's guarded tail blocks would shrink it, and put a
  // test around every accumulator), so LLVM keeps it in registers.
  f.product.compute_at(f.y, mo)
      .bound_extent(f.n, cols)
      .bound_extent(f.m, rows)
      .vectorize(f.n, t.vector)
      .unroll(f.n)
      .unroll(f.m);
  std::vector<VarOrRVar> block_then_reduction = {f.n, f.m};
  for (int dim = 0; dim < f.r_k.dimensions(); ++dim) block_then_reduction.push_back(f.r_k[dim]);
  f.product.update().reorder(block_then_reduction).vectorize(f.n, t.vector).unroll(f.n).unroll(f.m);

  f.weight_t.compute_at(f.y, item).vectorize(f.n, t.vector);
  if (dense_n.defined()) f.weight_t.specialize(dense_n);
}

}  // namespace attention_gen
