// static_attention, factorized_static_attention: the static_attention_f32 kernel (softmax of a
// weight matrix, then its product with the values), after the linear kernel for W₁·W₂.
#include <vector>

#include "attention/attention.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/linear.h"
#include "kernels/generated_kernels.h"
#include "kernels/halide_view.h"
#include "static_attention_f32.h"

namespace attention {
namespace {

// values X [B, Sk, D] and out [B, Sq, D] for a weight of Sq rows and Sk columns; `weights` are
// inputs out must not overlap.
Status check_values_and_out(const TensorView& values, const TensorView& out, int64_t Sq, int64_t Sk,
                            detail::NamedViews weights) {
  ATTENTION_RETURN_IF_ERROR(detail::check_view(values, "values", 3, "[B, Sk, D]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(out, "out", 3, "[B, Sq, D]"));
  const int64_t B = values.shape[0], D = values.shape[2];
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(values, "values", {{"B", -1}, {"Sk", Sk}, {"D", -1}}));
  if (D == 0) {
    return Status::invalid("values: feature dim D must be >= 1, got shape " +
                           detail::shape_string(values));
  }
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(out, "out", {{"B", B}, {"Sq", Sq}, {"D", D}}));
  weights.push_back({&values, "values"});
  return detail::check_output_memory(out, "out", weights);
}

// The kernel on a validated, contiguous-row W [Sq, Sk].
Status run_static(const TensorView& weight, const TensorView& values, const TensorView& out) {
  if (out.numel() == 0) return Status::ok_status();
  if (values.shape[1] == 0) {  // no keys
    detail::fill(out, 0.0f);
    return Status::ok_status();
  }
  detail::HalideView hw(weight), hx(values), hout(out);
  return detail::run_kernel("static_attention_f32", static_attention_f32, hw.get(), hx.get(),
                            hout.get());
}

}  // namespace

Status static_attention(const TensorView& weight, const TensorView& values, const TensorView& out) {
  ATTENTION_RETURN_IF_ERROR(detail::check_view(weight, "weight", 2, "[Sq, Sk]"));
  ATTENTION_RETURN_IF_ERROR(
      check_values_and_out(values, out, weight.shape[0], weight.shape[1], {{&weight, "weight"}}));
  return run_static(weight, values, out);
}

Status factorized_static_attention(const TensorView& w1, const TensorView& w2,
                                   const TensorView& values, const TensorView& out) {
  ATTENTION_RETURN_IF_ERROR(detail::check_view(w1, "w1", 2, "[Sq, R]", DType::Float32, true));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(w2, "w2", 2, "[R, Sk]", DType::Float32, true));
  const int64_t Sq = w1.shape[0], R = w1.shape[1], Sk = w2.shape[1];
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(w2, "w2", {{"R", R}, {"Sk", -1}}));
  if (R == 0) {
    return Status::invalid("w1: rank R must be >= 1, got shape " + detail::shape_string(w1));
  }
  ATTENTION_RETURN_IF_ERROR(check_values_and_out(values, out, Sq, Sk, {{&w1, "w1"}, {&w2, "w2"}}));
  if (out.numel() == 0 || Sk == 0) return run_static(TensorView{}, values, out);
  // W = W₁·W₂ once: a linear layer on the rows of W₁ with weight W₂ᵀ [Sk, R].
  detail::Scratch product;
  const TensorView w = detail::dense_output(product, 1, Sq, Sk);
  // The linear kernel wants x with contiguous rows: copy W₁ if it is not.
  detail::Scratch w1_rows;
  TensorView x = w1;
  x.rank = 3;
  x.shape = {1, Sq, R, 0};
  x.strides = {Sq * w1.strides[0], w1.strides[0], w1.strides[1], 0};
  if (w1.strides[1] != 1) {
    x = detail::dense_output(w1_rows, 1, Sq, R);
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t r = 0; r < R; ++r)
        w1_rows[i * R + r] =
            static_cast<const float*>(w1.data)[i * w1.strides[0] + r * w1.strides[1]];
  }
  ATTENTION_RETURN_IF_ERROR(detail::run_linear(x, detail::transposed(w2), TensorView{}, w));
  TensorView w_2d = w;
  w_2d.rank = 2;
  w_2d.shape = {Sq, Sk, 0, 0};
  w_2d.strides = {Sk, 1, 0, 0};
  return run_static(w_2d, values, out);
}

}  // namespace attention
