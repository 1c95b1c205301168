// Naive multi-head attention in double: projections, per-head attention (reference_attention),
// concatenation, output projection. The ground truth of the MHA tests.
#pragma once

#include <vector>

#include "attention/attention.h"

// The projections as explicit views (biases may have data == nullptr): W_q [E, E], W_k and W_v
// [Hkv·D, Ekv], W_o [E, E] in PyTorch's layout (y = x·Wᵀ + b), read through their strides.
struct ReferenceMhaWeights {
  attention::TensorView wq, wk, wv, bq, bk, bv, wo, bo;
};

// out [B, Sq, E] for x_q [B, Sq, E] and x_kv [B, Sk, Ekv] with H query heads and Hkv kv heads;
// weights (may be null): the dense [B, H, Sq, Sk] per-head attention weights.
void reference_mha(const attention::TensorView& x_q, const attention::TensorView& x_kv,
                   const ReferenceMhaWeights& w, int64_t H, int64_t Hkv, double scale,
                   const attention::MaskOptions* mask, std::vector<double>* out,
                   std::vector<double>* weights);
