// CPU schedule pieces of the rotary embeddings (algorithm/rope.h), shared by the rope generator
// and the SDPA prefill that fuses them (schedule/cpu.h).
#pragma once

#include "Halide.h"
#include "algorithm/rope.h"

namespace attention_gen {

// Both pairings' pieces at `at` (a row of the consumer), each vectorized along its features. A
// consumer specialized on rot.interleaved computes only the pairing its branch reads.
inline void schedule_rotation_pieces(RotatedRows& rot, const Halide::LoopLevel& at, int lanes) {
  using Halide::TailStrategy;
  rot.pairs.compute_at(at).vectorize(rot.pairs.args()[0], lanes, TailStrategy::GuardWithIf);
  rot.split_row.compute_at(at).vectorize(rot.split_row.args()[0], lanes, TailStrategy::GuardWithIf);
  for (int u = 0; u < 2; ++u) {
    rot.split_row.update(u).vectorize(rot.r.x, lanes, TailStrategy::GuardWithIf);
  }
}

// rot.out itself at `at`, a row at a time along its features, specialized per pairing.
inline void schedule_rotated_rows(RotatedRows& rot, const Halide::LoopLevel& at, int lanes) {
  const Halide::Var d = rot.out.args()[0], row = rot.out.args()[1];
  rot.out.compute_at(at).vectorize(d, lanes, Halide::TailStrategy::GuardWithIf);
  rot.out.specialize(rot.interleaved);
  schedule_rotation_pieces(rot, Halide::LoopLevel(rot.out, row), lanes);
}

}  // namespace attention_gen
