#include "execute/attention_weights.h"

#include <tuple>

#include "additive_f32_weights.h"
#include "call/mask_args.h"
#include "kernels/generated_kernels.h"
#include "kernels/halide_view.h"
#include "sdpa_f32_weights.h"

namespace attention::detail {

Status run_attention_weights(const TensorView& q, const TensorView& k, const TensorView& v,
                             float scale, const std::vector<float>& w_a, const MaskOptions& mask,
                             const TensorView& lse, const TensorView& weights) {
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], Sk = k.shape[2];
  MaskArgs m(mask, B, H, Sq, Sk);
  HalideView hq(q), hk(k), hv(v), hlse(lse), hweights(weights);
  const auto inputs = std::tuple(hq.get(), hk.get(), hv.get(), scale);
  // The weights' own pass: no values to check, no key split (both arguments unused).
  const auto mask_args = m.arguments(/*values_finite=*/false);
  if (w_a.empty()) {
    return run_kernel_parts("sdpa_f32_weights", sdpa_f32_weights, inputs, mask_args,
                            std::tuple(hlse.get(), 0, hweights.get()));
  }
  HalideView hw(
      TensorView::contiguous(const_cast<float*>(w_a.data()), {static_cast<int64_t>(w_a.size())}));
  return run_kernel_parts("additive_f32_weights", additive_f32_weights, inputs, mask_args,
                          std::tuple(hw.get(), hlse.get(), 0, hweights.get()));
}

}  // namespace attention::detail
