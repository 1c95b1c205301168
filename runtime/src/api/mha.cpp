// multi_head_attention and explain_mha: nn.MultiheadAttention's block, the call checked (shapes,
// packed or separate projections, masks, outputs), planned (plan/mha_plan.h) and executed
// (execute/mha_execute.cpp).
#include <cmath>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/mha_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/gpu.h"
#include "plan/mha_plan.h"
#include "plan/sdpa_plan.h"

namespace attention {
namespace {

using detail::MhaShape;
using detail::Projections;

// Rows [begin, begin + count) of a validated rank-1 or rank-2 view (of any element size).
TensorView rows(const TensorView& t, int64_t begin, int64_t count) {
  return detail::slice(t, 0, begin, count);
}

Status check_matrix(const TensorView& w, const char* name, const char* layout, int64_t rows_,
                    const char* rows_name, int64_t cols, const char* cols_name, Device device) {
  ATTENTION_RETURN_IF_ERROR(
      detail::check_float_view(w, name, 2, layout, device, /*any_strides=*/true));
  return detail::check_shape(w, name, {{rows_name, rows_}, {cols_name, cols}});
}

Status check_bias(const TensorView& b, const char* name, int64_t n, const char* n_name,
                  Device device) {
  if (!detail::given(b)) return Status::ok_status();
  // The GPU kernels read CUDA biases in place: contiguous (host ones are made dense first).
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(b, name, 1, "[N]", device,
                                                     /*any_strides=*/device == Device::CPU));
  return detail::check_shape(b, name, {{n_name, n}});
}

// The packed or separate projection weights, checked against the shape.
Status resolve_projections(const MhaWeights& w, const MhaShape& s, Device device, Projections* p) {
  const bool packed = detail::given(w.in_proj_weight) || detail::given(w.in_proj_bias);
  const bool separate = detail::given(w.q_proj_weight) || detail::given(w.k_proj_weight) ||
                        detail::given(w.v_proj_weight) || detail::given(w.q_bias) ||
                        detail::given(w.k_bias) || detail::given(w.v_bias);
  if (packed && separate) {
    return Status::invalid(
        "weights: give either in_proj_weight/in_proj_bias (packed) or q/k/v_proj_weight and "
        "q/k/v_bias (separate), not both");
  }
  const int64_t kv = s.kv_width();
  if (packed) {
    if (s.Ekv != s.E) {
      return Status::invalid(
          "weights.in_proj_weight: packed weights need x_kv's width Ekv=" + std::to_string(s.Ekv) +
          " to equal E=" + std::to_string(s.E) + " (pass q/k/v_proj_weight instead)");
    }
    ATTENTION_RETURN_IF_ERROR(check_matrix(w.in_proj_weight, "weights.in_proj_weight",
                                           "[E + 2·Hkv·D, E]", s.E + 2 * kv, "E + 2·Hkv·D", s.E,
                                           "E", device));
    ATTENTION_RETURN_IF_ERROR(
        check_bias(w.in_proj_bias, "weights.in_proj_bias", s.E + 2 * kv, "E + 2·Hkv·D", device));
    p->wq = rows(w.in_proj_weight, 0, s.E);
    p->wk = rows(w.in_proj_weight, s.E, kv);
    p->wv = rows(w.in_proj_weight, s.E + kv, kv);
    p->wo = w.out_proj_weight;
    p->bo = w.out_proj_bias;
    if (detail::given(w.in_proj_bias)) {
      p->bq = rows(w.in_proj_bias, 0, s.E);
      p->bk = rows(w.in_proj_bias, s.E, kv);
      p->bv = rows(w.in_proj_bias, s.E + kv, kv);
    }
    return Status::ok_status();
  }
  if (!detail::given(w.q_proj_weight)) {
    return Status::invalid("weights: no projection weights (in_proj_weight, or q/k/v_proj_weight)");
  }
  ATTENTION_RETURN_IF_ERROR(
      check_matrix(w.q_proj_weight, "weights.q_proj_weight", "[E, E]", s.E, "E", s.E, "E", device));
  ATTENTION_RETURN_IF_ERROR(check_matrix(w.k_proj_weight, "weights.k_proj_weight", "[Hkv·D, Ekv]",
                                         kv, "Hkv·D", s.Ekv, "Ekv", device));
  ATTENTION_RETURN_IF_ERROR(check_matrix(w.v_proj_weight, "weights.v_proj_weight", "[Hkv·D, Ekv]",
                                         kv, "Hkv·D", s.Ekv, "Ekv", device));
  ATTENTION_RETURN_IF_ERROR(check_bias(w.q_bias, "weights.q_bias", s.E, "E", device));
  ATTENTION_RETURN_IF_ERROR(check_bias(w.k_bias, "weights.k_bias", kv, "Hkv·D", device));
  ATTENTION_RETURN_IF_ERROR(check_bias(w.v_bias, "weights.v_bias", kv, "Hkv·D", device));
  *p = {w.q_proj_weight, w.k_proj_weight, w.v_proj_weight,   w.q_bias,
        w.k_bias,        w.v_bias,        w.out_proj_weight, w.out_proj_bias};
  return Status::ok_status();
}

// Appends every weight and bias view of `w`, named as the errors name them.
void append_weight_views(const MhaWeights& w, detail::NamedViews& views) {
  views.insert(views.end(), {{&w.in_proj_weight, "weights.in_proj_weight"},
                             {&w.in_proj_bias, "weights.in_proj_bias"},
                             {&w.q_proj_weight, "weights.q_proj_weight"},
                             {&w.k_proj_weight, "weights.k_proj_weight"},
                             {&w.v_proj_weight, "weights.v_proj_weight"},
                             {&w.q_bias, "weights.q_bias"},
                             {&w.k_bias, "weights.k_bias"},
                             {&w.v_bias, "weights.v_bias"},
                             {&w.out_proj_weight, "weights.out_proj_weight"},
                             {&w.out_proj_bias, "weights.out_proj_bias"}});
}

Status check_mha_args(const TensorView& x_q, const TensorView& x_kv, const MhaWeights& w,
                      const TensorView& out, const MhaOptions& o, Device device, MhaShape* shape,
                      Projections* p) {
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(x_q, "x_q", 3, "[B, Sq, E]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(x_kv, "x_kv", 3, "[B, Sk, Ekv]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(out, "out", 3, "[B, Sq, E]", device));
  MhaShape s{x_q.shape[0], x_q.shape[1], x_kv.shape[1], x_q.shape[2], x_kv.shape[2], 0, 0, 0};
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(x_kv, "x_kv", {{"B", s.B}, {"Sk", -1}, {"Ekv", -1}}));
  if (s.E == 0 || s.Ekv == 0) {
    return Status::invalid("x_q, x_kv: widths E and Ekv must be >= 1, got E=" +
                           std::to_string(s.E) + ", Ekv=" + std::to_string(s.Ekv));
  }
  if (o.num_heads < 1 || s.E % o.num_heads != 0) {
    return Status::invalid("options.num_heads: must be >= 1 and divide E=" + std::to_string(s.E) +
                           ", got " + std::to_string(o.num_heads));
  }
  s.H = o.num_heads;
  s.Hkv = o.num_kv_heads == 0 ? s.H : o.num_kv_heads;
  if (s.Hkv < 1 || s.H % s.Hkv != 0) {
    return Status::invalid("options.num_kv_heads: must divide num_heads=" + std::to_string(s.H) +
                           " (0: num_heads), got " + std::to_string(o.num_kv_heads));
  }
  s.D = s.E / s.H;
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(out, "out", {{"B", s.B}, {"Sq", s.Sq}, {"E", s.E}}));
  if (o.scale && !std::isfinite(*o.scale)) {
    return Status::invalid("options.scale: must be finite, got " + std::to_string(*o.scale));
  }
  ATTENTION_RETURN_IF_ERROR(detail::check_gpu_options(o.gpu, "options.gpu"));
  ATTENTION_RETURN_IF_ERROR(resolve_projections(w, s, device, p));
  ATTENTION_RETURN_IF_ERROR(check_matrix(w.out_proj_weight, "weights.out_proj_weight", "[E, E]",
                                         s.E, "E", s.E, "E", device));
  ATTENTION_RETURN_IF_ERROR(check_bias(w.out_proj_bias, "weights.out_proj_bias", s.E, "E", device));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_mask(o.mask, s.B, s.H, s.Sq, s.Sk, device, /*half_additive=*/true));

  detail::NamedViews inputs = {{&x_q, "x_q"}, {&x_kv, "x_kv"}};
  append_weight_views(w, inputs);
  detail::append_mask_views(o.mask, inputs);
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", inputs));
  // Per head [B, H, Sq, Sk], or averaged over heads [B, Sq, Sk].
  const TensorView& aw = o.attention_weights;
  if (detail::given(aw) && device != Device::CPU) {
    return Status::error(
        StatusCode::Unsupported,
        "options.attention_weights: the GPU kernels do not produce the attention weights; ask for "
        "them with host tensors on Backend::CPU");
  }
  inputs.insert(inputs.begin(), {&out, "out"});
  if (aw.rank == 4) {
    ATTENTION_RETURN_IF_ERROR(detail::check_optional_output(
        aw, "options.attention_weights", "[B, H, Sq, Sk]",
        {{"B", s.B}, {"H", s.H}, {"Sq", s.Sq}, {"Sk", s.Sk}}, inputs));
  } else {
    ATTENTION_RETURN_IF_ERROR(detail::check_optional_output(
        aw, "options.attention_weights", "[B, Sq, Sk] (averaged) or [B, H, Sq, Sk]",
        {{"B", s.B}, {"Sq", s.Sq}, {"Sk", s.Sk}}, inputs));
  }
  *shape = s;
  return Status::ok_status();
}

