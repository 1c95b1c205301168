// execute_mha (plan/mha_plan.h): the whole block as one generated kernel (mha_f32, or
// mha_f32_masked for calls with masks; generators/mha_generator.cpp: projections, attention and
// output projection in one pipeline), on the CPU or a GPU, with half tensors through fp32 copies.
// The optional attention weights come from the weights kernel on Q and K projected again by the
// linear kernel (an inspection path: two more products).
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
#include "plan/mha_plan.h"

namespace attention {
namespace {

using detail::MhaShape;
using detail::Projections;

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
void write_bias_rows(const TensorView& out, const TensorView& out_bias) {
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
Status run_mha_gpu(const detail::MhaPlan& plan, const TensorView& x_q, const TensorView& x_kv,
                   const Projections& p, const TensorView& out, const MhaShape& s, float scale,
                   const MhaOptions& options) {
  const detail::Run run = plan.run;
  const MaskOptions& m = options.mask;
  const detail::MhaRow& row = detail::mha_row(run);
  const auto& kernel = plan.masked ? row.masked : row.plain;
  const int32_t key_split = detail::gpu_prefill_key_split(kernel.name);
  const std::vector<detail::GpuChunk>& chunks = plan.chunks;
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

// A call with a Float16 or BFloat16 tensor: every half input (x_q, x_kv, the projections' weights
// and biases, the additive mask) widened exactly, the fp32 block over the copies, and out rounded
// once. attention_weights is fp32. `scratch`: detail::HostFp32Scratch for host tensors (any
// backend), detail::CudaFp32Scratch for Device::CUDA ones (converted on the device).
template <typename Scratch>
Status run_mha_half(Scratch& scratch, const detail::MhaPlan& plan, const TensorView& x_q,
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
  ATTENTION_RETURN_IF_ERROR(
      detail::execute_mha(*plan.then, x_q32, x_kv32, p32, out32, s, fp32_options));
  return scratch.finish(out32, out);
}

// The CPU kernel the plan names, then the attention weights where it asks for them.
Status run_mha_cpu(const detail::MhaPlan& plan, const TensorView& x_q, const TensorView& x_kv,
                   const Projections& p, const TensorView& out, const MhaShape& s, float scale,
                   const MhaOptions& options) {
  const int64_t kv = s.kv_width();
  std::vector<float> bias_storage[4];
  detail::ScratchFloats lse_storage;
  TensorView lse;
  ATTENTION_RETURN_IF_ERROR(detail::allocate_fp32({s.B, s.H, s.Sq}, lse_storage, &lse));
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
  ATTENTION_RETURN_IF_ERROR(plan.masked ? call_kernel(row.masked) : call_kernel(row.plain));
  if (!plan.weights) return Status::ok_status();

  // Per head into the caller's view, or into scratch that is then averaged over heads.
  const TensorView& requested = options.attention_weights;
  detail::ScratchFloats per_head_storage;
  TensorView per_head = requested;
  if (requested.rank == 3) {
    ATTENTION_RETURN_IF_ERROR(
        detail::allocate_fp32({s.B, s.H, s.Sq, s.Sk}, per_head_storage, &per_head));
  }
  ATTENTION_RETURN_IF_ERROR(attention_weights(x_q, x_kv, p, s, scale, options.mask, lse, per_head));
  if (requested.rank == 3) detail::average_heads(per_head, requested);
  return Status::ok_status();
}

}  // namespace

namespace detail {

Status execute_mha(const MhaPlan& plan, const TensorView& x_q, const TensorView& x_kv,
                   const Projections& p, const TensorView& out, const MhaShape& s,
                   const MhaOptions& options) {
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(s.D)));
  switch (plan.route) {
    case MhaRoute::Nothing:
      return Status::ok_status();
    case MhaRoute::Widened:
      return with_fp32_scratch(x_q.device, options.gpu.cuda_stream, [&](auto& scratch) {
        return run_mha_half(scratch, plan, x_q, x_kv, p, out, s, options);
      });
    case MhaRoute::NoKeys:
      write_bias_rows(out, p.bo);
      return Status::ok_status();
    case MhaRoute::Gpu:
#if ATTENTION_GPU
      return run_mha_gpu(plan, x_q, x_kv, p, out, s, scale, options);
#else
      // resolve_backend refuses GPU backends first; this is its guard.
      return Status::error(StatusCode::BackendUnavailable,
                           "internal: no GPU kernels in this build");
#endif
    case MhaRoute::Kernel:
      break;
  }
  return run_mha_cpu(plan, x_q, x_kv, p, out, s, scale, options);
}

}  // namespace detail

}  // namespace attention
