// multi_head_attention: nn.MultiheadAttention's block on the generated kernels. The Q, K, V and
// output projections run on the linear kernel (register-blocked matrix products), the attention on
// the SDPA kernels, which read the projections' heads in place through strides (no copy, no
// transpose): the fusion boundary sits at the projections' outputs.
#include <cmath>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention_weights.h"
#include "linear.h"
#include "mask_args.h"
#include "tensor_util.h"
#include "validate.h"

namespace attention {
namespace {

struct MhaShape {
  int64_t B, Sq, Sk, E, Ekv, H, Hkv, D;
  int64_t kv_width() const { return Hkv * D; }
};

// The Q, K, V projections (weights and optional biases) as views into the user's tensors.
struct Projections {
  TensorView wq, wk, wv, bq, bk, bv;
};

// Rows [begin, begin + count) of a validated rank-1 or rank-2 view.
TensorView rows(const TensorView& t, int64_t begin, int64_t count) {
  TensorView view = t;
  view.data = static_cast<float*>(t.data) + begin * t.strides[0];
  view.shape[0] = count;
  return view;
}

Status check_matrix(const TensorView& w, const char* name, const char* layout, int64_t rows_,
                    const char* rows_name, int64_t cols, const char* cols_name) {
  ATTENTION_RETURN_IF_ERROR(
      detail::check_view(w, name, 2, layout, DType::Float32, /*any_strides=*/true));
  return detail::check_shape(w, name, {{rows_name, rows_}, {cols_name, cols}});
}

Status check_bias(const TensorView& b, const char* name, int64_t n, const char* n_name) {
  if (!detail::given(b)) return Status::ok_status();
  ATTENTION_RETURN_IF_ERROR(
      detail::check_view(b, name, 1, "[N]", DType::Float32, /*any_strides=*/true));
  return detail::check_shape(b, name, {{n_name, n}});
}

// The packed or separate projection weights, checked against the shape.
Status resolve_projections(const MhaWeights& w, const MhaShape& s, Projections* p) {
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
                                           "E"));
    ATTENTION_RETURN_IF_ERROR(
        check_bias(w.in_proj_bias, "weights.in_proj_bias", s.E + 2 * kv, "E + 2·Hkv·D"));
    p->wq = rows(w.in_proj_weight, 0, s.E);
    p->wk = rows(w.in_proj_weight, s.E, kv);
    p->wv = rows(w.in_proj_weight, s.E + kv, kv);
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
      check_matrix(w.q_proj_weight, "weights.q_proj_weight", "[E, E]", s.E, "E", s.E, "E"));
  ATTENTION_RETURN_IF_ERROR(check_matrix(w.k_proj_weight, "weights.k_proj_weight", "[Hkv·D, Ekv]",
                                         kv, "Hkv·D", s.Ekv, "Ekv"));
  ATTENTION_RETURN_IF_ERROR(check_matrix(w.v_proj_weight, "weights.v_proj_weight", "[Hkv·D, Ekv]",
                                         kv, "Hkv·D", s.Ekv, "Ekv"));
  ATTENTION_RETURN_IF_ERROR(check_bias(w.q_bias, "weights.q_bias", s.E, "E"));
  ATTENTION_RETURN_IF_ERROR(check_bias(w.k_bias, "weights.k_bias", kv, "Hkv·D"));
  ATTENTION_RETURN_IF_ERROR(check_bias(w.v_bias, "weights.v_bias", kv, "Hkv·D"));
  *p = {w.q_proj_weight, w.k_proj_weight, w.v_proj_weight, w.q_bias, w.k_bias, w.v_bias};
  return Status::ok_status();
}

