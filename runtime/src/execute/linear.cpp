#include "execute/linear.h"

#include <vector>

#include "kernels/generated_kernels.h"
#include "kernels/halide_view.h"
#include "linear_f32.h"

namespace attention::detail {

Status run_linear(const TensorView& x, const TensorView& weight, const TensorView& bias,
                  const TensorView& y) {
  std::vector<float> bias_storage;
  HalideView hx(x), hw(weight), hb(dense_bias(bias, weight.shape[0], bias_storage)), hy(y);
  return run_kernel("linear_f32", linear_f32, hx.get(), hw.get(), hb.get(), hy.get());
}

TensorView dense_bias(const TensorView& bias, int64_t N, std::vector<float>& storage) {
  if (bias.data != nullptr && (N <= 1 || bias.strides[0] == 1)) return bias;
  storage.assign(static_cast<size_t>(N), 0.0f);
  if (bias.data != nullptr) {
    const auto* values = static_cast<const float*>(bias.data);
    for (int64_t n = 0; n < N; ++n) storage[n] = values[n * bias.strides[0]];
  }
  return TensorView::contiguous(storage.data(), {N});
}

TensorView dense_output(Scratch& storage, int64_t B, int64_t M, int64_t N) {
  storage.reset(new float[static_cast<size_t>(B * M * N)]);
  return TensorView::contiguous(storage.get(), {B, M, N});
}

TensorView transposed(const TensorView& t) {
  TensorView view = t;
  std::swap(view.shape[0], view.shape[1]);
  std::swap(view.strides[0], view.strides[1]);
  return view;
}

}  // namespace attention::detail
