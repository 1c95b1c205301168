#include "kernels/halide_view.h"

#include "execute/scratch_allocator.h"

namespace attention::detail {
namespace {

// The live KernelCalls, a list through the calls themselves (a few at a time: one per thread
// running a kernel). Never destroyed: Halide's hooks may still run while the process exits.
struct LiveCalls {
  std::mutex mutex;
  KernelCall* first = nullptr;
};
LiveCalls& live_calls() {
  static LiveCalls* calls = new LiveCalls;
  return *calls;
}

// The handler that was installed before ours (an application's, or Halide's default).
halide_error_handler_t previous_error_handler = nullptr;

// Halide hands every error of a call, from whichever thread raised it, the call's user_context.
// Every other error (an application's own pipeline, a kernel called without a context) goes to
// the handler installed before ours, by default Halide's (stderr).
void record_halide_error(void* user_context, const char* message) {
  if (!is_our_call(user_context)) {
    return (previous_error_handler ? previous_error_handler : halide_default_error)(user_context,
                                                                                    message);
  }
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
  buffer_.type = t.dtype == DType::Bool       ? halide_type_t(halide_type_uint, 8)
                 : t.dtype == DType::Int32    ? halide_type_t(halide_type_int, 32)
                 : t.dtype == DType::Float16  ? halide_type_t(halide_type_float, 16)
                 : t.dtype == DType::BFloat16 ? halide_type_t(halide_type_bfloat, 16)
                                              : halide_type_t(halide_type_float, 32);
  buffer_.dimensions = t.rank;
  buffer_.dim = dims_;
}

HalideView::HalideView(const TensorView& t, const std::array<int64_t, kMaxRank>& mins)
    : HalideView(t) {
  for (int d = 0; d < t.rank; ++d) dims_[t.rank - 1 - d].min = static_cast<int32_t>(mins[d]);
}

HalideView::HalideView(const TensorView& lse, RowStats stats) : HalideView(lse) {
  for (int d = lse.rank; d > 0; --d) dims_[d] = dims_[d - 1];
  dims_[0] = halide_dimension_t(0, static_cast<int32_t>(stats.features), 0);
  buffer_.dimensions = lse.rank + 1;
}

KernelCall::KernelCall() {
  LiveCalls& live = live_calls();
  const std::lock_guard<std::mutex> lock(live.mutex);
  next_live = live.first;
  if (next_live != nullptr) next_live->previous_live = this;
  live.first = this;
}

KernelCall::~KernelCall() {
  LiveCalls& live = live_calls();
  const std::lock_guard<std::mutex> lock(live.mutex);
  (previous_live != nullptr ? previous_live->next_live : live.first) = next_live;
  if (next_live != nullptr) next_live->previous_live = previous_live;
}

bool is_our_call(const void* user_context) {
  if (user_context == nullptr) return false;
  LiveCalls& live = live_calls();
  const std::lock_guard<std::mutex> lock(live.mutex);
  for (const KernelCall* call = live.first; call != nullptr; call = call->next_live) {
    if (call == user_context) return true;
  }
  return false;
}

void configure_halide_runtime() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Halide's default handler prints to stderr and may abort; ours reports through Status instead.
    previous_error_handler = halide_set_error_handler(record_halide_error);
    install_scratch_allocator();
  });
}

}  // namespace attention::detail
