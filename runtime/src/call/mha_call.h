// One multi_head_attention call as its checks (api/mha.cpp) resolve it: the sizes, and the
// projections as views into the caller's tensors (packed or separate weights alike).
#pragma once

#include <cstdint>

#include "attention/attention.h"

namespace attention::detail {

struct MhaShape {
  int64_t B, Sq, Sk, E, Ekv, H, Hkv, D;
  int64_t kv_width() const { return Hkv * D; }
};

// The Q, K, V and output projections (weights and optional biases) as views into the user's
// tensors (or into fp32 copies of them).
struct Projections {
  TensorView wq, wk, wv, bq, bk, bv, wo, bo;
};

}  // namespace attention::detail
