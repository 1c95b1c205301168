// Naive scaled-dot-product attention in double accumulation: the ground truth of the sdpa tests.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "attention/attention.h"

// out = softmax(scale · q·kᵀ) · v, read through the views' element strides (rank 4, [B, H, S, D]).
// Grouped-query attention: query head h reads kv head h / (H / Hkv).
// out is resized to the dense [B, H, Sq, Dv]; lse (may be null) to the dense [B, H, Sq] natural-log
// logsumexp of each row's scaled scores. Sk == 0 gives zeros and lse = -inf.
// With `mask`, the semantics documented at attention::MaskOptions, written independently of the
// kernels: hidden keys are skipped (never read), and a row that sees no key gives zeros, lse -inf.
// weights_storage: the naive loops of a kernel that stores the softmax weights in that type for
// P·V (BFloat16: the native bf16 prefill, as FlashAttention does): each weight exp(s - max) is
// rounded to it before it multiplies v; the row sum (and lse) stay exact.
void reference_sdpa(const attention::TensorView& q, const attention::TensorView& k,
                    const attention::TensorView& v, double scale, std::vector<double>* out,
                    std::vector<double>* lse, const attention::MaskOptions* mask = nullptr,
                    attention::DType weights_storage = attention::DType::Float32);

// The same softmax, masks and rules with any pair score (before masks and biases), for the other
// score forms: score(b, h, i, j) for query i and key j of batch b, query head h. v is rank 4
// [B, Hkv, Sk, Dv] (query head h reads kv head h / (heads / Hkv)); out and lse as above.
using PairScore = std::function<double(int64_t b, int64_t h, int64_t i, int64_t j)>;
// The same with values from a function: value(b, kv_head, j, c) for a [batch, kv_heads, kv_len,
// value_dim] value tensor (e.g. a projection computed in double).
using ValueAt = std::function<double(int64_t b, int64_t kv_head, int64_t j, int64_t c)>;
struct ValueShape {
  int64_t batch, kv_heads, kv_len, value_dim;
};
void reference_attention(const PairScore& score, int64_t heads, int64_t q_len, const ValueAt& value,
                         const ValueShape& value_shape, std::vector<double>* out,
                         std::vector<double>* lse, const attention::MaskOptions* mask = nullptr,
                         std::vector<double>* weights = nullptr);

// `weights` (may be null) gets the dense [B, heads, Sq, Sk] attention weights (0 at hidden keys).
void reference_attention(const PairScore& score, int64_t heads, int64_t q_len,
                         const attention::TensorView& v, std::vector<double>* out,
                         std::vector<double>* lse, const attention::MaskOptions* mask = nullptr,
                         std::vector<double>* weights = nullptr);

// ALiBi's standard slopes for `heads` heads, from the paper's recipe.
std::vector<double> reference_alibi_slopes(int64_t heads);
