// Small loops over validated fp32 views that several entry points need.
#pragma once

#include <initializer_list>

#include "attention/attention.h"

namespace attention::detail {

// Writes `value` to every element of a (validated, rank <= 4) fp32 view.
void fill(const TensorView& t, float value);

// Whether every element of a (validated, rank <= 4) fp32 view is finite; stops at the first that
// is not.
bool all_finite(const TensorView& t);

// The largest |x| over a (validated, rank <= 4) fp32 view; +inf if any element is NaN or Inf.
float max_abs(const TensorView& t);

// The rule for a call without keys (Sk == 0): no row has any weight, so out is zeros and the
// row statistics (logsumexp or alike; skipped when stats.data is null) are -inf.
void write_rows_without_keys(const TensorView& out, const TensorView& stats);

// Copies a (validated, rank <= 4) fp32 view into another of the same shape, any strides.
void copy(const TensorView& from, const TensorView& to);

// Indices [begin, begin + count) of dimension `dim` of a validated view (any element size; also
// a CUDA view, whose data is a device address).
TensorView slice(const TensorView& t, int dim, int64_t begin, int64_t count);

// A rank-3 view [B, S, X] as the rank-4 [B, 1, S, X] the SDPA-family kernels take (one head).
TensorView with_one_head(const TensorView& t);

// out [B, S, X] = the mean over heads of a dense in [B, H, S, X] (a validated out view).
void average_heads(const TensorView& in, const TensorView& out);

}  // namespace attention::detail
