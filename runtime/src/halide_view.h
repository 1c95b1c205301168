// Wraps a TensorView as a halide_buffer_t without copying. Halide's dimension 0 is innermost, so
// the dims are reversed.
#pragma once

#include <HalideRuntime.h>

#include <string>

#include "attention/attention.h"

namespace attention::detail {

class HalideView {
 public:
  explicit HalideView(const TensorView& t);
  HalideView(const HalideView&) = delete;
  HalideView& operator=(const HalideView&) = delete;
  halide_buffer_t* get() { return &buffer_; }

 private:
  halide_dimension_t dims_[kMaxRank];
  halide_buffer_t buffer_{};
};

// Calls a generated kernel; a Halide error becomes a Status carrying Halide's message.
template <typename Kernel, typename... Args>
Status run_kernel(const char* kernel_name, Kernel kernel, Args... args);

// The message of the last Halide error on this thread (captured by our error handler).
std::string take_halide_error();
// Routes Halide's errors into Status and its scratch memory through our allocator. Idempotent.
void configure_halide_runtime();

template <typename Kernel, typename... Args>
Status run_kernel(const char* kernel_name, Kernel kernel, Args... args) {
  configure_halide_runtime();
  const int code = kernel(args...);
  if (code == 0) return Status::ok_status();
  return Status::invalid(std::string("internal: kernel ") + kernel_name + " failed (code " +
                         std::to_string(code) + "): " + take_halide_error());
}

}  // namespace attention::detail
