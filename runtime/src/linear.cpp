#include "linear.h"

#include <vector>

#include "halide_view.h"
#include "linear_f32.h"

namespace attention::detail {

Status run_linear(const TensorView& x, const TensorView& weight, const TensorView& bias,
                  const TensorView& y) {
  const int64_t N = weight.shape[0];
  std::vector<float> zeros;
  TensorView bias_view = bias;
  if (bias.data == nullptr) {
    zeros.assign(static_cast<size_t>(N), 0.0f);
    bias_view = TensorView::contiguous(zeros.data(), {N});
  }
  HalideView hx(x), hw(weight), hb(bias_view), hy(y);
  return run_kernel("linear_f32", linear_f32, hx.get(), hw.get(), hb.get(), hy.get());
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
