// The attention-weights kernels (the masked generator's output=weights mode): after an attention
// call, its weights exp(logit - logsumexp) per (query, key), 0 at hidden keys.
#pragma once

#include <vector>

#include "attention/attention.h"

namespace attention::detail {

// q [B, H, Sq, D], k [B, Hkv, Sk, D], v (unread, any view of [B, Hkv, Sk, Dv]) and the call's
// logsumexp [B, H, Sq] into weights [B, H, Sq, Sk], for validated views and mask. w_a empty: the
// dot score scale·q·k; else the additive score Σ_a w_a·tanh(q_a + k_a) (scale 1).
Status run_attention_weights(const TensorView& q, const TensorView& k, const TensorView& v,
                             float scale, const std::vector<float>& w_a, const MaskOptions& mask,
                             const TensorView& lse, const TensorView& weights);

}  // namespace attention::detail
