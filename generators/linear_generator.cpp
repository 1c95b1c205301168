// Generator for fp32 matrix products with a bias, y [B, M, N] = x [B, M, K] · Wᵀ + bias, W [N, K]
// read through any strides (so W [K, N] passes as its transpose, without a copy). The runtime
// composes it with the attention kernels: projections of the additive and bilinear forms,
// static attention's factorised weights.
#include "Halide.h"
#include "algorithm/linear.h"
#include "algorithm/static_attention.h"
#include "generator_inputs.h"
#include "schedule/linear_cpu.h"

namespace {

using namespace Halide;
using namespace attention_gen;

class LinearGenerator : public Generator<LinearGenerator> {
 public:
  Input<Buffer<float, 3>> x{"x"};            // (k, m, b)
  Input<Buffer<float, 2>> weight{"weight"};  // (k, n); both strides free
  Input<Buffer<float, 1>> bias{"bias"};      // (n)
  Output<Buffer<float, 3>> y{"y"};           // (n, m, b)

  void generate() {
    funcs_ = linear_of_inputs(x, weight, bias);
    y = funcs_.y;

    x.set_estimates({{0, 512}, {0, 512}, {0, 1}});
    weight.set_estimates({{0, 512}, {0, 512}});
    bias.set_estimates({{0, 512}});
    y.set_estimates({{0, 512}, {0, 512}, {0, 1}});
  }

  void schedule() {
    if (using_autoscheduler()) return;
    schedule_linear_cpu(funcs_, get_target(), weight.dim(1).stride() == 1);
  }

 private:
  LinearFuncs funcs_;
};

// Static attention: out [B, Sq, D] = softmax(W [Sq, Sk]) · X [B, Sk, D], the softmax over each row
// of W. The softmax runs once (not per batch); the product is the linear schedule's.
class StaticAttentionGenerator : public Generator<StaticAttentionGenerator> {
 public:
  Input<Buffer<float, 2>> weight{"weight"};  // (j, i)
  Input<Buffer<float, 3>> values{"values"};  // (c, j, b)
  Output<Buffer<float, 3>> out{"out"};       // (c, i, b)

  void generate() {
    // The product's blocks round rows and features up: repeat W's last row, pad X with zero
    // features (never stored).
    Region rows(2), features(3);
    rows[1] = Range(weight.dim(1).min(), weight.dim(1).extent());
    features[0] = Range(values.dim(0).min(), values.dim(0).extent());
    Func weight_clamped = BoundaryConditions::repeat_edge(weight, rows);
    Func values_padded = BoundaryConditions::constant_exterior(values, 0.0f, features);
    funcs_ = static_attention(weight_clamped, values_padded, weight.dim(0).extent());
    out = funcs_.product.y;

    weight.set_estimates({{0, 512}, {0, 512}});
    values.set_estimates({{0, 64}, {0, 512}, {0, 8}});
    out.set_estimates({{0, 64}, {0, 512}, {0, 8}});
  }

  void schedule() {
    if (using_autoscheduler()) return;
    const int vector = get_target().natural_vector_size<float>();
    StaticAttentionFuncs& f = funcs_;
    // The softmax once, a row per task; GuardWithIf keeps its vectors inside [0, Sk).
    f.probabilities.compute_root().parallel(f.i).vectorize(f.j, vector, TailStrategy::GuardWithIf);
    f.row_max.compute_at(f.probabilities, f.i);
    f.exps.compute_at(f.probabilities, f.i).vectorize(f.j, vector, TailStrategy::GuardWithIf);
    f.row_sum.compute_at(f.probabilities, f.i);
    // X's rows are contiguous already: its panel copy is plain vector loads.
    schedule_linear_cpu(f.product, get_target(), Expr());
  }

 private:
  StaticAttentionFuncs funcs_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(LinearGenerator, linear)
HALIDE_REGISTER_GENERATOR(StaticAttentionGenerator, static_attention)
