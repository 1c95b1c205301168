#include "attention_weights.h"

#include "additive_f32_weights.h"
#include "halide_view.h"
#include "mask_args.h"
#include "sdpa_f32_weights.h"

namespace attention::detail {

Status run_attention_weights(const TensorView& q, const TensorView& k, const TensorView& v,
                             float scale, const std::vector<float>& w_a, const MaskOptions& mask,
                             const TensorView& lse, const TensorView& weights) {
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], Sk = k.shape[2];
  MaskArgs m(mask, B, H, Sq, Sk);
  HalideView hq(q), hk(k), hv(v), hlse(lse), hweights(weights);
  if (w_a.empty()) {
    return run_kernel("sdpa_f32_weights", sdpa_f32_weights, hq.get(), hk.get(), hv.get(), scale,
                      m.key_lengths(), m.query_lengths(), m.diag_offset, m.band_back,
                      m.band_forward, m.has_bias, m.bool_mask(), m.additive_mask(),
                      m.alibi_slopes(), m.softcap, false, hlse.get(), 0, hweights.get());
  }
  HalideView hw(
      TensorView::contiguous(const_cast<float*>(w_a.data()), {static_cast<int64_t>(w_a.size())}));
  return run_kernel("additive_f32_weights", additive_f32_weights, hq.get(), hk.get(), hv.get(),
                    scale, m.key_lengths(), m.query_lengths(), m.diag_offset, m.band_back,
                    m.band_forward, m.has_bias, m.bool_mask(), m.additive_mask(), m.alibi_slopes(),
                    m.softcap, false, hw.get(), hlse.get(), 0, hweights.get());
}

}  // namespace attention::detail
