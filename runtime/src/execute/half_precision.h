// Half-precision operands (Float16, BFloat16) around the fp32 kernels: widening copies of inputs
// and the one rounding of an fp32 result into a half output, both by the generated convert
// kernels (generators/convert_generator.cpp: F16C / NEON conversions, all cores).
#pragma once

#include <HalideRuntime.h>

#include <array>
#include <cstddef>
#include <memory>

#include "attention/attention.h"
#include "execute/gpu.h"

namespace attention::detail {

// fp32 scratch from halide_malloc, i.e. the runtime's caching allocator (scratch_allocator.cpp):
// a widened operand or staged output of a few MiB is reused by the thread's next call instead of
// being mapped afresh (with malloc's fresh pages the widening path ran 1.47x the fp32 call at
// 1x16x1024x1024x128 on Zen 5, 1.05x with them kept).
struct HalideFree {
  template <typename T>
  void operator()(T* p) const {
    halide_free(nullptr, p);
  }
};
using ScratchFloats = std::unique_ptr<float, HalideFree>;
using ScratchInts = std::unique_ptr<int32_t, HalideFree>;

// n int32 of host scratch (uninitialized) from halide_malloc's per-thread cache, or OutOfMemory
// naming `what`.
Status allocate_ints(int64_t n, const char* what, ScratchInts& storage);

// `t`'s shape, row-major over `data` of `dtype`.
TensorView dense_view(const TensorView& t, void* data, DType dtype);

// A dense fp32 view of `t`'s shape over `storage` (allocated to fit from halide_malloc,
// uninitialized: the caller writes every element), or OutOfMemory naming it.
Status allocate_fp32(const TensorView& t, ScratchFloats& storage, TensorView* view);
// The same for a dense fp32 tensor of `shape`.
Status allocate_fp32(std::initializer_list<int64_t> shape, ScratchFloats& storage,
                     TensorView* view);

// `requested` (a caller's logsumexp) where it holds data, else dense fp32 scratch of `shape` in
// `storage` (from halide_malloc's per-thread cache: a steady-state call allocates nothing), or
// OutOfMemory.
Status stats_or_scratch(const TensorView& requested, std::initializer_list<int64_t> shape,
                        ScratchFloats& storage, TensorView* stats);

// Converts `from` into `to` (same shape, rank <= 4, any strides with a contiguous innermost dim),
// between Float32 and a half type in either direction. Both must be validated CPU views.
Status convert(const TensorView& from, const TensorView& to);

// convert() on a GPU backend (Run::CUDA or Run::OpenCL; gpu.h) with the GPU convert kernels
// (the same results as the CPU's, bit for bit): Device::CUDA tensors in place on the device (on
// `cuda_stream`), host tensors through the backend's copies. Any non-negative strides.
Status convert_on_gpu(Run run, const TensorView& from, const TensorView& to, void* cuda_stream);

// A validated float tensor as fp32: the tensor itself when it already is, else a dense fp32 copy
// (exact: every half value is an fp32 value).
class Fp32Input {
 public:
  Status widen(const TensorView& t);
  const TensorView& view() const { return view_; }
  bool holds_copy() const { return storage_ != nullptr; }

 private:
  TensorView view_;
  ScratchFloats storage_;
};

// The fp32 tensor a kernel writes for output `out`: `out` itself when it is fp32, else dense
// scratch that finish() rounds into `out`. Until finish(), `out` is untouched.
class Fp32Output {
 public:
  Status stage(const TensorView& out);
  const TensorView& view() const { return view_; }
  Status finish() const;

 private:
  TensorView out_, view_;
  ScratchFloats storage_;
};

// Fp32Input and Fp32Output for a call with several half operands, behind CudaFp32Scratch's
// interface (so one code path serves host and Device::CUDA tensors): host tensors widened on the
// host, copies kept until this object is destroyed.
class HostFp32Scratch {
 public:
  Status widen(const TensorView& t, TensorView* fp32);
  Status stage(const TensorView& out, TensorView* fp32);
  Status finish(const TensorView& fp32, const TensorView& out) const;

 private:
  // The copies, in place rather than in a std::deque (whose empty state already allocates): at
  // most one per half operand (MHA: both inputs, every weight and bias, the additive mask).
  std::array<Fp32Input, 16> inputs_;
  size_t used_ = 0;
  Fp32Output output_;
};

#if ATTENTION_GPU
// The half operands of a Device::CUDA call as fp32 device scratch, converted on the device by the
// GPU convert kernels on the call's stream, and the one rounding of a staged fp32 result into a
// half output: what Fp32Input and Fp32Output do on the host. The scratch lives until this object
// is destroyed (after waiting for the stream).
class CudaFp32Scratch {
 public:
  explicit CudaFp32Scratch(void* cuda_stream);
  ~CudaFp32Scratch();
  CudaFp32Scratch(const CudaFp32Scratch&) = delete;
  CudaFp32Scratch& operator=(const CudaFp32Scratch&) = delete;
  // `t` (a validated Device::CUDA float tensor, or absent) as fp32: itself when it is, else a dense
  // device copy.
  Status widen(const TensorView& t, TensorView* fp32);
  // The fp32 tensor a kernel writes for output `out`: itself, or dense device scratch.
  Status stage(const TensorView& out, TensorView* fp32);
  // Rounds a staged result into `out` (nothing when out is fp32).
  Status finish(const TensorView& fp32, const TensorView& out);
  // Dense fp32 device scratch of t's shape (uninitialized), e.g. for rotated copies.
  Status allocate(const TensorView& t, TensorView* fp32);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void* cuda_stream_;
};
#endif

// fn(scratch) with the scratch for tensors on `device`: CudaFp32Scratch (on `cuda_stream`) for
// Device::CUDA, HostFp32Scratch otherwise.
template <typename Fn>
Status with_fp32_scratch(Device device, void* cuda_stream, Fn&& fn) {
#if ATTENTION_GPU
  if (device == Device::CUDA) {
    CudaFp32Scratch scratch(cuda_stream);
    return fn(scratch);
  }
#endif
  (void)device;
  (void)cuda_stream;
  HostFp32Scratch scratch;
  return fn(scratch);
}

}  // namespace attention::detail
