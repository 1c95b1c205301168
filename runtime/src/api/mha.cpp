// multi_head_attention: nn.MultiheadAttention's block in one generated kernel (mha_f32, or
// mha_f32_masked for calls with masks; generators/mha_generator.cpp: projections, attention and
// output projection in one pipeline). The optional attention weights come from the weights kernel
// on Q and K projected again by the linear kernel (an inspection path: two more products).
#include <array>
#include <cfloat>
#include <cmath>
#include <deque>
#include <iterator>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/attention_weights.h"
#include "execute/gpu.h"
#include "execute/half_precision.h"
#include "execute/linear.h"
#include "kernels/halide_view.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"

namespace attention {
namespace {

struct MhaShape {
  int64_t B, Sq, Sk, E, Ekv, H, Hkv, D;
  int64_t kv_width() const { return Hkv * D; }
};

// The Q, K, V and output projections (weights and optional biases) as views into the user's
// tensors (or into fp32 copies of them).
struct Projections {
  TensorView wq, wk, wv, bq, bk, bv, wo, bo;
};

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

// The [B, H, S, D] heads of columns [first, first + H·D) of a dense [B, S, W] projection, in place.
TensorView heads(const TensorView& projection, int64_t first, int64_t H, int64_t D) {
  const int64_t B = projection.shape[0], S = projection.shape[1], W = projection.shape[2];
  return TensorView::strided(static_cast<float*>(projection.data) + first, {B, H, S, D},
                             {S * W, D, W, 1});
}

// Whether V = x_kv·W_vᵀ + b_v is certainly finite: |V| <= Ekv·max|x_kv|·max|W_v| + max|b_v|,
// with room for fp32 rounding. The masked attention's plain P·V is only safe then (a non-finite
// value at a hidden key would reach its row as 0 · Inf).
bool values_certainly_finite(const TensorView& x_kv, const Projections& p) {
  const double bound =
      static_cast<double>(x_kv.shape[2]) * detail::max_abs(x_kv) * detail::max_abs(p.wv) +
      (detail::given(p.bv) ? detail::max_abs(p.bv) : 0.0);
  return bound < 0.5 * FLT_MAX;
}

// A call without keys: every row sees no key, so its attention is zeros and out is b_o.
void write_rows_without_keys(const TensorView& out, const TensorView& out_bias) {
  if (!detail::given(out_bias)) {
    detail::fill(out, 0.0f);
    return;
  }
  const auto* bias = static_cast<const float*>(out_bias.data);
  for (int64_t b = 0; b < out.shape[0]; ++b) {
    for (int64_t i = 0; i < out.shape[1]; ++i) {
      float* row = static_cast<float*>(out.data) + b * out.strides[0] + i * out.strides[1];
      for (int64_t e = 0; e < out.shape[2]; ++e) {
        row[e * out.strides[2]] = bias[e * out_bias.strides[0]];
      }
    }
  }
}

// The attention weights per head into `weights` [B, H, Sq, Sk] from the call's logsumexp.
Status attention_weights(const TensorView& x_q, const TensorView& x_kv, const Projections& p,
                         const MhaShape& s, float scale, const MaskOptions& mask,
                         const TensorView& lse, const TensorView& weights) {
  detail::Scratch q_storage, k_storage;
  const TensorView q = detail::dense_output(q_storage, s.B, s.Sq, s.E);
  const TensorView k = detail::dense_output(k_storage, s.B, s.Sk, s.kv_width());
  ATTENTION_RETURN_IF_ERROR(detail::run_linear(x_q, p.wq, p.bq, q));
  ATTENTION_RETURN_IF_ERROR(detail::run_linear(x_kv, p.wk, p.bk, k));
  const TensorView k_heads = heads(k, 0, s.Hkv, s.D);
  // The weights kernel reads no values: k stands in for v.
  return detail::run_attention_weights(heads(q, 0, s.H, s.D), k_heads, k_heads, scale, {}, mask,
                                       lse, weights);
}

#if ATTENTION_GPU
// The whole block on the GPU (mha_f32[_masked]_{cuda,opencl}): the same arguments as the CPU
// kernel. Absent biases are zeros on the host (copied in); host biases are made dense first. The
// call runs in chunks of batches and query rows whose split results fit options.gpu
// (plan_gpu_chunks; every chunk covers all heads): x_q and out are windows of the chunk's rows
// (the masks' arguments follow them) and, like x_kv, of its batches, keeping their indices.
// Consecutive chunks of the same batches share x_kv.
Status run_mha_gpu(detail::Run run, const TensorView& x_q, const TensorView& x_kv,
                   const Projections& p, const TensorView& out, const MhaShape& s, float scale,
                   const MhaOptions& options) {
  const MaskOptions& m = options.mask;
  const detail::MhaRow& row = detail::mha_row(run);
  const auto& kernel = m.empty() ? row.plain : row.masked;
  const int32_t key_split = detail::gpu_prefill_key_split(kernel.name);
  std::vector<detail::GpuChunk> chunks;
  ATTENTION_RETURN_IF_ERROR(detail::plan_gpu_chunks(detail::kernel_gpu_tiling(kernel.name), s.B,
                                                    s.H, s.Sq, s.Sk, s.D, options.gpu,
                                                    "options.gpu", /*head_unit=*/s.H, &chunks));
  std::vector<float> bias_storage[4];
  auto bias = [&](const TensorView& b, int64_t n, int slot) {
    return b.device == Device::CUDA ? b : detail::dense_bias(b, n, bias_storage[slot]);
  };
  const TensorView bq = bias(p.bq, s.E, 0), bk = bias(p.bk, s.kv_width(), 1),
                   bv = bias(p.bv, s.kv_width(), 2), bo = bias(p.bo, s.E, 3);
  // The buffers outlive `call`, whose destructor releases their device memory (the chunks' too,
  // when a chunk fails).
  detail::HalideView hw_q(p.wq), hw_k(p.wk), hw_v(p.wv), hw_o(p.wo), hb_q(bq), hb_k(bk), hb_v(bv),
      hb_o(bo);
  std::deque<detail::HalideView> chunk_views;
  std::deque<detail::MaskArgs> chunk_masks;
  detail::GpuCall call(run, options.gpu.cuda_stream);
  const std::pair<detail::HalideView*, const TensorView*> weights_in[] = {
      {&hw_q, &p.wq}, {&hw_k, &p.wk}, {&hw_v, &p.wv}, {&hw_o, &p.wo},
      {&hb_q, &bq},   {&hb_k, &bk},   {&hb_v, &bv},   {&hb_o, &bo}};
  for (const auto& [view, tensor] : weights_in) {
    ATTENTION_RETURN_IF_ERROR(call.input(view->get(), tensor->device));
  }
  detail::HalideView* hx_kv = nullptr;
  int64_t kv_batch = -1;  // x_kv's first batch
  for (const detail::GpuChunk& c : chunks) {
    const auto batches = [&](const TensorView& t) {
      return detail::slice(t, 0, c.batch, c.batches);
    };
    const std::array<int64_t, kMaxRank> mins = {c.batch, 0, 0, 0};
    if (c.batch != kv_batch) {
      if (hx_kv != nullptr) call.release(hx_kv->get());
      kv_batch = c.batch;
      hx_kv = &chunk_views.emplace_back(batches(x_kv), mins);
      ATTENTION_RETURN_IF_ERROR(call.input(hx_kv->get(), x_kv.device));
    }
    detail::HalideView& hx_q =
        chunk_views.emplace_back(detail::slice(batches(x_q), 1, c.row, c.rows), mins);
    detail::HalideView& hout =
        chunk_views.emplace_back(detail::slice(batches(out), 1, c.row, c.rows), mins);
    detail::HalideView& hlse =
        chunk_views.emplace_back(TensorView::contiguous(nullptr, {c.batches, s.H, c.rows}), mins);
    detail::MaskArgs& mask = chunk_masks.emplace_back(m, s.B, s.H, s.Sq, s.Sk, c.row, c.rows);
    ATTENTION_RETURN_IF_ERROR(call.begin_chunk());
    ATTENTION_RETURN_IF_ERROR(call.input(hx_q.get(), x_q.device));
    ATTENTION_RETURN_IF_ERROR(call.output(hout.get(), out.device));
    ATTENTION_RETURN_IF_ERROR(call.scratch(hlse.get()));
    ATTENTION_RETURN_IF_ERROR(call.mask_inputs(mask, m));
    ATTENTION_RETURN_IF_ERROR(call.run_parts(
        kernel.name, kernel.fn,
        std::tuple(hx_q.get(), hx_kv->get(), hw_q.get(), hb_q.get(), hw_k.get(), hb_k.get(),
                   hw_v.get(), hb_v.get(), hw_o.get(), hb_o.get(), static_cast<int32_t>(s.H),
                   static_cast<int32_t>(s.Hkv), scale),
        mask.arguments(/*values_finite=*/false), std::tuple(key_split, hout.get(), hlse.get())));
  }
  return Status::ok_status();
}
#endif

// Whether a and b are the same tensor (self-attention passes x_q as x_kv).
bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

Status execute_mha(detail::Run run, const TensorView& x_q, const TensorView& x_kv,
                   const Projections& p, const TensorView& out, const MhaShape& s,
                   const MhaOptions& options);

// A call with a Float16 or BFloat16 tensor: every half input (x_q, x_kv, the projections' weights
// and biases, the additive mask) widened exactly, the fp32 block over the copies, and out rounded
// once. attention_weights is fp32. `scratch`: detail::HostFp32Scratch for host tensors (any
// backend), detail::CudaFp32Scratch for Device::CUDA ones (converted on the device).
template <typename Scratch>
Status run_mha_half(Scratch& scratch, detail::Run run, const TensorView& x_q,
                    const TensorView& x_kv, const Projections& p, const TensorView& out,
                    const MhaShape& s, const MhaOptions& options) {
  TensorView out32, x_q32, x_kv32, mask32;
  ATTENTION_RETURN_IF_ERROR(scratch.stage(out, &out32));
  ATTENTION_RETURN_IF_ERROR(scratch.widen(x_q, &x_q32));
  const bool self_attention = same_view(x_q, x_kv);
  if (self_attention) {
    x_kv32 = x_q32;
  } else {
    ATTENTION_RETURN_IF_ERROR(scratch.widen(x_kv, &x_kv32));
  }
  ATTENTION_RETURN_IF_ERROR(scratch.widen(options.mask.additive_mask, &mask32));
  Projections p32 = p;
  for (TensorView* view :
       {&p32.wq, &p32.wk, &p32.wv, &p32.bq, &p32.bk, &p32.bv, &p32.wo, &p32.bo}) {
    const TensorView given = *view;
    ATTENTION_RETURN_IF_ERROR(scratch.widen(given, view));
  }
  MhaOptions fp32_options = options;
  fp32_options.mask.additive_mask = mask32;
  ATTENTION_RETURN_IF_ERROR(execute_mha(run, x_q32, x_kv32, p32, out32, s, fp32_options));
  return scratch.finish(out32, out);
}

// Runs a checked call with rows (B, Sq >= 1; its mask without inert pieces) on `run`: half tensors
// through fp32 copies, a call without keys written here, the GPU kernel, or the CPU kernel and the
// attention weights.
Status execute_mha(detail::Run run, const TensorView& x_q, const TensorView& x_kv,
                   const Projections& p, const TensorView& out, const MhaShape& s,
                   const MhaOptions& options) {
  for (const TensorView* t : {&x_q, &x_kv, &out, &p.wq, &p.wk, &p.wv, &p.bq, &p.bk, &p.bv, &p.wo,
                              &p.bo, &options.mask.additive_mask}) {
    if (detail::is_half(t->dtype)) {
      return detail::with_fp32_scratch(x_q.device, options.gpu.cuda_stream, [&](auto& scratch) {
        return run_mha_half(scratch, run, x_q, x_kv, p, out, s, options);
      });
    }
  }
  if (s.Sk == 0) {
    if (x_q.device == Device::CUDA) {
      return Status::error(StatusCode::Unsupported,
                           "x_kv: Sk = 0 is not supported for Device::CUDA tensors yet");
    }
    write_rows_without_keys(out, p.bo);
    return Status::ok_status();
  }
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(s.D)));
#if ATTENTION_GPU
  if (run != detail::Run::CPU) return run_mha_gpu(run, x_q, x_kv, p, out, s, scale, options);
#endif

