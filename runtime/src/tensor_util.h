// Small loops over validated fp32 views that several entry points need.
#pragma once

#include "attention/attention.h"

namespace attention::detail {

// Writes `value` to every element of a (validated, rank <= 4) fp32 view.
void fill(const TensorView& t, float value);

// Whether every element of a (validated, rank <= 4) fp32 view is finite; stops at the first that
// is not.
bool all_finite(const TensorView& t);

}  // namespace attention::detail
