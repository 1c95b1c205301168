// The other attention forms: Nadaraya–Watson regression, dot-product, bilinear, additive, static.
#pragma once

#include "attention/sdpa.h"
#include "attention/tensor.h"

namespace attention {

// The kernel f of Nadaraya–Watson regression, of the scaled distance u = ‖q − k‖ / bandwidth.
enum class RegressionKernel {
  Gaussian,      // f = exp(−u²/2): bandwidth is σ
  Boxcar,        // f = 1 if u <= 1, else 0: bandwidth is the radius h
  Epanechnikov,  // f = max(0, 1 − u) (the form the issue names; not the quadratic 1 − u²)
};

// Options of nadaraya_watson_attention.
struct KernelRegressionOptions {
  RegressionKernel kernel = RegressionKernel::Gaussian;
  // σ or h above: finite and > 0, with 1 / bandwidth² finite in fp32 (bandwidth >= ~1e-19).
  float bandwidth = 1.0f;
  // Optional output [B, Sq]: log Σ_j f(q_i, k_j) (natural log). -inf marks a row that no key
  // reaches (boxcar / Epanechnikov with every key farther than the bandwidth, or Sk == 0); its
  // output row is zeros. Leave data == nullptr to skip it.
  TensorView log_weight_sum;
};

// Nadaraya–Watson kernel regression as attention: each query averages the values with weights
// f(q_i, k_j) / Σ_j f(q_i, k_j), f from options.kernel.
//
//   queries [B, Sq, D]      keys [B, Sk, D]      values [B, Sk, Dv]      out [B, Sq, Dv]
//
// D is the dimension of the regression's inputs (1 for the classic scalar demo); Dv that of its
// outputs. View rules, zero sizes, limits and NaN propagation are those of
// scaled_dot_product_attention (rank 3 here; a NaN input makes the rows it reaches NaN). A row
// whose weights are all zero outputs zeros and reports -inf in log_weight_sum. The Gaussian never
// does: its weights are normalized in the log domain, so a query far from every key still gets the
// nearest keys' average (where exp(−u²/2) itself would underflow to 0/0).
Status nadaraya_watson_attention(const TensorView& queries, const TensorView& keys,
                                 const TensorView& values, const TensorView& out,
                                 const KernelRegressionOptions& options = {});

// ---- The other score forms (Luong, Bahdanau). Single-head [B, S, D] tensors; `mask` takes every
// MaskOptions piece with H = 1 (mask tensors [B|1, 1, Sq, Sk], alibi_slopes [1]). View rules, zero
// sizes, NaN propagation and the fully masked row rule (zeros, logsumexp -inf) are those of
// scaled_dot_product_attention.

// Options of the dot-product and bilinear forms.
struct ScoreFormOptions {
  // Optional output [B, Sq]: natural-log logsumexp of each query row's scores.
  TensorView logsumexp;
  // Optional output [B, Sq, Sk]: the attention weights (the alignment matrix), softmax over keys
  // per query row; 0 at hidden keys, all 0 in a row without keys. A second pass over the scores.
  TensorView weights;
  MaskOptions mask;
};

// Plain dot-product attention (Luong's "dot"): softmax(q·kᵀ)·v, no scaling.
//
//   q [B, Sq, D]      k [B, Sk, D]      v [B, Sk, Dv]      out [B, Sq, Dv]
//
// The SDPA kernels with scale 1 (scaled_dot_product_attention with options.scale = 1 on one head).
Status dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const ScoreFormOptions& options = {});

// Bilinear ("general", Luong) attention: score(q, k) = qᵀ·W·k, softmax over keys, weighted sum of
// v.
//
//   q [B, Sq, Dq]      k [B, Sk, Dk]      v [B, Sk, Dv]      weight [Dq, Dk]      out [B, Sq, Dv]
//
// Computes q·W once per query (the generated linear kernel) and runs dot-product attention on it;
// weight may have any strides (a transposed view works as is).
Status bilinear_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& weight, const TensorView& out,
                          const ScoreFormOptions& options = {});

// The parameters of additive attention: score(q, k) = w_aᵀ · tanh(W_q·q + W_k·k + bias).
struct AdditiveWeights {
  TensorView query_weight;  // W_q [A, Dq] (PyTorch nn.Linear layout: y = W·x)
  TensorView key_weight;    // W_k [A, Dk]
  TensorView score_weight;  // w_a [A]
  TensorView bias;          // optional [A], added inside the tanh; leave data == nullptr for none
};

// Additive (Bahdanau) attention: score(q, k) = w_aᵀ · tanh(W_q·q + W_k·k + bias), softmax over
// keys, weighted sum of values.
//
//   q [B, Sq, Dq]      k [B, Sk, Dk]      v [B, Sk, Dv]      out [B, Sq, Dv]
//
// W_q·q (+ bias) and W_k·k are computed once per query and key (the generated linear kernel), not
// per pair; the kernel (additive_f32_{prefill,decode}) then evaluates A tanh terms per pair.
// Weights may have any strides.
Status additive_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const AdditiveWeights& weights, const TensorView& out,
                          const ScoreFormOptions& options = {});

// Static attention: out[b] = softmax(W) · X[b], the softmax over each row of W (over the keys, the
// last axis), computed once for every batch.
//
//   weight W [Sq, Sk]      values X [B, Sk, D]      out [B, Sq, D]
//
// W's rows must be contiguous. -inf in W gives a key weight 0; a row of W that is all -inf has no
// key and outputs zeros. NaN in W makes its row NaN; a NaN or Inf in X reaches every row (even one
// whose weight for that key is 0: static attention has no masks). Sk == 0 gives zeros.
Status static_attention(const TensorView& weight, const TensorView& values, const TensorView& out);

// The factorised form, out[b] = softmax(W₁ · W₂) · X[b]: W₁ [Sq, R], W₂ [R, Sk] (any strides);
// the [Sq, Sk] product is formed once (the generated linear kernel), then as static_attention.
Status factorized_static_attention(const TensorView& w1, const TensorView& w2,
                                   const TensorView& values, const TensorView& out);

}  // namespace attention