  const int64_t kv = s.kv_width();
  std::vector<float> bias_storage[4];
  std::vector<float> lse_storage(static_cast<size_t>(s.B * s.H * s.Sq));
  const TensorView lse = TensorView::contiguous(lse_storage.data(), {s.B, s.H, s.Sq});
  detail::MaskArgs mask(options.mask, s.B, s.H, s.Sq, s.Sk);
  const bool values_finite = options.mask.empty() || values_certainly_finite(x_kv, p);
  detail::HalideView hx_q(x_q), hx_kv(x_kv), hw_q(p.wq), hw_k(p.wk), hw_v(p.wv), hw_o(p.wo),
      hb_q(detail::dense_bias(p.bq, s.E, bias_storage[0])),
      hb_k(detail::dense_bias(p.bk, kv, bias_storage[1])),
      hb_v(detail::dense_bias(p.bv, kv, bias_storage[2])),
      hb_o(detail::dense_bias(p.bo, s.E, bias_storage[3])), hout(out), hlse(lse);
  // Calls without masks take the variant without masking code (same arguments, masks ignored).
  const detail::MhaRow& row = detail::mha_row(detail::Run::CPU);
  const auto call_kernel = [&](const auto& kernel) {
    return detail::run_kernel_parts(
        kernel.name, kernel.fn,
        std::tuple(hx_q.get(), hx_kv.get(), hw_q.get(), hb_q.get(), hw_k.get(), hb_k.get(),
                   hw_v.get(), hb_v.get(), hw_o.get(), hb_o.get(), static_cast<int32_t>(s.H),
                   static_cast<int32_t>(s.Hkv), scale),
        mask.arguments(values_finite),
        std::tuple(detail::prefill_key_split(kernel.name, s.Sk), hout.get(), hlse.get()));
  };
  ATTENTION_RETURN_IF_ERROR(options.mask.empty() ? call_kernel(row.plain)
                                                 : call_kernel(row.masked));
  if (!detail::given(options.attention_weights)) return Status::ok_status();

