// Generator for rotary position embeddings applied to a [B, H, S, D] tensor (algorithm/rope.h):
// out (d, s, h, b) = x rotated by the angles of position position_offsets(b) + s. A cache that
// stores rotated keys applies it once at append time; queries before attention.
#include "Halide.h"
#include "algorithm/rope.h"

namespace {

using namespace Halide;

class RopeGenerator : public Generator<RopeGenerator> {
 public:
  Input<Buffer<float, 4>> x{"x"};                                // (d, s, h, b), any outer strides
  Input<Buffer<int32_t, 1>> position_offsets{"position_offsets"};  // (b): position of row s = 0
  Input<Buffer<float, 1>> inv_freq{"inv_freq"};                  // (i): θ_i, R/2 of them
  Input<int32_t> rotary_dim{"rotary_dim"};                       // R: even, <= D
  Input<bool> interleaved{"interleaved"};                        // GPT-J pairs, else half-split
  Output<Buffer<float, 4>> out{"out"};

  void generate() {
    const Expr half = rotary_dim / 2;
    // Each pair's cos and sin at each position, once per row of positions for every head.
    angle_(i, s, b) = cast<float>(position_offsets(b) + s) * inv_freq(clamp(i, 0, half - 1));
    const auto [c, sn] = attention_gen::cos_sin(angle_(i, s, b));
    cos_sin_(i, s, b) = {c, sn};
    const Expr cos_i = cos_sin_(i, s, b)[0], sin_i = cos_sin_(i, s, b)[1];
    // The pairs' two rotated features, first_(i) and second_(i) for pair i, read with dense loads
    // only inside [0, R) (no clamped lanes: those became gathers and ran at ~8 GB/s).
    // Interleaved (GPT-J): pair i is features 2i and 2i + 1 (stride-2 loads, deinterleaved), its
    // results interleaved back by out's select on d's parity.
    const Expr x_even = x(2 * i, s, h, b), x_odd = x(2 * i + 1, s, h, b);
    pairs_(i, s, h, b) = {attention_gen::rotated(x_even, x_odd, cos_i, sin_i, true),
                          attention_gen::rotated(x_odd, x_even, cos_i, sin_i, false)};
    const Expr in_pairs = select(d % 2 == 0, pairs_(d / 2, s, h, b)[0], pairs_(d / 2, s, h, b)[1]);
    // Half-split (NeoX, Llama): pair i is features i and i + R/2. A row is x, then its two halves
    // overwritten by update definitions over the pairs.
    split_row_(d, s, h, b) = x(d, s, h, b);
    r_ = RDom(0, half, "r");
    const RVar r = r_.x;
    const Expr lo = x(r, s, h, b), hi = x(r + half, s, h, b);
    const Expr cos_r = cos_sin_(r, s, b)[0], sin_r = cos_sin_(r, s, b)[1];
    split_row_(r, s, h, b) = attention_gen::rotated(lo, hi, cos_r, sin_r, true);
    split_row_(r + half, s, h, b) = attention_gen::rotated(hi, lo, cos_r, sin_r, false);
    out(d, s, h, b) = select(interleaved, select(d < rotary_dim, in_pairs, x(d, s, h, b)),
                             split_row_(d, s, h, b));

    x.set_estimates({{0, 64}, {0, 1024}, {0, 8}, {0, 1}});
    position_offsets.set_estimates({{0, 1}});
    inv_freq.set_estimates({{0, 32}});
    rotary_dim.set_estimate(64);
    interleaved.set_estimate(false);
    out.set_estimates({{0, 64}, {0, 1024}, {0, 8}, {0, 1}});
  }

  // Positions in blocks across threads, the heads inside (the cos/sin row of a position serves
  // every head), each row a vector at a time. Memory bound once the table is amortized.
  void schedule() {
    if (using_autoscheduler()) return;
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
    pairs_.compute_at(out, h).vectorize(i, lanes, TailStrategy::GuardWithIf);
    split_row_.compute_at(out, h).vectorize(d, lanes, TailStrategy::GuardWithIf);
    for (int u = 0; u < 2; ++u) {
      split_row_.update(u).vectorize(r_.x, lanes, TailStrategy::GuardWithIf);
    }
  }

 private:
  Var d{"d"}, s{"s"}, h{"h"}, b{"b"}, i{"i"};
  Func angle_{"angle"}, cos_sin_{"cos_sin"}, pairs_{"pairs"}, split_row_{"split_row"};
  RDom r_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(RopeGenerator, rope)
