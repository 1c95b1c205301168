#include "halide_view.h"

#include "scratch_allocator.h"

namespace attention::detail {
namespace {

// Halide hands every error of a call, from whichever thread raised it, the call's user_context.
// Calls without a context (a test calling a kernel directly) keep Halide's default: stderr.
void record_halide_error(void* user_context, const char* message) {
  if (user_context == nullptr) return halide_default_error(user_context, message);
  auto* call = static_cast<KernelCall*>(user_context);
  const std::lock_guard<std::mutex> lock(call->mutex);
  call->error += message;
}

}  // namespace

HalideView::HalideView(const TensorView& t) {
  for (int d = 0; d < t.rank; ++d) {
    // Sizes were checked to fit in int32 before any view is built.
    const int hd = t.rank - 1 - d;
    dims_[hd] =
        halide_dimension_t(0, static_cast<int32_t>(t.shape[d]), static_cast<int32_t>(t.strides[d]));
  }
  buffer_.host = static_cast<uint8_t*>(t.data);
  buffer_.type = t.dtype == DType::Bool    ? halide_type_t(halide_type_uint, 8)
                 : t.dtype == DType::Int32 ? halide_type_t(halide_type_int, 32)
                                           : halide_type_t(halide_type_float, 32);
  buffer_.dimensions = t.rank;
  buffer_.dim = dims_;
}

void configure_halide_runtime() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Halide's default handler prints to stderr and may abort; ours reports through Status instead.
    halide_set_error_handler(record_halide_error);
    install_scratch_allocator();
  });
}

}  // namespace attention::detail
