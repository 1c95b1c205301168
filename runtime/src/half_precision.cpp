#include "half_precision.h"

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "convert_bf16_to_f32.h"
#include "convert_f16_to_f32.h"
#include "convert_f32_to_bf16.h"
#include "convert_f32_to_f16.h"
#include "generated_kernels.h"
#include "halide_view.h"
#include "validate.h"

namespace attention::detail {
namespace {

// `t` as rank 4, with leading size-1 dims (the convert kernels are 4-D).
TensorView as_rank4(const TensorView& t) {
  TensorView r = t;
  const int pad = kMaxRank - t.rank;
  r.rank = kMaxRank;
  for (int d = kMaxRank - 1; d >= 0; --d) {
    const bool padded = d < pad;
    r.shape[d] = padded ? 1 : t.shape[d - pad];
    r.strides[d] = padded ? 0 : t.strides[d - pad];
  }
  return r;
}

// `t`'s shape, row-major over `data` of `dtype`.
TensorView dense_view(const TensorView& t, void* data, DType dtype) {
  TensorView view = t;
  view.data = data;
  view.dtype = dtype;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    view.strides[d] = stride;
    stride *= t.shape[d];
  }
  return view;
}

// A dense fp32 view for `t` over `storage` (allocated to fit, uninitialized: the caller writes
// every element), or OutOfMemory naming it.
Status allocate_fp32(const TensorView& t, ScratchFloats& storage, TensorView* view) {
  configure_halide_runtime();  // the caching allocator behind halide_malloc
  storage.reset(
      static_cast<float*>(halide_malloc(nullptr, static_cast<size_t>(t.numel()) * sizeof(float))));
  if (storage == nullptr) {
    return Status::error(StatusCode::OutOfMemory, "out of memory for an fp32 copy of a " +
                                                      std::string(dtype_name(t.dtype)) +
                                                      " tensor " + shape_string(t));
  }
  *view = dense_view(t, storage.get(), DType::Float32);
  return Status::ok_status();
}

// A dense copy of a half tensor whose innermost dimension is not contiguous (a mask may have any
// strides; the convert kernels read rows): its elements gathered as they are, bits unchanged.
TensorView dense_half_copy(const TensorView& t, std::vector<uint16_t>& storage) {
  const TensorView r = as_rank4(t);
  storage.resize(static_cast<size_t>(t.numel()));
  const auto* from = static_cast<const uint16_t*>(t.data);
  size_t n = 0;
  for (int64_t a = 0; a < r.shape[0]; ++a)
    for (int64_t b = 0; b < r.shape[1]; ++b)
      for (int64_t c = 0; c < r.shape[2]; ++c)
        for (int64_t d = 0; d < r.shape[3]; ++d)
          storage[n++] =
              from[a * r.strides[0] + b * r.strides[1] + c * r.strides[2] + d * r.strides[3]];
  return dense_view(t, storage.data(), t.dtype);
}

}  // namespace

Status convert(const TensorView& from, const TensorView& to) {
  if (from.numel() == 0) return Status::ok_status();
  HalideView in(as_rank4(from)), out(as_rank4(to));
  using Kernel = decltype(&convert_f16_to_f32);
  struct Conversion {
    DType from, to;
    Kernel kernel;
    const char* name;
  };
  static const Conversion kConversions[] = {
      {DType::Float16, DType::Float32, convert_f16_to_f32, "convert_f16_to_f32"},
      {DType::BFloat16, DType::Float32, convert_bf16_to_f32, "convert_bf16_to_f32"},
      {DType::Float32, DType::Float16, convert_f32_to_f16, "convert_f32_to_f16"},
      {DType::Float32, DType::BFloat16, convert_f32_to_bf16, "convert_f32_to_bf16"}};
  for (const Conversion& c : kConversions) {
    if (c.from == from.dtype && c.to == to.dtype) {
      return run_kernel(c.name, c.kernel, in.get(), out.get());
    }
  }
  return Status::error(StatusCode::KernelFailure, std::string("internal: no conversion from ") +
                                                      dtype_name(from.dtype) + " to " +
                                                      dtype_name(to.dtype));
}

Status half_on_cuda_unsupported(const char* tensors) {
  return Status::error(StatusCode::Unsupported,
                       std::string(tensors) +
                           ": Float16/BFloat16 Device::CUDA tensors are not supported yet; pass "
                           "Float32 device tensors, or half host tensors (converted on the host)");
}

Status Fp32Input::widen(const TensorView& t) {
  view_ = t;
  if (t.dtype == DType::Float32) return Status::ok_status();
  if (t.data == nullptr || t.numel() == 0) {  // nothing to read, but typed fp32 all the same
    view_.dtype = DType::Float32;
    return Status::ok_status();
  }
  ATTENTION_RETURN_IF_ERROR(allocate_fp32(t, storage_, &view_));
  if (t.strides[t.rank - 1] == 1) return convert(t, view_);
  std::vector<uint16_t> gathered;
  try {
    return convert(dense_half_copy(t, gathered), view_);
  } catch (const std::bad_alloc&) {
    return Status::error(StatusCode::OutOfMemory,
                         "out of memory for a dense copy of " + shape_string(t));
  }
}

Status Fp32Output::stage(const TensorView& out) {
  out_ = view_ = out;
  if (out.dtype == DType::Float32) return Status::ok_status();
  return allocate_fp32(out, storage_, &view_);
}

Status Fp32Output::finish() const {
  return out_.dtype == DType::Float32 ? Status::ok_status() : convert(view_, out_);
}

}  // namespace attention::detail

namespace attention {

Status convert_dtype(const TensorView& from, const TensorView& to) {
  if (from.rank < 1 || from.rank > kMaxRank) {
    return Status::invalid("from: expected a tensor of rank 1 to 4, got rank " +
                           std::to_string(from.rank));
  }
  const char* layout = "[same shape as from]";
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(from, "from", from.rank, layout));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(to, "to", from.rank, layout));
  if ((from.dtype == DType::Float32) == (to.dtype == DType::Float32)) {
    return Status::invalid(std::string("to: converts between Float32 and a half type, got ") +
                           detail::dtype_name(from.dtype) + " to " + detail::dtype_name(to.dtype));
  }
  for (int d = 0; d < from.rank; ++d) {
    if (to.shape[d] != from.shape[d]) {
      return Status::invalid("to: expected shape " + detail::shape_string(from) + ", got " +
                             detail::shape_string(to));
    }
  }
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(to, "to", {{&from, "from"}}));
  return detail::convert(from, to);
}

}  // namespace attention
