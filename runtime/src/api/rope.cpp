// apply_rotary_embedding: argument checks, θ_i, then the generated rope_f32 kernel.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/rope_args.h"
#include "execute/gpu.h"
#include "execute/half_precision.h"
#include "kernels/generated_kernels.h"
#include "kernels/halide_view.h"
#include "rope_f32.h"
#if ATTENTION_GPU
#include "rope_f32_cuda.h"
#include "rope_f32_opencl.h"
#endif
#include "call/validate.h"

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

Status rotate(Run run, const TensorView& x, const TensorView& out, const RopeArgs& args,
              void* cuda_stream) {
  if (out.numel() == 0) return Status::ok_status();
  // Half tensors widened, the result rounded once: on the host, or on the device for
  // Device::CUDA tensors.
  const auto run_with = [&](auto& scratch) -> Status {
    TensorView x32, out32;
    ATTENTION_RETURN_IF_ERROR(scratch.widen(x, &x32));
    ATTENTION_RETURN_IF_ERROR(scratch.stage(out, &out32));
    const int64_t B = x.shape[0];
    HalideView hx(x32), hout(out32),
        hoffsets(
            TensorView::contiguous(const_cast<int32_t*>(args.offsets.data()), DType::Int32, {B})),
        hfreq(TensorView::contiguous(const_cast<float*>(args.inv_freq.data()),
                                     {args.rotary_dim / 2}));
    const auto R = static_cast<int32_t>(args.rotary_dim);
    if (run == Run::CPU) {
      ATTENTION_RETURN_IF_ERROR(run_kernel("rope_f32", rope_f32, hx.get(), hoffsets.get(),
                                           hfreq.get(), R, args.interleaved, hout.get()));
      return scratch.finish(out32, out);
    }
#if ATTENTION_GPU
    GpuCall call(run, cuda_stream);
    ATTENTION_RETURN_IF_ERROR(call.input(hx.get(), x32.device));
    ATTENTION_RETURN_IF_ERROR(call.input(hoffsets.get(), Device::CPU));
    ATTENTION_RETURN_IF_ERROR(call.input(hfreq.get(), Device::CPU));
    ATTENTION_RETURN_IF_ERROR(call.output(hout.get(), out32.device));
    ATTENTION_RETURN_IF_ERROR(
        run == Run::CUDA ? call.run("rope_f32_cuda", rope_f32_cuda, hx.get(), hoffsets.get(),
                                    hfreq.get(), R, args.interleaved, hout.get())
                         : call.run("rope_f32_opencl", rope_f32_opencl, hx.get(), hoffsets.get(),
                                    hfreq.get(), R, args.interleaved, hout.get()));
    return scratch.finish(out32, out);
#else
    (void)cuda_stream;
    return Status::error(StatusCode::BackendUnavailable, "internal: no GPU kernels in this build");
#endif
  };
  return with_fp32_scratch(x.device, cuda_stream, run_with);
}

}  // namespace detail

Status apply_rotary_embedding(const TensorView& x, const TensorView& out,
                              const RopeOptions& options, const DeviceOptions& device) {
  const detail::NamedViews tensors = {{&x, "x"}, {&out, "out"}};
  detail::Run run = detail::Run::CPU;
  ATTENTION_RETURN_IF_ERROR(detail::resolve_device_options(device, tensors, &run));
  const Device on = detail::device_of(tensors);
  const bool gpu = run != detail::Run::CPU;
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(x, "x", 4, "[B, H, S, D]", on, gpu));
  const int64_t B = x.shape[0], H = x.shape[1], S = x.shape[2], D = x.shape[3];
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(out, "out", 4, "[B, H, S, D]", on, gpu));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(out, "out", {{"B", B}, {"H", H}, {"S", S}, {"D", D}}));
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", {{&x, "x"}}));
  if (gpu) ATTENTION_RETURN_IF_ERROR(detail::check_gpu_strides(tensors));
  detail::RopeArgs args;
  ATTENTION_RETURN_IF_ERROR(detail::check_rope(options, B, D, 0, S - 1, "", &args));
  return detail::rotate(run, x, out, args, device.gpu.cuda_stream);
}

}  // namespace attention