  // Per head into the caller's view, or into scratch that is then averaged over heads.
  const TensorView& requested = options.attention_weights;
  std::vector<float> per_head_storage;
  TensorView per_head = requested;
  if (requested.rank == 3) {
    per_head_storage.resize(static_cast<size_t>(s.B * s.H * s.Sq * s.Sk));
    per_head = TensorView::contiguous(per_head_storage.data(), {s.B, s.H, s.Sq, s.Sk});
  }
  ATTENTION_RETURN_IF_ERROR(attention_weights(x_q, x_kv, p, s, scale, options.mask, lse, per_head));
  if (requested.rank == 3) detail::average_heads(per_head, requested);
  return Status::ok_status();
}

}  // namespace

Status multi_head_attention(const TensorView& x_q, const TensorView& x_kv,
                            const MhaWeights& weights, const TensorView& out,
                            const MhaOptions& call_options) {
  MhaOptions options = call_options;  // its mask without inert pieces once the shape is checked
  const MaskOptions& m = options.mask;
  detail::Run run = detail::Run::CPU;
  // Lengths and slopes are host tensors in every call (see check_mask).
  const std::vector<detail::NamedView> tensors = {
      {&x_q, "x_q"},
      {&x_kv, "x_kv"},
      {&out, "out"},
      {&weights.in_proj_weight, "weights.in_proj_weight"},
      {&weights.in_proj_bias, "weights.in_proj_bias"},
      {&weights.q_proj_weight, "weights.q_proj_weight"},
      {&weights.k_proj_weight, "weights.k_proj_weight"},
      {&weights.v_proj_weight, "weights.v_proj_weight"},
      {&weights.q_bias, "weights.q_bias"},
      {&weights.k_bias, "weights.k_bias"},
      {&weights.v_bias, "weights.v_bias"},
      {&weights.out_proj_weight, "weights.out_proj_weight"},
      {&weights.out_proj_bias, "weights.out_proj_bias"},
      {&m.bool_mask, "mask.bool_mask"},
      {&m.additive_mask, "mask.additive_mask"},
      {&options.attention_weights, "options.attention_weights"}};
  ATTENTION_RETURN_IF_ERROR(detail::resolve_backend(options.backend, tensors, &run));
  ATTENTION_RETURN_IF_ERROR(detail::check_cuda_stream(options.gpu, "options.gpu", run));
  MhaShape s{};
  Projections p;
  ATTENTION_RETURN_IF_ERROR(
      check_mha_args(x_q, x_kv, weights, out, options, detail::device_of(tensors), &s, &p));
  if (run != detail::Run::CPU) ATTENTION_RETURN_IF_ERROR(detail::check_gpu_strides(tensors));
  if (s.B == 0 || s.Sq == 0) return Status::ok_status();
  // Pieces that hide no key go: such calls run the plain kernels (a decode call's causal flag).
  if (s.Sk > 0) options.mask = detail::without_inert_pieces(call_options.mask, s.B, s.Sq, s.Sk);
  return execute_mha(run, x_q, x_kv, p, out, s, options);
}

}  // namespace attention
