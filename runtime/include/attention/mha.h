// Multi-head attention with projections (nn.MultiheadAttention).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "attention/sdpa.h"
#include "attention/tensor.h"

namespace attention {

// ---- Multi-head attention with projections (nn.MultiheadAttention).

// The projection weights, in PyTorch's layout (row-major float arrays exported from a model work as
// they are; every view may have any strides). E = num_heads · D is the model width, Ekv the width
// of x_kv, Hkv·D the width of K and V (Hkv = num_kv_heads).
//
// Either packed, as nn.MultiheadAttention stores them when Ekv == E:
//   in_proj_weight [E + 2·Hkv·D, E]   rows: W_q, then W_k, then W_v   (PyTorch: [3E, E])
//   in_proj_bias   [E + 2·Hkv·D]      optional
// or separate (kdim/vdim, as PyTorch's q/k/v_proj_weight when Ekv != E):
//   q_proj_weight [E, E]      k_proj_weight [Hkv·D, Ekv]      v_proj_weight [Hkv·D, Ekv]
//   q_bias [E], k_bias [Hkv·D], v_bias [Hkv·D]                optional
// and always
//   out_proj_weight [E, E]    out_proj_bias [E] (optional)
// A projection is y = x·Wᵀ + b (nn.Linear).
struct MhaWeights {
  TensorView in_proj_weight, in_proj_bias;
  TensorView q_proj_weight, k_proj_weight, v_proj_weight;
  TensorView q_bias, k_bias, v_bias;
  TensorView out_proj_weight, out_proj_bias;
};

struct MhaOptions {
  int64_t num_heads = 1;
  int64_t num_kv_heads = 0;    // 0: num_heads. Fewer: grouped-query (1: multi-query) attention
  std::optional<float> scale;  // unset: 1/sqrt(D)
  MaskOptions mask;            // as for scaled_dot_product_attention, with H = num_heads
  // Optional output of the attention weights: [B, H, Sq, Sk] per head, or [B, Sq, Sk] averaged
  // over heads (PyTorch's need_weights with average_attn_weights). Leave data == nullptr to skip.
  TensorView attention_weights;
  // CPU or GPU kernels: see Backend. The GPU kernels do not produce attention_weights.
  Backend backend = Backend::Auto;
  // GPU calls: the bound on their device workspace (see GpuOptions; chunks cover every head).
  GpuOptions gpu;
};

// out = concat_h(softmax(Q_h·K_hᵀ · scale)·V_h)·W_oᵀ + b_o with Q = x_q·W_qᵀ + b_q, K = x_kv·W_kᵀ +
// b_k, V = x_kv·W_vᵀ + b_v split into heads of D features (query head h reads kv head
// h / (H / Hkv)).
//
//   x_q [B, Sq, E]      x_kv [B, Sk, Ekv]      out [B, Sq, E]
//
// Self-attention passes the same tensor as x_q and x_kv. Every weight shape is checked against E,
// Ekv and the head counts. Masks, zero sizes and NaN rules are those of
// scaled_dot_product_attention (a row that sees no key outputs b_o). The whole block runs as one
// generated kernel (mha_f32); asking for attention_weights adds a second kernel and two products.
// Inputs, weights, biases, the additive mask and out may be Float16 or BFloat16 (host tensors):
// they are widened exactly, the block runs in fp32 and out is rounded once; attention_weights
// stays Float32.
Status multi_head_attention(const TensorView& x_q, const TensorView& x_kv,
                            const MhaWeights& weights, const TensorView& out,
                            const MhaOptions& options = {});

// What multi_head_attention would run for these arguments, as one line (the route, backend and
// kernel, e.g. "kernel backend=CPU kernel=mha_f32_masked"; "widened ... then: ..." for half
// tensors), without running it. Checks the arguments exactly as the call does and returns the
// same error where it would refuse them; `plan` is written only on success.
Status explain_mha(const TensorView& x_q, const TensorView& x_kv, const MhaWeights& weights,
                   const TensorView& out, const MhaOptions& options, std::string* plan);

}  // namespace attention
