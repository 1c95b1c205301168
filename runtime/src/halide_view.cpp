#include "halide_view.h"

#include <mutex>

#include "scratch_allocator.h"

namespace attention::detail {
namespace {

thread_local std::string last_halide_error;

void record_halide_error(void* /*user_context*/, const char* message) {
  last_halide_error = message ? message : "";
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
  buffer_.type = halide_type_t(halide_type_float, 32);
  buffer_.dimensions = t.rank;
  buffer_.dim = dims_;
}

std::string take_halide_error() {
  std::string message;
  message.swap(last_halide_error);
  return message;
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
