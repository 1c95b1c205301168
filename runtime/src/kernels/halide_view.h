// Wraps a TensorView as a halide_buffer_t without copying. Halide's dimension 0 is innermost, so
// the dims are reversed.
#pragma once

#include <HalideRuntime.h>

#include <array>
#include <mutex>
#include <string>
#include <tuple>

#include "attention/attention.h"

namespace attention::detail {

// The features of a CPU kernel's logsumexp output (RowStats view below).
struct RowStats {
  int64_t features;
};

class HalideView {
 public:
  explicit HalideView(const TensorView& t);
  // A CPU kernel's logsumexp output: the rows of `lse` [B, H, Sq] with a leading stride-0
  // dimension of out's `features` (Dv). Those kernels write out and logsumexp as one Tuple over
  // out's shape (generators' SdpaInputs::stats_in_out), each row's value at every feature.
  HalideView(const TensorView& lse, RowStats stats);
  // A window of a larger tensor that keeps its coordinates: `mins` (outermost first, one per
  // dimension of t) are the indices of t's first element in that tensor. A kernel then computes
  // (or reads) exactly those indices, e.g. a chunk of heads of a GPU call.
  HalideView(const TensorView& t, const std::array<int64_t, kMaxRank>& mins);
  HalideView(const HalideView&) = delete;
  HalideView& operator=(const HalideView&) = delete;
  halide_buffer_t* get() { return &buffer_; }

 private:
  halide_dimension_t dims_[kMaxRank + 1];  // + RowStats' feature dimension
  halide_buffer_t buffer_{};
};

// What Halide reports during one kernel call; its address is the call's user_context. Alive calls
// are registered, so Halide's process-wide hooks can tell ours from an application's own Halide
// pipelines, whose user_context is not ours to read.
struct KernelCall {
  KernelCall();
  ~KernelCall();
  KernelCall(const KernelCall&) = delete;
  KernelCall& operator=(const KernelCall&) = delete;

  std::mutex mutex;  // parallel tasks of one call may fail at once
  std::string error;
  void* cuda_stream = nullptr;  // GpuOptions::cuda_stream of a CUDA call
  // The live calls' list (halide_view.cpp), linked through the calls so a call allocates nothing.
  KernelCall* previous_live = nullptr;
  KernelCall* next_live = nullptr;
};

// True when `user_context` is a live KernelCall of this library.
bool is_our_call(const void* user_context);

// Routes Halide's errors into the calling KernelCall and its scratch memory through our allocator.
// Idempotent.
void configure_halide_runtime();

// The Status code of a Halide runtime error code: allocation failures are OutOfMemory, the rest
// KernelFailure.
inline StatusCode status_code_of_halide_error(int code) {
  return code == halide_error_code_out_of_memory || code == halide_error_code_device_malloc_failed
             ? StatusCode::OutOfMemory
             : StatusCode::KernelFailure;
}

// Appends `name` to the kernel recorder of plan/sdpa_plan.h (record_kernels) when one is installed.
void note_kernel(const char* name);

// Calls a generated kernel (built with the user_context feature); a Halide error becomes a Status
// carrying Halide's message.
template <typename Kernel, typename... Args>
Status run_kernel(const char* kernel_name, Kernel kernel, Args... args) {
  configure_halide_runtime();
  note_kernel(kernel_name);
  KernelCall call;
  const int code = kernel(&call, args...);
  if (code == 0) return Status::ok_status();
  return Status::error(status_code_of_halide_error(code),
                       std::string("internal: kernel ") + kernel_name + " failed (code " +
                           std::to_string(code) + "): " + call.error);
}

// run_kernel with the arguments in parts (tuples), concatenated in order: e.g. the inputs, then
// MaskArgs::arguments(), then key_split and the outputs.
template <typename Kernel, typename... Parts>
Status run_kernel_parts(const char* kernel_name, Kernel kernel, const Parts&... parts) {
  return std::apply([&](auto... args) { return run_kernel(kernel_name, kernel, args...); },
                    std::tuple_cat(parts...));
}

}  // namespace attention::detail
