// dot_product_attention, bilinear_attention, additive_attention: the Luong and Bahdanau score
// forms on single-head [B, S, D] tensors. Projections run on the generated linear kernel; the
// attention itself on the SDPA kernels (dot, bilinear) or the additive ones.
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/sdpa_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/attention_weights.h"
#include "execute/half_precision.h"
#include "execute/linear.h"
#include "kernels/halide_view.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"

namespace attention {
namespace {

struct FormShape {
  int64_t B, Sq, Sk, Dq, Dk, Dv;
};

// q [B, Sq, Dq], k [B, Sk, Dk], v [B, Sk, Dv], out [B, Sq, Dv] and the options; `same_features`:
// Dk must equal Dq (the dot form). `weights` are inputs out and logsumexp must not overlap.
Status check_form_args(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const ScoreFormOptions& options, bool same_features,
                       const detail::NamedViews& weights, FormShape* shape) {
  ATTENTION_RETURN_IF_ERROR(
      detail::check_view(q, "q", 3, same_features ? "[B, Sq, D]" : "[B, Sq, Dq]"));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_view(k, "k", 3, same_features ? "[B, Sk, D]" : "[B, Sk, Dk]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(v, "v", 3, "[B, Sk, Dv]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(out, "out", 3, "[B, Sq, Dv]"));
  FormShape s{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], v.shape[2]};
  if (s.Dq == 0)
    return Status::invalid("q: feature dim must be >= 1, got shape " + detail::shape_string(q));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(
      k, "k", {{"B", s.B}, {"Sk", -1}, {same_features ? "D" : "Dk", same_features ? s.Dq : -1}}));
  if (s.Dk == 0)
    return Status::invalid("k: feature dim Dk must be >= 1, got shape " + detail::shape_string(k));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(v, "v", {{"B", s.B}, {"Sk", s.Sk}, {"Dv", -1}}));
  if (s.Dv == 0)
    return Status::invalid("v: feature dim Dv must be >= 1, got shape " + detail::shape_string(v));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(out, "out", {{"B", s.B}, {"Sq", s.Sq}, {"Dv", s.Dv}}));
  ATTENTION_RETURN_IF_ERROR(detail::check_mask(options.mask, s.B, 1, s.Sq, s.Sk));
  detail::NamedViews inputs = {{&q, "q"}, {&k, "k"}, {&v, "v"}};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  detail::append_mask_views(options.mask, inputs);
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", inputs));
  // Each later output must not overlap the ones before it either.
  inputs.insert(inputs.begin(), {&out, "out"});
  ATTENTION_RETURN_IF_ERROR(detail::check_optional_output(
      options.logsumexp, "options.logsumexp", "[B, Sq]", {{"B", s.B}, {"Sq", s.Sq}}, inputs));
  if (options.logsumexp.data != nullptr) {
    inputs.insert(inputs.begin(), {&options.logsumexp, "options.logsumexp"});
  }
  ATTENTION_RETURN_IF_ERROR(
      detail::check_optional_output(options.weights, "options.weights", "[B, Sq, Sk]",
                                    {{"B", s.B}, {"Sq", s.Sq}, {"Sk", s.Sk}}, inputs));
  *shape = s;
  return Status::ok_status();
}

// A weight matrix or vector of the given extents, any strides.
Status check_weight(const TensorView& w, const char* name, const char* layout,
                    const std::vector<detail::ExpectedDim>& extents) {
  ATTENTION_RETURN_IF_ERROR(detail::check_view(w, name, static_cast<int>(extents.size()), layout,
                                               DType::Float32, /*any_strides=*/true));
  return detail::check_shape(w, name, extents);
}

// Zero-size calls: true (and the outputs written) when there is nothing for a kernel to do.
bool handled_without_kernel(const FormShape& s, const TensorView& out,
                            const ScoreFormOptions& options) {
  if (s.B == 0 || s.Sq == 0) return true;
  if (s.Sk > 0) return false;
  detail::write_rows_without_keys(out, options.logsumexp);  // weights [B, Sq, 0] are empty
  return true;
}

// The weights kernel of the form after its attention call, which left `lse` [B, Sq]: q and k are
// the form's (projected) operands, w_a the additive score weights (empty for the dot form).
Status run_weights(const TensorView& q, const TensorView& k, const TensorView& v,
                   const std::vector<float>& w_a, const TensorView& lse,
                   const ScoreFormOptions& options) {
  return detail::run_attention_weights(
      detail::with_one_head(q), detail::with_one_head(k), detail::with_one_head(v), 1.0f, w_a,
      options.mask, detail::with_one_head(lse), detail::with_one_head(options.weights));
}

// Dot-product attention on validated views, planned and run as SDPA with one head and scale 1;
// then the weights if asked for.
Status run_dot_form(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const ScoreFormOptions& options) {
  detail::ScratchFloats lse_scratch;
  TensorView lse;
  ATTENTION_RETURN_IF_ERROR(
      detail::stats_or_scratch(options.logsumexp, {q.shape[0], q.shape[1]}, lse_scratch, &lse));
  SdpaOptions sdpa;
  sdpa.scale = 1.0f;
  sdpa.mask = options.mask;
  sdpa.logsumexp = detail::with_one_head(lse);
  ATTENTION_RETURN_IF_ERROR(detail::plan_and_execute_sdpa(
      "dot_product_attention", detail::Run::CPU, detail::with_one_head(q), detail::with_one_head(k),
      detail::with_one_head(v), detail::with_one_head(out), sdpa));
  if (options.weights.data == nullptr) return Status::ok_status();
  return run_weights(q, k, v, {}, lse, options);
}

}  // namespace

