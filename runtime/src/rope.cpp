// apply_rotary_embedding: argument checks, θ_i, then the generated rope_f32 kernel.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "generated_kernels.h"
#include "half_precision.h"
#include "halide_view.h"
#include "rope_f32.h"
#include "validate.h"

namespace attention {

Status apply_rotary_embedding(const TensorView& x, const TensorView& out,
                              const RopeOptions& options) {
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(x, "x", 4, "[B, H, S, D]"));
  const int64_t B = x.shape[0], H = x.shape[1], S = x.shape[2], D = x.shape[3];
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(out, "out", 4, "[B, H, S, D]"));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(out, "out", {{"B", B}, {"H", H}, {"S", S}, {"D", D}}));
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", {{&x, "x"}}));
  const int64_t R = options.rotary_dim == 0 ? D : options.rotary_dim;
  if (R < 2 || R > D || R % 2 != 0) {
    return Status::invalid("rotary_dim: must be even and in [2, D=" + std::to_string(D) +
                           "] (0: D), got " + std::to_string(options.rotary_dim));
  }
  if (!std::isfinite(options.base) || options.base <= 0.0f) {
    return Status::invalid("base: must be finite and > 0, got " + std::to_string(options.base));
  }
  std::vector<int32_t> offsets(static_cast<size_t>(B), 0);
  if (detail::given(options.position_offsets)) {
    const TensorView& t = options.position_offsets;
    ATTENTION_RETURN_IF_ERROR(detail::check_view(t, "position_offsets", 1, "[B]", DType::Int32,
                                                 /*any_strides=*/true));
    ATTENTION_RETURN_IF_ERROR(detail::check_shape(t, "position_offsets", {{"B", B}}));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t p = static_cast<const int32_t*>(t.data)[b * t.strides[0]];
      constexpr int64_t kLimit = int64_t{1} << 24;  // positions exact in fp32
      if (p < 0 || p + S > kLimit) {
        return Status::invalid("position_offsets[" + std::to_string(b) + "] = " +
                               std::to_string(p) + ": positions " + std::to_string(p) + " to " +
                               std::to_string(p + S - 1) + " must lie in [0, 2^24)");
      }
      offsets[b] = static_cast<int32_t>(p);
    }
  } else if (S > (int64_t{1} << 24)) {
    return Status::invalid("x: S = " + std::to_string(S) + " positions exceed 2^24");
  }
  if (out.numel() == 0) return Status::ok_status();
  // θ_i in double, rounded once (PyTorch's fp32 formula 1 / base^(2i/R) agrees within an ulp).
  std::vector<float> inv_freq(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(double(options.base), -2.0 * double(i) / double(R)));
  }
  detail::Fp32Input wx;
  detail::Fp32Output result;
  ATTENTION_RETURN_IF_ERROR(wx.widen(x));
  ATTENTION_RETURN_IF_ERROR(result.stage(out));
  detail::HalideView hx(wx.view()), hout(result.view()),
      hoffsets(TensorView::contiguous(offsets.data(), DType::Int32, {B})),
      hfreq(TensorView::contiguous(inv_freq.data(), {R / 2}));
  ATTENTION_RETURN_IF_ERROR(detail::run_kernel(
      "rope_f32", rope_f32, hx.get(), hoffsets.get(), hfreq.get(), static_cast<int32_t>(R),
      options.style == RopeStyle::Interleaved, hout.get()));
  return result.finish();
}

}  // namespace attention
