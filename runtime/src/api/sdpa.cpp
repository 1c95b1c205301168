// scaled_dot_product_attention and explain_sdpa: the call checked, planned (plan/sdpa_plan.h) and
// executed (execute/sdpa_execute.cpp).
#include <cmath>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/rope_args.h"
#include "call/sdpa_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/gpu.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"
#include "plan/sdpa_plan.h"

namespace attention {
namespace {

Status check_sdpa_args(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const SdpaOptions& options, Device device) {
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(q, "q", 4, "[B, H, Sq, D]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(k, "k", 4, "[B, Hkv, Sk, D]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(v, "v", 4, "[B, Hkv, Sk, Dv]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(out, "out", 4, "[B, H, Sq, Dv]", device));
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], Sk = k.shape[2], Dv = v.shape[3];
  if (D == 0)
    return Status::invalid("q: head dim D must be >= 1, got shape " + detail::shape_string(q));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(k, "k", {{"B", B}, {"Hkv", -1}, {"Sk", -1}, {"D", D}}));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(v, "v", {{"B", B}, {"Hkv", Hkv}, {"Sk", Sk}, {"Dv", -1}}));
  if (Dv == 0)
    return Status::invalid("v: head dim Dv must be >= 1, got shape " + detail::shape_string(v));
  if (Hkv == 0 ? H != 0 : H % Hkv != 0) {
    return Status::invalid("k: kv heads Hkv=" + std::to_string(Hkv) +
                           " must divide the query heads H=" + std::to_string(H) +
                           " (grouped-query attention)");
  }
  return detail::check_sdpa_outputs(out, options, B, H, Sq, Sk, Dv,
                                    {{&q, "q"}, {&k, "k"}, {&v, "v"}}, device);
}

}  // namespace

namespace detail {

Status check_sdpa_outputs(const TensorView& out, const SdpaOptions& options, int64_t B, int64_t H,
                          int64_t Sq, int64_t Sk, int64_t Dv, NamedViews inputs, Device device) {
  ATTENTION_RETURN_IF_ERROR(check_shape(out, "out", {{"B", B}, {"H", H}, {"Sq", Sq}, {"Dv", Dv}}));
  if (options.scale && !std::isfinite(*options.scale)) {
    return Status::invalid("scale: must be finite, got " + std::to_string(*options.scale));
  }
  ATTENTION_RETURN_IF_ERROR(check_gpu_options(options.gpu, "gpu"));
  const MaskOptions& m = options.mask;
  ATTENTION_RETURN_IF_ERROR(check_mask(m, B, H, Sq, Sk, device, /*half_additive=*/true));
  // Every input an output must not overlap (absent mask views are empty and never overlap).
  append_mask_views(m, inputs);
  ATTENTION_RETURN_IF_ERROR(check_output_memory(out, "out", inputs));
  // logsumexp counts as absent without data (a rank alone is not checked here).
  if (options.logsumexp.data == nullptr) return Status::ok_status();
  inputs.insert(inputs.begin(), {&out, "out"});
  return check_optional_output(options.logsumexp, "logsumexp", "[B, H, Sq]",
                               {{"B", B}, {"H", H}, {"Sq", Sq}}, inputs, device);
}

Status check_sdpa_call(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const SdpaOptions& options, Run* run) {
  const MaskOptions& m = options.mask;
  // Lengths and slopes are host tensors in every call (see check_mask).
  const NamedViews tensors = {{&q, "q"},
                              {&k, "k"},
                              {&v, "v"},
                              {&out, "out"},
                              {&options.logsumexp, "logsumexp"},
                              {&m.bool_mask, "mask.bool_mask"},
                              {&m.additive_mask, "mask.additive_mask"}};
  ATTENTION_RETURN_IF_ERROR(resolve_backend(options.backend, tensors, run));
  ATTENTION_RETURN_IF_ERROR(check_cuda_stream(options.gpu, "gpu", *run));
  ATTENTION_RETURN_IF_ERROR(check_sdpa_args(q, k, v, out, options, device_of(tensors)));
  if (options.rope) {
    RopeArgs rope;
    ATTENTION_RETURN_IF_ERROR(detail::check_call_rope(*options.rope, q, k, &rope));
  }
  if (*run == Run::CPU) return Status::ok_status();
  ATTENTION_RETURN_IF_ERROR(check_gpu_strides(tensors));
  if (out.numel() == 0) return Status::ok_status();
  if (q.device == Device::CUDA) {  // host tensors: zero-filled on the host
    if (k.shape[2] == 0) {
      return Status::error(StatusCode::Unsupported,
                           "k: Sk = 0 is not supported for Device::CUDA tensors yet");
    }
  }
  if (k.shape[2] == 0) return Status::ok_status();  // host tensors: the zeros are written there
#if ATTENTION_GPU
  // The workspace plan of the kernel that will serve the call (run_gpu plans it again).
  const int64_t Sq = q.shape[2];
  const char* name = gpu_sdpa_kernel_name(*run, !m.empty(), Sq);
  std::vector<GpuChunk> chunks;
  return plan_gpu_chunks(kernel_gpu_tiling(name), q.shape[0], q.shape[1], Sq, k.shape[2],
                         v.shape[3], options.gpu, "gpu", q.shape[1] / k.shape[1], &chunks);
#else
  return Status::ok_status();
#endif
}

}  // namespace detail

Status scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const SdpaOptions& call_options) {
  const SdpaOptions options = detail::without_absent_logsumexp(call_options);
  detail::Run run = detail::Run::CPU;
  ATTENTION_RETURN_IF_ERROR(detail::check_sdpa_call(q, k, v, out, options, &run));
  return detail::plan_and_execute_sdpa("scaled_dot_product_attention", run, q, k, v, out, options);
}

Status explain_sdpa(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const SdpaOptions& call_options, std::string* plan) {
  if (plan == nullptr) return Status::invalid("plan: must not be null");
  const SdpaOptions options = detail::without_absent_logsumexp(call_options);
  detail::Run run = detail::Run::CPU;
  ATTENTION_RETURN_IF_ERROR(detail::check_sdpa_call(q, k, v, out, options, &run));
  detail::SdpaPlan planned;
  detail::plan_sdpa(run, q, k, v, out, options, &planned);
  *plan = planned.describe();
  return Status::ok_status();
}

}  // namespace attention
