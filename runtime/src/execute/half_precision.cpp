#include "execute/half_precision.h"

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "convert_bf16_to_f32.h"
#include "convert_f16_to_f32.h"
#include "convert_f32_to_bf16.h"
#include "convert_f32_to_f16.h"
#if ATTENTION_GPU
#include "convert_bf16_to_f32_cuda.h"
#include "convert_bf16_to_f32_opencl.h"
#include "convert_f16_to_f32_cuda.h"
#include "convert_f16_to_f32_opencl.h"
#include "convert_f32_to_bf16_cuda.h"
#include "convert_f32_to_bf16_opencl.h"
#include "convert_f32_to_f16_cuda.h"
#include "convert_f32_to_f16_opencl.h"
#endif
#include "call/validate.h"
#include "kernels/generated_kernels.h"
#include "kernels/halide_view.h"

namespace attention::detail {

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

Status allocate_ints(int64_t n, const char* what, ScratchInts& storage) {
  configure_halide_runtime();  // the caching allocator behind halide_malloc
  storage.reset(static_cast<int32_t*>(
      halide_malloc(nullptr, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(int32_t))));
  if (storage == nullptr) {
    return Status::error(StatusCode::OutOfMemory, std::string("out of memory for ") + what + " (" +
                                                      std::to_string(n) + " int32)");
  }
  return Status::ok_status();
}

Status allocate_fp32(std::initializer_list<int64_t> shape, ScratchFloats& storage,
                     TensorView* view) {
  return allocate_fp32(TensorView::contiguous(nullptr, shape), storage, view);
}

Status stats_or_scratch(const TensorView& requested, std::initializer_list<int64_t> shape,
                        ScratchFloats& storage, TensorView* stats) {
  if (requested.data != nullptr) {
    *stats = requested;
    return Status::ok_status();
  }
  return allocate_fp32(shape, storage, stats);
}

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

Status convert_on_gpu(Run run, const TensorView& from, const TensorView& to, void* cuda_stream) {
#if ATTENTION_GPU
  if (from.numel() == 0) return Status::ok_status();
  using Kernel = decltype(&convert_f16_to_f32_cuda);
  struct Conversion {
    DType from, to;
    Kernel cuda, opencl;
    const char* cuda_name;
    const char* opencl_name;
  };
#define ATTENTION_GPU_CONVERSION(from, to, kernel) \
  { from, to, kernel##_cuda, kernel##_opencl, #kernel "_cuda", #kernel "_opencl" }
  static const Conversion kConversions[] = {
      ATTENTION_GPU_CONVERSION(DType::Float16, DType::Float32, convert_f16_to_f32),
      ATTENTION_GPU_CONVERSION(DType::BFloat16, DType::Float32, convert_bf16_to_f32),
      ATTENTION_GPU_CONVERSION(DType::Float32, DType::Float16, convert_f32_to_f16),
      ATTENTION_GPU_CONVERSION(DType::Float32, DType::BFloat16, convert_f32_to_bf16)};
#undef ATTENTION_GPU_CONVERSION
  for (const Conversion& c : kConversions) {
    if (c.from != from.dtype || c.to != to.dtype) continue;
    HalideView in(as_rank4(from)), out(as_rank4(to));
    as_half_bits(from.dtype == DType::Float32 ? out.get() : in.get());
    GpuCall call(run, cuda_stream);
    ATTENTION_RETURN_IF_ERROR(call.input(in.get(), from.device));
    ATTENTION_RETURN_IF_ERROR(call.output(out.get(), to.device));
    return run == Run::CUDA ? call.run(c.cuda_name, c.cuda, in.get(), out.get())
                            : call.run(c.opencl_name, c.opencl, in.get(), out.get());
  }
#else
  (void)run, (void)to, (void)cuda_stream;
#endif
  return Status::error(StatusCode::KernelFailure,
                       std::string("internal: no GPU conversion of ") + dtype_name(from.dtype));
}

Status HostFp32Scratch::widen(const TensorView& t, TensorView* fp32) {
  Fp32Input input;
  ATTENTION_RETURN_IF_ERROR(input.widen(t));
  *fp32 = input.view();
  if (!input.holds_copy()) return Status::ok_status();
  if (used_ == inputs_.size())
    return Status::error(StatusCode::KernelFailure, "internal: too many fp32 copies in one call");
  inputs_[used_++] = std::move(input);  // the copy's storage moves, its address stays
  return Status::ok_status();
}

Status HostFp32Scratch::stage(const TensorView& out, TensorView* fp32) {
  ATTENTION_RETURN_IF_ERROR(output_.stage(out));
  *fp32 = output_.view();
  return Status::ok_status();
}

Status HostFp32Scratch::finish(const TensorView& fp32, const TensorView& out) const {
  (void)fp32, (void)out;  // output_ knows both
  return output_.finish();
}

#if ATTENTION_GPU
struct CudaFp32Scratch::Impl {
  // Declared before `call`, which frees their device memory first.
  std::deque<HalideView> buffers;
  GpuCall call;
  explicit Impl(void* cuda_stream) : call(Run::CUDA, cuda_stream) {}
};

CudaFp32Scratch::CudaFp32Scratch(void* cuda_stream)
    : impl_(std::make_unique<Impl>(cuda_stream)), cuda_stream_(cuda_stream) {}

CudaFp32Scratch::~CudaFp32Scratch() {
  // Kernels queued on the caller's stream may still read or write the scratch.
  (void)impl_->call.wait();
}

Status CudaFp32Scratch::allocate(const TensorView& t, TensorView* fp32) {
  TensorView dense = dense_view(t, nullptr, DType::Float32);
  HalideView& buffer = impl_->buffers.emplace_back(dense);
  ATTENTION_RETURN_IF_ERROR(impl_->call.scratch(buffer.get()));
  // Halide's CUDA buffers hold the CUdeviceptr itself.
  dense.data = reinterpret_cast<void*>(static_cast<uintptr_t>(buffer.get()->device));
  dense.device = Device::CUDA;
  *fp32 = dense;
  return Status::ok_status();
}

Status CudaFp32Scratch::widen(const TensorView& t, TensorView* fp32) {
  *fp32 = t;
  if (t.dtype == DType::Float32) return Status::ok_status();
  if (t.data == nullptr || t.numel() == 0) {  // nothing to read, but typed fp32 all the same
    fp32->dtype = DType::Float32;
    return Status::ok_status();
  }
  ATTENTION_RETURN_IF_ERROR(allocate(t, fp32));
  return convert_on_gpu(Run::CUDA, t, *fp32, cuda_stream_);
}

Status CudaFp32Scratch::stage(const TensorView& out, TensorView* fp32) {
  *fp32 = out;
  if (out.dtype == DType::Float32 || out.numel() == 0) return Status::ok_status();
  return allocate(out, fp32);
}

Status CudaFp32Scratch::finish(const TensorView& fp32, const TensorView& out) {
  if (out.dtype == DType::Float32) return Status::ok_status();
  return convert_on_gpu(Run::CUDA, fp32, out, cuda_stream_);
}
#endif

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

Status convert_dtype(const TensorView& from, const TensorView& to, const DeviceOptions& device) {
  if (from.rank < 1 || from.rank > kMaxRank) {
    return Status::invalid("from: expected a tensor of rank 1 to 4, got rank " +
                           std::to_string(from.rank));
  }
  const detail::NamedViews tensors = {{&from, "from"}, {&to, "to"}};
  detail::Run run = detail::Run::CPU;
  ATTENTION_RETURN_IF_ERROR(detail::resolve_device_options(device, tensors, &run));
  const Device on = detail::device_of(tensors);
  const bool gpu = run != detail::Run::CPU;
  const char* layout = "[same shape as from]";
  ATTENTION_RETURN_IF_ERROR(
      detail::check_float_view(from, "from", from.rank, layout, on, /*any_strides=*/gpu));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_float_view(to, "to", from.rank, layout, on, /*any_strides=*/gpu));
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
  if (!gpu) return detail::convert(from, to);
  ATTENTION_RETURN_IF_ERROR(detail::check_gpu_strides(tensors));
  return detail::convert_on_gpu(run, from, to, device.gpu.cuda_stream);
}

}  // namespace attention
