// Half-precision operands (Float16, BFloat16) around the fp32 kernels: widening copies of inputs
// and the one rounding of an fp32 result into a half output, both by the generated convert
// kernels (generators/convert_generator.cpp: F16C / NEON conversions, all cores).
#pragma once

#include <HalideRuntime.h>

#include <memory>

#include "attention/attention.h"

namespace attention::detail {

// fp32 scratch from halide_malloc, i.e. the runtime's caching allocator (scratch_allocator.cpp):
// a widened operand or staged output of a few MiB is reused by the thread's next call instead of
// being mapped afresh (with malloc's fresh pages the widening path ran 1.47x the fp32 call at
// 1x16x1024x1024x128 on Zen 5, 1.05x with them kept).
struct HalideFree {
  void operator()(float* p) const { halide_free(nullptr, p); }
};
using ScratchFloats = std::unique_ptr<float, HalideFree>;

// Converts `from` into `to` (same shape, rank <= 4, any strides with a contiguous innermost dim),
// between Float32 and a half type in either direction. Both must be validated CPU views.
Status convert(const TensorView& from, const TensorView& to);

// The error of a call with half-precision tensors on Device::CUDA (`tensors` names them).
Status half_on_cuda_unsupported(const char* tensors);

// A validated float tensor as fp32: the tensor itself when it already is, else a dense fp32 copy
// (exact: every half value is an fp32 value).
class Fp32Input {
 public:
  Status widen(const TensorView& t);
  const TensorView& view() const { return view_; }

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

}  // namespace attention::detail