Status dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const ScoreFormOptions& options) {
  FormShape s{};
  ATTENTION_RETURN_IF_ERROR(check_form_args(q, k, v, out, options, true, {}, &s));
  if (handled_without_kernel(s, out, options)) return Status::ok_status();
  return run_dot_form(q, k, v, out, options);
}

Status bilinear_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& weight, const TensorView& out,
                          const ScoreFormOptions& options) {
  FormShape s{};
  ATTENTION_RETURN_IF_ERROR(
      check_form_args(q, k, v, out, options, false, {{&weight, "weight"}}, &s));
  ATTENTION_RETURN_IF_ERROR(
      check_weight(weight, "weight", "[Dq, Dk]", {{"Dq", s.Dq}, {"Dk", s.Dk}}));
  if (handled_without_kernel(s, out, options)) return Status::ok_status();
  // qᵀ·W·k = (Wᵀ·q)·k: q projected once, as a linear layer with weight Wᵀ [Dk, Dq].
  detail::Scratch projected;
  const TensorView q_w = detail::dense_output(projected, s.B, s.Sq, s.Dk);
  ATTENTION_RETURN_IF_ERROR(detail::run_linear(q, detail::transposed(weight), TensorView{}, q_w));
  return run_dot_form(q_w, k, v, out, options);
}

Status additive_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const AdditiveWeights& weights, const TensorView& out,
                          const ScoreFormOptions& options) {
  FormShape s{};
  const detail::NamedViews weight_views = {{&weights.query_weight, "weights.query_weight"},
                                           {&weights.key_weight, "weights.key_weight"},
                                           {&weights.score_weight, "weights.score_weight"},
                                           {&weights.bias, "weights.bias"}};
  ATTENTION_RETURN_IF_ERROR(check_form_args(q, k, v, out, options, false, weight_views, &s));
  ATTENTION_RETURN_IF_ERROR(check_weight(weights.query_weight, "weights.query_weight", "[A, Dq]",
                                         {{"A", -1}, {"Dq", s.Dq}}));
  const int64_t A = weights.query_weight.shape[0];
  if (A == 0) {
    return Status::invalid("weights.query_weight: attention dim A must be >= 1, got shape " +
                           detail::shape_string(weights.query_weight));
  }
  ATTENTION_RETURN_IF_ERROR(
      check_weight(weights.key_weight, "weights.key_weight", "[A, Dk]", {{"A", A}, {"Dk", s.Dk}}));
  ATTENTION_RETURN_IF_ERROR(
      check_weight(weights.score_weight, "weights.score_weight", "[A]", {{"A", A}}));
  if (detail::given(weights.bias)) {
    ATTENTION_RETURN_IF_ERROR(check_weight(weights.bias, "weights.bias", "[A]", {{"A", A}}));
  }
  if (handled_without_kernel(s, out, options)) return Status::ok_status();

  // W_q·q + bias and W_k·k, once per query and key.
  detail::Scratch q_storage, k_storage;
  const TensorView q_a = detail::dense_output(q_storage, s.B, s.Sq, A);
  const TensorView k_a = detail::dense_output(k_storage, s.B, s.Sk, A);
  ATTENTION_RETURN_IF_ERROR(detail::run_linear(q, weights.query_weight, weights.bias, q_a));
  ATTENTION_RETURN_IF_ERROR(detail::run_linear(k, weights.key_weight, TensorView{}, k_a));
  // The kernel reads w_a densely.
  std::vector<float> w_a(static_cast<size_t>(A));
  for (int64_t a = 0; a < A; ++a) {
    w_a[a] =
        static_cast<const float*>(weights.score_weight.data)[a * weights.score_weight.strides[0]];
  }

  detail::ScratchFloats lse_scratch;
  TensorView lse;
  ATTENTION_RETURN_IF_ERROR(
      detail::stats_or_scratch(options.logsumexp, {s.B, s.Sq}, lse_scratch, &lse));
  detail::MaskArgs mask(options.mask, s.B, 1, s.Sq, s.Sk);
  detail::HalideView hq(detail::with_one_head(q_a)), hk(detail::with_one_head(k_a)),
      hv(detail::with_one_head(v)), hout(detail::with_one_head(out)),
      hlse(detail::with_one_head(lse), detail::RowStats{out.shape[2]}),
      hw(TensorView::contiguous(w_a.data(), {A}));
  const float temperature = 1.0f;
  const auto& row = detail::additive_row();
  const detail::KernelChoice choice =
      detail::choose_kernel(row.prefill.name, row.decode.name, s.B, 1, s.Sq, s.Sk);
  const bool values_finite = choice.prefill && detail::all_finite(v);  // as for masked SDPA
  const auto& kernel = row[choice];
  ATTENTION_RETURN_IF_ERROR(detail::run_kernel_parts(
      kernel.name, kernel.fn, std::tuple(hq.get(), hk.get(), hv.get(), temperature),
      mask.arguments(values_finite),
      std::tuple(hw.get(), choice.key_split, hout.get(), hlse.get())));
  if (options.weights.data == nullptr) return Status::ok_status();
  return run_weights(q_a, k_a, v, w_a, lse, options);
}

}  // namespace attention