// The checks of a multi_head_attention call, then its plan (explain_mha plans exactly what the
// call runs). `options`: the call's, its mask without inert pieces once the shape is checked.
Status check_and_plan_mha(const TensorView& x_q, const TensorView& x_kv, const MhaWeights& weights,
                          const TensorView& out, MhaOptions& options, MhaShape* shape,
                          Projections* projections, detail::MhaPlan* plan) {
  const MaskOptions& m = options.mask;
  detail::Run run = detail::Run::CPU;
  // Lengths and slopes are host tensors in every call (see check_mask).
  detail::NamedViews tensors = {{&x_q, "x_q"}, {&x_kv, "x_kv"}, {&out, "out"}};
  append_weight_views(weights, tensors);
  tensors.insert(tensors.end(), {{&m.bool_mask, "mask.bool_mask"},
                                 {&m.additive_mask, "mask.additive_mask"},
                                 {&options.attention_weights, "options.attention_weights"}});
  ATTENTION_RETURN_IF_ERROR(detail::resolve_backend(options.backend, tensors, &run));
  ATTENTION_RETURN_IF_ERROR(detail::check_cuda_stream(options.gpu, "options.gpu", run));
  MhaShape& s = *shape;
  Projections& p = *projections;
  ATTENTION_RETURN_IF_ERROR(
      check_mha_args(x_q, x_kv, weights, out, options, detail::device_of(tensors), &s, &p));
  if (run != detail::Run::CPU) ATTENTION_RETURN_IF_ERROR(detail::check_gpu_strides(tensors));
  // Pieces that hide no key go: such calls run the plain kernels (a decode call's causal flag).
  if (s.B > 0 && s.Sq > 0 && s.Sk > 0) {
    options.mask = detail::without_inert_pieces(options.mask, s.B, s.Sq, s.Sk);
  }
  return detail::plan_mha(run, x_q, x_kv, p, out, s, options, plan);
}

}  // namespace

Status multi_head_attention(const TensorView& x_q, const TensorView& x_kv,
                            const MhaWeights& weights, const TensorView& out,
                            const MhaOptions& call_options) {
  MhaOptions options = call_options;
  MhaShape s{};
  Projections p;
  detail::MhaPlan plan;
  ATTENTION_RETURN_IF_ERROR(check_and_plan_mha(x_q, x_kv, weights, out, options, &s, &p, &plan));
  if (detail::log_plans()) detail::log_plan("multi_head_attention", plan.describe());
  return detail::execute_mha(plan, x_q, x_kv, p, out, s, options);
}

Status explain_mha(const TensorView& x_q, const TensorView& x_kv, const MhaWeights& weights,
                   const TensorView& out, const MhaOptions& call_options, std::string* plan) {
  if (plan == nullptr) return Status::invalid("plan: must not be null");
  MhaOptions options = call_options;
  MhaShape s{};
  Projections p;
  detail::MhaPlan planned;
  ATTENTION_RETURN_IF_ERROR(check_and_plan_mha(x_q, x_kv, weights, out, options, &s, &p, &planned));
  *plan = planned.describe();
  return Status::ok_status();
}

}  // namespace attention