Status check_mha_args(const TensorView& x_q, const TensorView& x_kv, const MhaWeights& w,
                      const TensorView& out, const MhaOptions& o, MhaShape* shape, Projections* p) {
  ATTENTION_RETURN_IF_ERROR(detail::check_view(x_q, "x_q", 3, "[B, Sq, E]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(x_kv, "x_kv", 3, "[B, Sk, Ekv]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(out, "out", 3, "[B, Sq, E]"));
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
  ATTENTION_RETURN_IF_ERROR(resolve_projections(w, s, p));
  ATTENTION_RETURN_IF_ERROR(
      check_matrix(w.out_proj_weight, "weights.out_proj_weight", "[E, E]", s.E, "E", s.E, "E"));
  ATTENTION_RETURN_IF_ERROR(check_bias(w.out_proj_bias, "weights.out_proj_bias", s.E, "E"));
  ATTENTION_RETURN_IF_ERROR(detail::check_mask(o.mask, s.B, s.H, s.Sq, s.Sk));

  std::vector<detail::NamedView> inputs = {{&x_q, "x_q"},
                                           {&x_kv, "x_kv"},
                                           {&w.in_proj_weight, "weights.in_proj_weight"},
                                           {&w.in_proj_bias, "weights.in_proj_bias"},
                                           {&w.q_proj_weight, "weights.q_proj_weight"},
                                           {&w.k_proj_weight, "weights.k_proj_weight"},
                                           {&w.v_proj_weight, "weights.v_proj_weight"},
                                           {&w.q_bias, "weights.q_bias"},
                                           {&w.k_bias, "weights.k_bias"},
                                           {&w.v_bias, "weights.v_bias"},
                                           {&w.out_proj_weight, "weights.out_proj_weight"},
                                           {&w.out_proj_bias, "weights.out_proj_bias"}};
  detail::append_mask_views(o.mask, inputs);
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", inputs));
  // Per head [B, H, Sq, Sk], or averaged over heads [B, Sq, Sk].
  const TensorView& aw = o.attention_weights;
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

// The [B, H, S, D] heads of columns [first, first + H·D) of a dense [B, S, W] projection, in place.
TensorView heads(const TensorView& projection, int64_t first, int64_t H, int64_t D) {
  const int64_t B = projection.shape[0], S = projection.shape[1], W = projection.shape[2];
  return TensorView::strided(static_cast<float*>(projection.data) + first, {B, H, S, D},
                             {S * W, D, W, 1});
}

bool same_view(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.rank == b.rank && a.shape == b.shape && a.strides == b.strides;
}

}  // namespace

Status multi_head_attention(const TensorView& x_q, const TensorView& x_kv,
                            const MhaWeights& weights, const TensorView& out,
                            const MhaOptions& options) {
  MhaShape s{};
  Projections p;
  ATTENTION_RETURN_IF_ERROR(check_mha_args(x_q, x_kv, weights, out, options, &s, &p));
  if (s.B == 0 || s.Sq == 0) return Status::ok_status();

  // Self-attention with packed weights: one product for Q, K and V together ([B, S, E + 2·Hkv·D],
  // x read once); otherwise one per projection.
  const int64_t kv = s.kv_width();
  detail::Scratch qkv_storage, k_storage, v_storage, concat_storage;
  TensorView q_heads, k_heads, v_heads;
  if (detail::given(weights.in_proj_weight) && same_view(x_q, x_kv)) {
    const TensorView qkv = detail::dense_output(qkv_storage, s.B, s.Sq, s.E + 2 * kv);
    ATTENTION_RETURN_IF_ERROR(
        detail::run_linear(x_q, weights.in_proj_weight, weights.in_proj_bias, qkv));
    q_heads = heads(qkv, 0, s.H, s.D);
    k_heads = heads(qkv, s.E, s.Hkv, s.D);
    v_heads = heads(qkv, s.E + kv, s.Hkv, s.D);
  } else {
    const TensorView q = detail::dense_output(qkv_storage, s.B, s.Sq, s.E);
    const TensorView k = detail::dense_output(k_storage, s.B, s.Sk, kv);
    const TensorView v = detail::dense_output(v_storage, s.B, s.Sk, kv);
    ATTENTION_RETURN_IF_ERROR(detail::run_linear(x_q, p.wq, p.bq, q));
    if (s.Sk > 0) {
      ATTENTION_RETURN_IF_ERROR(detail::run_linear(x_kv, p.wk, p.bk, k));
      ATTENTION_RETURN_IF_ERROR(detail::run_linear(x_kv, p.wv, p.bv, v));
    }
    q_heads = heads(q, 0, s.H, s.D);
    k_heads = heads(k, 0, s.Hkv, s.D);
    v_heads = heads(v, 0, s.Hkv, s.D);
  }
  const TensorView concat = detail::dense_output(concat_storage, s.B, s.Sq, s.E);

  const bool want_weights = options.attention_weights.data != nullptr;
  std::vector<float> lse_storage;
  SdpaOptions sdpa;
  sdpa.scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(s.D)));
  sdpa.mask = options.mask;
  if (want_weights) {
    lse_storage.resize(static_cast<size_t>(s.B * s.H * s.Sq));
    sdpa.logsumexp = TensorView::contiguous(lse_storage.data(), {s.B, s.H, s.Sq});
  }
  ATTENTION_RETURN_IF_ERROR(
      scaled_dot_product_attention(q_heads, k_heads, v_heads, heads(concat, 0, s.H, s.D), sdpa));
  ATTENTION_RETURN_IF_ERROR(
      detail::run_linear(concat, weights.out_proj_weight, weights.out_proj_bias, out));
  if (!want_weights || s.Sk == 0) return Status::ok_status();

  // Per head into the caller's view, or into scratch that is then averaged over heads.
  const TensorView& requested = options.attention_weights;
  std::vector<float> per_head_storage;
  TensorView per_head = requested;
  if (requested.rank == 3) {
    per_head_storage.resize(static_cast<size_t>(s.B * s.H * s.Sq * s.Sk));
    per_head = TensorView::contiguous(per_head_storage.data(), {s.B, s.H, s.Sq, s.Sk});
  }
  ATTENTION_RETURN_IF_ERROR(detail::run_attention_weights(
      q_heads, k_heads, v_heads, *sdpa.scale, {}, options.mask, sdpa.logsumexp, per_head));
  if (requested.rank == 3) detail::average_heads(per_head, requested);
  return Status::ok_status();
}

}  // namespace attention
