// A batched matrix product with a bias, y = x·Wᵀ + bias, as pure Halide definitions (no
// scheduling). It serves the projections of the attention forms (W_q·q, W_k·k, q·W of the
// bilinear score), multi-head attention's four projections and static attention's softmax(W)·X.
//
// Halide dimension 0 is innermost: x [B, M, K] is (k, m, b), y [B, M, N] is (n, m, b).
#pragma once

#include <vector>

#include "Halide.h"

namespace attention_gen {

struct LinearFuncs {
  Halide::Var n{"n"}, m{"m"}, b{"b"};
  std::vector<Halide::Var> k;  // the reduced dims as pure Vars (weight_t's)
  Halide::RDom r_k;            // over the reduced dims, innermost first
  Halide::Func x;              // (k..., m, b): the left operand as given (GPU schedules stage it)
  Halide::Func weight_t;       // (n, k..., b): the weight with n innermost (schedules pack it)
  Halide::Func product;        // (n, m, b): bias(n) + Σ_k x(k..., m, b) · weight_t(n, k..., b)
  Halide::Func y;              // (n, m, b): the product
};

// `weight` is indexed (k..., n, b): a PyTorch nn.Linear weight [N, K] (broadcast over b), or any
// matrix read through strides. `bias` is indexed (n). `reduced` holds the extents of the reduced
// dims: one (K) for a plain product; more when x's row is a tensor, such as multi-head attention's
// heads (d, h) feeding the output projection, which a flattened index would have to split again
// with a division and a modulo per element.
inline LinearFuncs linear_product(const Halide::Func& x, const Halide::Func& weight,
                                  const Halide::Func& bias,
                                  const std::vector<Halide::Expr>& reduced) {
  using namespace Halide;
  LinearFuncs f;
  f.x = x;
  Region region;
  for (size_t dim = 0; dim < reduced.size(); ++dim) {
    f.k.emplace_back("k" + std::to_string(dim));
    region.emplace_back(0, reduced[dim]);
  }
  f.r_k = RDom(region, "r_k");
  std::vector<Expr> r, k(f.k.begin(), f.k.end());
  for (int dim = 0; dim < f.r_k.dimensions(); ++dim) r.push_back(f.r_k[dim]);
  auto join = [](std::vector<Expr> a, const std::vector<Expr>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  f.weight_t = Func("weight_t");
  f.weight_t(join(join({f.n}, k), {f.b})) = weight(join(k, {f.n, f.b}));
  f.product = Func("product");
  f.product(f.n, f.m, f.b) = bias(f.n);
  f.product(f.n, f.m, f.b) += x(join(r, {f.m, f.b})) * f.weight_t(join(join({f.n}, r), {f.b}));
  f.y = Func("y");
  f.y(f.n, f.m, f.b) = f.product(f.n, f.m, f.b);
  return f;
}

}  // namespace attention_gen
