// Argument checks shared by every entry point. Each returns an error naming the argument.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/small_vector.h"

// Returns the Status of `expr` from the enclosing function unless it is ok.
#define ATTENTION_RETURN_IF_ERROR(expr)                    \
  do {                                                     \
    ::attention::Status attention_status_ = (expr);        \
    if (!attention_status_.ok()) return attention_status_; \
  } while (0)

namespace attention::detail {

// "[2, 8, 128, 64]"
std::string shape_string(const TensorView& t);

// rank, non-negative sizes, dtype, device (the call's, `device`), contiguous innermost dim (unless
// `any_strides`), null data, 32-bit index limits. `layout` names the dims for the message, e.g.
// "[B, H, Sq, D]".
Status check_view(const TensorView& t, const char* name, int rank, const char* layout,
                  DType dtype = DType::Float32, bool any_strides = false,
                  Device device = Device::CPU);

const char* dtype_name(DType dtype);
int64_t dtype_size(DType dtype);  // bytes per element

// Float32, Float16 or BFloat16: the types of attention operands.
inline bool is_floating(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
}
inline bool is_half(DType dtype) { return dtype == DType::Float16 || dtype == DType::BFloat16; }

// check_view for an attention operand: any of the floating dtypes.
Status check_float_view(const TensorView& t, const char* name, int rank, const char* layout,
                        Device device = Device::CPU, bool any_strides = false);

// Expected extents per dimension (-1 = any) with the names used in the message.
struct ExpectedDim {
  const char* name;
  int64_t extent;  // -1: not constrained
};
Status check_shape(const TensorView& t, const char* name,
                   std::initializer_list<ExpectedDim> expected);
Status check_shape(const TensorView& t, const char* name, const std::vector<ExpectedDim>& expected);

// Neither view's memory range intersects the other's (empty views never overlap).
Status check_disjoint(const TensorView& out, const char* out_name, const TensorView& in,
                      const char* in_name);

// Distinct indices of an output address distinct elements (no zero or interleaved strides).
Status check_no_self_overlap(const TensorView& out, const char* name);

// An output neither overlaps itself nor any of `others`, checked in that order.
struct NamedView {
  const TensorView* view;
  const char* name;
};
// A call's named views, held inline for every entry point's count: the checks of a call allocate
// nothing (tests/allocation_test.cpp).
using NamedViews = SmallVector<NamedView, 32>;
Status check_output_memory(const TensorView& out, const char* name, const NamedViews& others);

// Whether an optional view was given: any data or a rank. A half-filled view is then checked (and
// rejected), never silently skipped.
inline bool given(const TensorView& t) { return t.data != nullptr || t.rank != 0; }

// SdpaOptions' logsumexp is absent without data, whatever its rank (attention.h: "leave data ==
// nullptr to skip it"). The entry points pass on this copy, so every path may test given().
inline SdpaOptions without_absent_logsumexp(const SdpaOptions& options) {
  SdpaOptions call = options;
  if (call.logsumexp.data == nullptr) call.logsumexp = TensorView();
  return call;
}

// A call's GpuOptions, named `name` (checked for every backend, so a bad value never waits for a
// GPU call).
Status check_gpu_options(const GpuOptions& gpu, const char* name);

// An optional output, when given: a view of rank extents.size() named by `layout`, those extents,
// and no overlap with itself or `others`.
Status check_optional_output(const TensorView& t, const char* name, const char* layout,
                             std::initializer_list<ExpectedDim> extents, const NamedViews& others,
                             Device device = Device::CPU);

}  // namespace attention::detail
