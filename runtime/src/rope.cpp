// apply_rotary_embedding: argument checks, θ_i, then the generated rope_f32 kernel.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "generated_kernels.h"
#include "half_precision.h"
#include "halide_view.h"
#include "rope_args.h"
#include "rope_f32.h"
#include "validate.h"

namespace attention {

namespace detail {

Status check_rope(const RopeOptions& options, int64_t B, int64_t D, int64_t first, int64_t last,
                  const std::string& prefix, RopeArgs* args) {
  const int64_t R = options.rotary_dim == 0 ? D : options.rotary_dim;
  if (R < 2 || R > D || R % 2 != 0) {
    return Status::invalid(prefix + "rotary_dim: must be even and in [2, D=" + std::to_string(D) +
                           "] (0: D), got " + std::to_string(options.rotary_dim));
  }
  if (!std::isfinite(options.base) || options.base <= 0.0f) {
    return Status::invalid(prefix + "base: must be finite and > 0, got " +
                           std::to_string(options.base));
  }
  constexpr int64_t kLimit = int64_t{1} << 24;  // positions exact in fp32
  args->offsets.assign(static_cast<size_t>(B), 0);
  const std::string name = prefix + "position_offsets";
  if (given(options.position_offsets)) {
    const TensorView& t = options.position_offsets;
    ATTENTION_RETURN_IF_ERROR(
        check_view(t, name.c_str(), 1, "[B]", DType::Int32, /*any_strides=*/true));
    ATTENTION_RETURN_IF_ERROR(check_shape(t, name.c_str(), {{"B", B}}));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t p = static_cast<const int32_t*>(t.data)[b * t.strides[0]];
      if (first <= last && (p + first < 0 || p + last >= kLimit)) {
        return Status::invalid(name + "[" + std::to_string(b) + "] = " + std::to_string(p) +
                               ": positions " + std::to_string(p + first) + " to " +
                               std::to_string(p + last) + " must lie in [0, 2^24)");
      }
      args->offsets[b] = static_cast<int32_t>(p);
    }
  } else if (first <= last && (first < 0 || last >= kLimit)) {
    return Status::invalid(name + ": absent (0), so positions run from " + std::to_string(first) +
                           " to " + std::to_string(last) + ", outside [0, 2^24)");
  }
  // θ_i in double, rounded once (PyTorch's fp32 formula 1 / base^(2i/R) agrees within an ulp).
  args->rotary_dim = R;
  args->inv_freq.resize(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i) {
    args->inv_freq[i] =
        static_cast<float>(std::pow(double(options.base), -2.0 * double(i) / double(R)));
  }
  args->interleaved = options.style == RopeStyle::Interleaved;
  return Status::ok_status();
}

}  // namespace detail

Status apply_rotary_embedding(const TensorView& x, const TensorView& out,
                              const RopeOptions& options) {
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(x, "x", 4, "[B, H, S, D]"));
  const int64_t B = x.shape[0], H = x.shape[1], S = x.shape[2], D = x.shape[3];
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(out, "out", 4, "[B, H, S, D]"));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(out, "out", {{"B", B}, {"H", H}, {"S", S}, {"D", D}}));
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", {{&x, "x"}}));
  detail::RopeArgs args;
  ATTENTION_RETURN_IF_ERROR(detail::check_rope(options, B, D, 0, S - 1, "", &args));
  if (out.numel() == 0) return Status::ok_status();
  detail::Fp32Input wx;
  detail::Fp32Output result;
  ATTENTION_RETURN_IF_ERROR(wx.widen(x));
  ATTENTION_RETURN_IF_ERROR(result.stage(out));
  detail::HalideView hx(wx.view()), hout(result.view()),
      hoffsets(TensorView::contiguous(args.offsets.data(), DType::Int32, {B})),
      hfreq(TensorView::contiguous(args.inv_freq.data(), {args.rotary_dim / 2}));
  ATTENTION_RETURN_IF_ERROR(detail::run_kernel("rope_f32", rope_f32, hx.get(), hoffsets.get(),
                                               hfreq.get(), static_cast<int32_t>(args.rotary_dim),
                                               args.interleaved, hout.get()));
  return result.finish();
}

}  // namespace attention
