// plan_mha (plan/mha_plan.h).
#include "plan/mha_plan.h"

#include <string>

#include "call/validate.h"
#include "kernels/kernel_table.h"

namespace attention::detail {
namespace {

// The plan of the call with every tensor fp32 (the call's own, or the copies Widened makes).
Status plan_fp32(Run run, const TensorView& x_q, const MhaShape& s, const MhaOptions& options,
                 MhaPlan* plan) {
  plan->run = run;
  if (s.Sk == 0) {
    if (x_q.device == Device::CUDA) {
      return Status::error(StatusCode::Unsupported,
                           "x_kv: Sk = 0 is not supported for Device::CUDA tensors yet");
    }
    plan->route = MhaRoute::NoKeys;
    return Status::ok_status();
  }
  plan->masked = !options.mask.empty();
  const MhaRow& row = mha_row(run);
  plan->kernel = plan->masked ? row.masked.name : row.plain.name;
  if (run == Run::CPU) {
    plan->route = MhaRoute::Kernel;
    plan->weights = given(options.attention_weights);
    return Status::ok_status();
  }
  plan->route = MhaRoute::Gpu;
  return plan_gpu_chunks(kernel_gpu_tiling(plan->kernel), s.B, s.H, s.Sq, s.Sk, s.D, options.gpu,
                         "options.gpu", /*head_unit=*/s.H, &plan->chunks);
}

}  // namespace

Status plan_mha(Run run, const TensorView& x_q, const TensorView& x_kv, const Projections& p,
                const TensorView& out, const MhaShape& s, const MhaOptions& options,
                MhaPlan* plan) {
  plan->run = run;
  if (s.B == 0 || s.Sq == 0) {
    plan->route = MhaRoute::Nothing;
    return Status::ok_status();
  }
  for (const TensorView* t : {&x_q, &x_kv, &out, &p.wq, &p.wk, &p.wv, &p.bq, &p.bk, &p.bv, &p.wo,
                              &p.bo, &options.mask.additive_mask}) {
    if (is_half(t->dtype)) {
      plan->route = MhaRoute::Widened;
      plan->then = std::make_unique<MhaPlan>();
      return plan_fp32(run, x_q, s, options, plan->then.get());
    }
  }
  return plan_fp32(run, x_q, s, options, plan);
}

std::string MhaPlan::describe() const {
  static const char* const kRoutes[] = {"nothing", "widened", "no-keys", "gpu", "kernel"};
  std::string text =
      std::string(kRoutes[static_cast<int>(route)]) + " backend=" + backend_name(run);
  if (kernel != nullptr) text += std::string(" kernel=") + kernel;
  if (route == MhaRoute::Gpu) text += " chunks=" + std::to_string(chunks.size());
  if (weights) text += " attention_weights";
  if (then) text += " then: " + then->describe();
  return text;
}

}  // namespace attention::detail
