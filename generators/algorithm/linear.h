// A batched matrix product with a bias, y = x·Wᵀ + bias, as pure Halide definitions (no
// scheduling). It serves the projections of the attention forms (W_q·q, W_k·k, q·W of the
// bilinear score) and static attention's softmax(W)·X.
//
// Halide dimension 0 is innermost: x [B, M, K] is (k, m, b), y [B, M, N] is (n, m, b).
#pragma once

#include "Halide.h"

namespace attention_gen {

struct LinearFuncs {
  Halide::Var n{"n"}, m{"m"}, b{"b"}, k{"k"};
  Halide::RDom r_k;         // over K
  Halide::Func weight_t;    // (n, k, b): the weight with n innermost (schedules pack it)
  Halide::Func product;     // (n, m, b): bias(n) + Σ_k x(k, m, b) · weight_t(n, k, b)
  Halide::Func y;           // (n, m, b): the product
  Halide::Expr inner_size;  // K
};

// `weight` is indexed (k, n, b): a PyTorch nn.Linear weight [N, K] (broadcast over b), or any
// matrix read through strides. `bias` is indexed (n).
inline LinearFuncs linear_product(const Halide::Func& x, const Halide::Func& weight,
                                  const Halide::Func& bias, const Halide::Expr& K) {
  LinearFuncs f;
  f.inner_size = K;
  f.r_k = Halide::RDom(0, K, "r_k");
  f.weight_t = Halide::Func("weight_t");
  f.weight_t(f.n, f.k, f.b) = weight(f.k, f.n, f.b);
  f.product = Halide::Func("product");
  f.product(f.n, f.m, f.b) = bias(f.n);
  f.product(f.n, f.m, f.b) += x(f.r_k, f.m, f.b) * f.weight_t(f.n, f.r_k, f.b);
  f.y = Halide::Func("y");
  f.y(f.n, f.m, f.b) = f.product(f.n, f.m, f.b);
  return f;
}

}  // namespace attention_gen
