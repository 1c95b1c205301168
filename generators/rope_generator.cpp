// Generator for rotary position embeddings applied to a [B, H, S, D] tensor (algorithm/rope.h):
// out (d, s, h, b) = x rotated by the angles of position position_offsets(b) + s. A cache that
// stores rotated keys applies it once at append time; queries before attention.
#include "Halide.h"
#include "algorithm/rope.h"
#include "schedule/rope.h"

namespace {

using namespace Halide;

class RopeGenerator : public Generator<RopeGenerator> {
 public:
  Input<Buffer<float, 4>> x{"x"};  // (d, s, h, b), any outer strides
  Input<Buffer<int32_t, 1>> position_offsets{"position_offsets"};  // (b): position of row s = 0
  Input<Buffer<float, 1>> inv_freq{"inv_freq"};                    // (i): θ_i, R/2 of them
  Input<int32_t> rotary_dim{"rotary_dim"};                         // R: even, <= D
  Input<bool> interleaved{"interleaved"};                          // GPT-J pairs, else half-split
  Output<Buffer<float, 4>> out{"out"};

  void generate() {
    const Expr half = rotary_dim / 2;
    // Each pair's cos and sin at each position, once per row of positions for every head.
    angle_(i, s, b) = cast<float>(position_offsets(b) + s) * inv_freq(clamp(i, 0, half - 1));
    const auto [c, sn] = attention_gen::cos_sin(angle_(i, s, b));
    cos_sin_(i, s, b) = {c, sn};
    if (get_target().has_gpu_feature()) {
      // A thread per feature: each reads its partner (a GPU has no vectors for clamped lanes to
      // break up), so the rotation is one pure expression (no pieces with update definitions).
      const Expr first_half = d < half, even = d % 2 == 0;
      const Expr split_pair = select(first_half, d, d - half);
      const Expr split_partner = clamp(select(first_half, d + half, d - half), 0, rotary_dim - 1);
      const Expr pair = select(interleaved, d / 2, split_pair);
      const Expr partner = select(interleaved, select(even, d + 1, d - 1), split_partner);
      const Expr first = select(interleaved, even, first_half);
      const Expr rotated_d =
          attention_gen::rotated(x(d, s, h, b), x(clamp(partner, 0, rotary_dim - 1), s, h, b),
                                 cos_sin_(pair, s, b)[0], cos_sin_(pair, s, b)[1], first);
      out(d, s, h, b) = select(d < rotary_dim, rotated_d, x(d, s, h, b));
    } else {
      rot_ = attention_gen::rotate_rows(x, cos_sin_, rotary_dim, interleaved, "rotated");
      out(d, s, h, b) = attention_gen::rotated_feature(rot_, x, rotary_dim, d, s, h, b);
    }

    x.set_estimates({{0, 64}, {0, 1024}, {0, 8}, {0, 1}});
    position_offsets.set_estimates({{0, 1}});
    inv_freq.set_estimates({{0, 32}});
    rotary_dim.set_estimate(64);
    interleaved.set_estimate(false);
    out.set_estimates({{0, 64}, {0, 1024}, {0, 8}, {0, 1}});
  }

  // Positions in blocks across threads, the heads inside (the cos/sin row of a position serves
  // every head), each row a vector at a time. Memory bound once the table is amortized.
  // GPU: a thread per (feature, position) in blocks of 64 features × 4 positions, the blocks over
  // feature blocks, positions and (head, batch); cos and sin computed where they are read.
  void schedule() {
    if (using_autoscheduler()) return;
    if (get_target().has_gpu_feature()) {
      Var hb("hb"), dt("dt"), di("di"), st("st"), si("si");
      out.fuse(h, b, hb)
          .split(d, dt, di, 64, TailStrategy::GuardWithIf)
          .split(s, st, si, 4, TailStrategy::GuardWithIf)
          .reorder(di, si, dt, st, hb)
          .gpu_blocks(dt, st, hb)
          .gpu_threads(di, si);
      return;
    }
    const int lanes = natural_vector_size<float>();
    Var task("task"), rows("rows"), position("position");
    out.reorder(d, h, s, b)
        .split(s, task, position, 16, TailStrategy::GuardWithIf)
        .fuse(task, b, rows)
        .parallel(rows)
        .vectorize(d, lanes, TailStrategy::GuardWithIf);
    out.specialize(interleaved);
    // (A Var split with its own name as the inner loop broke compute_at here: rows s > 0 came
    // out zero. Hence `position`.)
    cos_sin_.compute_at(out, position).vectorize(i, lanes, TailStrategy::RoundUp);
    attention_gen::schedule_rotation_pieces(rot_, LoopLevel(out, h), lanes);
  }

 private:
  Var d{"d"}, s{"s"}, h{"h"}, b{"b"}, i{"i"};
  Func angle_{"angle"}, cos_sin_{"cos_sin"};
  attention_gen::RotatedRows rot_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(RopeGenerator, rope)
