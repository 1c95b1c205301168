// The checks of one scaled_dot_product_attention call, shared with the entry points that run SDPA
// calls on views of their arguments (scaled_dot_product_attention_varlen checks every sequence's
// call before the first one runs).
#pragma once

#include "attention/attention.h"
#include "gpu.h"

namespace attention::detail {

// Everything scaled_dot_product_attention checks before a kernel runs: the backend the tensors
// resolve to (`run`), shapes, dtypes, strides, masks, overlaps and, for a GPU call, that its
// workspace plan fits options.gpu and its dtypes are ones the backend takes. Ok means the call
// can only fail for reasons found while it runs (memory, the driver, the kernel).
Status check_sdpa_call(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const SdpaOptions& options, Run* run);

}  // namespace attention::detail
