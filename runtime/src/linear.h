// Calls of the generated linear kernel (generators/linear_generator.cpp) for the entry points that
// project their inputs.
#pragma once

#include <vector>

#include "attention/attention.h"

namespace attention::detail {

// y [B, M, N] = x [B, M, K] · weightᵀ + bias for validated views: weight [N, K] with any strides,
// bias [N] (data == nullptr: none), x and y with contiguous rows.
Status run_linear(const TensorView& x, const TensorView& weight, const TensorView& bias,
                  const TensorView& y);

// A dense [B, M, N] tensor in `storage`, filled by run_linear.
TensorView dense_output(std::vector<float>& storage, int64_t B, int64_t M, int64_t N);

// The transpose of a rank-2 view (no copy): [R, C] becomes [C, R].
TensorView transposed(const TensorView& t);

}  // namespace attention::detail
