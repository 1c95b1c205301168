// Calls of the generated linear kernel (generators/linear_generator.cpp) for the entry points that
// project their inputs.
#pragma once

#include <memory>
#include <vector>

#include "attention/attention.h"

namespace attention::detail {

// y [B, M, N] = x [B, M, K] · weightᵀ + bias for validated views: weight [N, K] with any strides,
// bias [N] (data == nullptr: none), x and y with contiguous rows.
Status run_linear(const TensorView& x, const TensorView& weight, const TensorView& bias,
                  const TensorView& y);

// A bias [N] as the kernels take it, contiguous: `bias` itself when it is, a copy in `storage` when
// strided, zeros in `storage` when absent (data == nullptr).
TensorView dense_bias(const TensorView& bias, int64_t N, std::vector<float>& storage);

// A dense [B, M, N] tensor in `storage`, left uninitialized: its producer (run_linear, a kernel)
// writes every element, so filling it first would be a wasted pass over memory.
using Scratch = std::unique_ptr<float[]>;
TensorView dense_output(Scratch& storage, int64_t B, int64_t M, int64_t N);

// The transpose of a rank-2 view (no copy): [R, C] becomes [C, R].
TensorView transposed(const TensorView& t);

}  // namespace attention::detail
