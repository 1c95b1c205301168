// execute_sdpa: runs an SdpaPlan's route (plan/sdpa_plan.h) on the CPU or a GPU, and the routes'
// parts on the operands they make (rotated or widened copies). Decides nothing.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/rope_args.h"
#include "call/sdpa_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/amx_prefill.h"
#include "execute/gpu.h"
#include "execute/half_precision.h"
#include "kernels/halide_view.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"
#include "plan/sdpa_plan.h"

namespace attention {
namespace {

#if ATTENTION_GPU
// A GPU call (Sk >= 1). `lse` may be absent: the kernel then writes device scratch. The masked
// kernels always take the NaN-safe P·V (values_finite = false): the GPU schedule has one form.
// The call runs in chunks whose split results fit options.gpu.workspace_limit (plan_gpu_chunks):
// each chunk's q, out and logsumexp are windows of its rows (the masks' arguments follow them)
// and of its batches and heads, k and v of the same batches and kv heads, all keeping their
// batch and head indices (so the per-batch and per-head mask pieces are read whole). Consecutive
// chunks of the same batches and heads share k and v. `half_kv`: a decode row over a half KV cache
// (detail::gpu_half_kv_decode) for k and v of that type, whose kernels read them as raw bits.
// GQA decode runs with each group's heads as rows of its kv head where the mask allows
// (detail::gqa_rows).
Status run_gpu(detail::Run run, const TensorView& call_q, const TensorView& k, const TensorView& v,
               const TensorView& call_out, const TensorView& call_lse, float scale,
               const SdpaOptions& options, const detail::HalfKvDecodeRow* half_kv = nullptr) {
  const int64_t call_rows = call_q.shape[2];  // picks the kernel: decode stays decode
  detail::GqaRows grouped;
  const bool as_rows = k.shape[1] > 0 && detail::gqa_rows(call_q, call_out, call_lse, options.mask,
                                                          call_q.shape[1] / k.shape[1], &grouped);
  const TensorView &q = as_rows ? grouped.q : call_q, &out = as_rows ? grouped.out : call_out,
                   &lse = as_rows ? grouped.lse : call_lse;
  const MaskOptions& m = as_rows ? grouped.mask : options.mask;
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], Sk = k.shape[2];
  const int64_t group = H / k.shape[1];  // query heads per kv head (1 as rows)
  // The buffers outlive `call`, whose destructor releases their device memory (the chunks' too,
  // when a chunk fails).
  std::deque<detail::HalideView> chunk_views;
  std::deque<detail::MaskArgs> chunk_masks;
  detail::GpuCall call(run, options.gpu.cuda_stream);
  const bool lse_given = detail::given(lse);
  // `masked`: std::true_type for the masked kernels (their arguments differ).
  const auto run_chunks = [&](const auto& pair, auto masked) -> Status {
    const detail::KernelChoice choice =
        detail::choose_gpu_kernel(pair.prefill.name, pair.decode.name, call_rows);
    const auto& kernel = pair[choice];
    std::vector<detail::GpuChunk> chunks;
    ATTENTION_RETURN_IF_ERROR(detail::plan_gpu_chunks(detail::kernel_gpu_tiling(kernel.name), B, H,
                                                      Sq, Sk, v.shape[3], options.gpu, "gpu", group,
                                                      &chunks));
    detail::HalideView *hk = nullptr, *hv = nullptr;
    const detail::GpuChunk* kv_chunk = nullptr;  // the first chunk of k and v's batches and heads
    for (const detail::GpuChunk& c : chunks) {
      if (!kv_chunk || c.batch != kv_chunk->batch || c.head != kv_chunk->head) {
        kv_chunk = &c;
        if (hk != nullptr) {
          call.release(hk->get());
          call.release(hv->get());
        }
        const std::array<int64_t, kMaxRank> kv_mins = {c.batch, c.head / group, 0, 0};
        const auto kv_window = [&](const TensorView& t) {
          return detail::slice(detail::slice(t, 0, c.batch, c.batches), 1, c.head / group,
                               c.heads / group);
        };
        hk = &chunk_views.emplace_back(kv_window(k), kv_mins);
        hv = &chunk_views.emplace_back(kv_window(v), kv_mins);
        if (half_kv != nullptr) {
          detail::as_half_bits(hk->get());
          detail::as_half_bits(hv->get());
        }
        ATTENTION_RETURN_IF_ERROR(call.input(hk->get(), k.device));
        ATTENTION_RETURN_IF_ERROR(call.input(hv->get(), v.device));
      }
      const auto window = [&](const TensorView& t) {
        const TensorView batches = detail::slice(t, 0, c.batch, c.batches);
        return detail::slice(detail::slice(batches, 1, c.head, c.heads), 2, c.row, c.rows);
      };
      const std::array<int64_t, kMaxRank> mins = {c.batch, c.head, 0, 0};
      detail::HalideView& hq = chunk_views.emplace_back(window(q), mins);
      detail::HalideView& hout = chunk_views.emplace_back(window(out), mins);
      // Without a logsumexp, the kernel writes the chunk's to device scratch.
      detail::HalideView& hlse = chunk_views.emplace_back(
          lse_given ? window(lse) : TensorView::contiguous(nullptr, {c.batches, c.heads, c.rows}),
          mins);
      ATTENTION_RETURN_IF_ERROR(call.begin_chunk());
      ATTENTION_RETURN_IF_ERROR(call.input(hq.get(), q.device));
      ATTENTION_RETURN_IF_ERROR(call.output(hout.get(), out.device));
      ATTENTION_RETURN_IF_ERROR(lse_given ? call.output(hlse.get(), lse.device)
                                          : call.scratch(hlse.get()));
      const auto inputs = std::tuple(hq.get(), hk->get(), hv->get(), scale);
      const auto outputs = std::tuple(choice.key_split, hout.get(), hlse.get());
      if constexpr (decltype(masked)::value) {
        detail::MaskArgs& mask = chunk_masks.emplace_back(m, B, H, Sq, Sk, c.row, c.rows);
        ATTENTION_RETURN_IF_ERROR(call.mask_inputs(mask, m));
        ATTENTION_RETURN_IF_ERROR(call.run_parts(kernel.name, kernel.fn, inputs,
                                                 mask.arguments(/*values_finite=*/false), outputs));
      } else {
        ATTENTION_RETURN_IF_ERROR(call.run_parts(kernel.name, kernel.fn, inputs, outputs));
      }
    }
    return Status::ok_status();
  };
  detail::SdpaRow row = detail::sdpa_row(run);
  if (half_kv != nullptr) {  // the decode side only: the caller checked that the call takes it
    row.plain.decode = half_kv->plain;
    row.masked.decode = half_kv->masked;
  }
  return m.empty() ? run_chunks(row.plain, std::false_type{})
                   : run_chunks(row.masked, std::true_type{});
}
#else
Status run_gpu(detail::Run, const TensorView&, const TensorView&, const TensorView&,
               const TensorView&, const TensorView&, float, const SdpaOptions&,
               const detail::HalfKvDecodeRow* = nullptr) {
  // resolve_backend refuses GPU backends first; this is its guard.
  return Status::error(StatusCode::BackendUnavailable, "internal: no GPU kernels in this build");
}
#endif

// The CPU masked kernel the plan picked (`kernel`, `choice`).
Status run_masked(const detail::KernelSlot<decltype(&sdpa_f32_masked_prefill)>& kernel,
                  const attention_contract::KernelChoice& choice, const TensorView& call_q,
                  const TensorView& k, const TensorView& v, const TensorView& call_out,
                  const TensorView& call_lse, float scale, const MaskOptions& call_mask) {
  const auto run = [&](const TensorView& q, const TensorView& out, const TensorView& lse,
                       const MaskOptions& m) {
    detail::MaskArgs mask(m, q.shape[0], q.shape[1], q.shape[2], k.shape[2]);
    detail::HalideView hq(q), hk(k), hv(v), hout(out), hlse(lse, detail::RowStats{out.shape[3]});
    // A non-finite v at a hidden key would reach rows through 0 · NaN; prefill's plain P·V is
    // only safe without them (decode always takes the safe form and ignores the flag).
    const bool values_finite = choice.prefill && detail::all_finite(v);
    return detail::run_kernel_parts(
        kernel.name, kernel.fn, std::tuple(hq.get(), hk.get(), hv.get(), scale),
        mask.arguments(values_finite), std::tuple(choice.key_split, hout.get(), hlse.get()));
  };
  return detail::run_cpu_decode(!choice.prefill, call_q, k.shape[1], call_out, call_lse, call_mask,
                                run);
}

// The masked prefill with the rotation fused in (detail::rope_prefill_kernel): fp32 CPU tensors.
Status run_fused_rope(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const TensorView& lse, float scale,
                      const MaskOptions& m, detail::RopeArgs& rope) {
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], Sk = k.shape[2];
  detail::MaskArgs mask(m, B, H, Sq, Sk);
  detail::HalideView hq(q), hk(k), hv(v), hout(out), hlse(lse, detail::RowStats{out.shape[3]}),
      hoffsets(TensorView::contiguous(rope.offsets.data(), DType::Int32, {B})),
      hfreq(TensorView::contiguous(rope.inv_freq.data(), {rope.rotary_dim / 2}));
  const auto& kernel = detail::rope_prefill_kernel();
  return detail::run_kernel_parts(
      kernel.name, kernel.fn, std::tuple(hq.get(), hk.get(), hv.get(), scale),
      mask.arguments(detail::all_finite(v)),
      std::tuple(hoffsets.get(), hfreq.get(), static_cast<int32_t>(rope.rotary_dim),
                 rope.interleaved),
      std::tuple(detail::prefill_key_split(kernel.name, Sk), hout.get(), hlse.get()));
}

// A call with SdpaOptions::rope (Sk >= 1), as its plan says: fused into the prefill kernel, or q
// and k rotated into fp32 scratch (the queries at the last Sq positions) and the rest of the plan
// run on them: Device::CUDA tensors on the GPU into device scratch, host tensors on the CPU (the
// OpenCL kernel needs fp64, which not every OpenCL device has).
Status run_rope(const detail::SdpaPlan& plan, const TensorView& q, const TensorView& k,
                const TensorView& v, const TensorView& out) {
  const SdpaOptions& options = plan.options;
  detail::RopeArgs rope;
  ATTENTION_RETURN_IF_ERROR(detail::check_call_rope(*options.rope, q, k, &rope));
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], Sk = k.shape[2];
  if (plan.rope_fused) {
    const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(D)));
    detail::ScratchFloats lse_scratch;
    TensorView lse;
    ATTENTION_RETURN_IF_ERROR(
        detail::stats_or_scratch(options.logsumexp, {B, H, Sq}, lse_scratch, &lse));
    return run_fused_rope(q, k, v, out, lse, scale, options.mask, rope);
  }
  detail::RopeArgs query_rope = rope;
  for (int32_t& p : query_rope.offsets) p += static_cast<int32_t>(Sk - Sq);
  void* const stream = options.gpu.cuda_stream;
  const detail::Run rotate_on = q.device == Device::CUDA ? detail::Run::CUDA : detail::Run::CPU;
  const auto attend_rotated = [&](const TensorView& q_rot, const TensorView& k_rot) -> Status {
    ATTENTION_RETURN_IF_ERROR(detail::rotate(rotate_on, k, k_rot, rope, stream));
    ATTENTION_RETURN_IF_ERROR(detail::rotate(rotate_on, q, q_rot, query_rope, stream));
    return detail::execute_sdpa(*plan.then, q_rot, k_rot, v, out);
  };
#if ATTENTION_GPU
  if (q.device == Device::CUDA) {
    detail::CudaFp32Scratch scratch(stream);
    TensorView q_rot, k_rot;
    ATTENTION_RETURN_IF_ERROR(scratch.allocate(q, &q_rot));
    ATTENTION_RETURN_IF_ERROR(scratch.allocate(k, &k_rot));
    return attend_rotated(q_rot, k_rot);
  }
#endif
  std::vector<float> q_data(static_cast<size_t>(q.numel())), k_data(static_cast<size_t>(k.numel()));
  return attend_rotated(TensorView::contiguous(q_data.data(), {B, H, Sq, D}),
                        TensorView::contiguous(k_data.data(), {B, Hkv, Sk, D}));
}

// The native half-KV decode kernels: q and out fp32 (the caller's conversions), k and v read as
// stored. The additive mask, if any, is fp32.
Status run_half_kv_decode(const detail::HalfKvDecodeRow& row, const detail::KernelChoice& choice,
                          const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const TensorView& lse, float scale,
                          const MaskOptions& call_mask) {
  const auto run = [&](const TensorView& rows_q, const TensorView& rows_out,
                       const TensorView& rows_lse, const MaskOptions& m) {
    detail::HalideView hq(rows_q), hk(k), hv(v), hout(rows_out),
        hlse(rows_lse, detail::RowStats{rows_out.shape[3]});
    const auto inputs = std::tuple(hq.get(), hk.get(), hv.get(), scale);
    const auto outputs = std::tuple(choice.key_split, hout.get(), hlse.get());
    if (m.empty()) {
      return detail::run_kernel_parts(row.plain.name, row.plain.fn, inputs, std::tuple(), outputs);
    }
    detail::MaskArgs mask(m, rows_q.shape[0], rows_q.shape[1], rows_q.shape[2], k.shape[2]);
    // Decode always takes the NaN-safe P·V and ignores the flag.
    return detail::run_kernel_parts(row.masked.name, row.masked.fn, inputs,
                                    mask.arguments(/*values_finite=*/false), outputs);
  };
  return detail::run_cpu_decode(true, q, k.shape[1], out, lse, call_mask, run);
}

// The native bf16 prefill: q, k and v read as stored, out rounded once.
// `kernel` (detail::bf16_prefill_for), or null for AMX (detail::amx_prefill_takes, with its causal
// offset). Rows must be contiguous (Halide's inputs take dense rows).
Status run_bf16_prefill(const detail::KernelSlot<decltype(&sdpa_f32_prefill)>* kernel,
                        int64_t causal_offset, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const SdpaOptions& options) {
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(D)));
  detail::ScratchFloats lse_scratch;
  TensorView lse;
  ATTENTION_RETURN_IF_ERROR(
      detail::stats_or_scratch(options.logsumexp, {B, H, Sq}, lse_scratch, &lse));
  // The AMX kernel rounds out itself; the vdpbf16ps kernel writes fp32 that finish() rounds.
  if (kernel == nullptr) return detail::run_amx_prefill(q, k, v, out, lse, scale, causal_offset);
  detail::Fp32Output result;
  ATTENTION_RETURN_IF_ERROR(result.stage(out));
  detail::HalideView hq(q), hk(k), hv(v), hout(result.view()),
      hlse(lse, detail::RowStats{out.shape[3]});
  ATTENTION_RETURN_IF_ERROR(detail::run_kernel(
      kernel->name, kernel->fn, hq.get(), hk.get(), hv.get(), scale,
      detail::prefill_key_split(kernel->name, k.shape[2]), hout.get(), hlse.get()));
  return result.finish();
}

// A GPU call with a half operand: q, out and the additive mask as fp32 (`operands`:
// detail::HostFp32Scratch for host tensors, detail::CudaFp32Scratch for Device::CUDA ones); decode
// over a half KV cache reads k and v as stored (plan.half_kv), any other call widens them too and
// runs the rest of the plan, the fp32 GPU call. out is rounded once.
template <typename Operands>
Status run_half_gpu(Operands& operands, const detail::SdpaPlan& plan, const TensorView& q,
                    const TensorView& k, const TensorView& v, const TensorView& out) {
  const SdpaOptions& options = plan.options;
  TensorView q32, out32, mask32;
  ATTENTION_RETURN_IF_ERROR(operands.stage(out, &out32));
  ATTENTION_RETURN_IF_ERROR(operands.widen(q, &q32));
  ATTENTION_RETURN_IF_ERROR(operands.widen(options.mask.additive_mask, &mask32));
  if (plan.half_kv != nullptr) {
    SdpaOptions fp32_options = options;
    fp32_options.mask.additive_mask = mask32;
    const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(q.shape[3])));
    ATTENTION_RETURN_IF_ERROR(
        run_gpu(plan.run, q32, k, v, out32, options.logsumexp, scale, fp32_options, plan.half_kv));
  } else {
    TensorView k32, v32;
    ATTENTION_RETURN_IF_ERROR(operands.widen(k, &k32));
    ATTENTION_RETURN_IF_ERROR(operands.widen(v, &v32));
    ATTENTION_RETURN_IF_ERROR(detail::execute_sdpa(*plan.then, q32, k32, v32, out32, &mask32));
  }
  return operands.finish(out32, out);
}

// A call with a Float16 or BFloat16 operand (q, k, v, out or the additive mask), as its plan's
// half route says: unmasked bf16 prefill natively where the CPU has AVX-512 BF16 (on AMX, lone
// causal masks too); decode over a half KV cache reading k and v as stored (the call's bytes are
// the cache's); every other call widens its half operands exactly, runs the fp32 path, and rounds
// the result into out once.
Status run_half(const detail::SdpaPlan& plan, const TensorView& q, const TensorView& k,
                const TensorView& v, const TensorView& out) {
  const SdpaOptions& options = plan.options;
  if (plan.half == detail::HalfRoute::Gpu) {
    return detail::with_fp32_scratch(q.device, options.gpu.cuda_stream, [&](auto& operands) {
      return run_half_gpu(operands, plan, q, k, v, out);
    });
  }
  if (plan.half == detail::HalfRoute::AmxPrefill) {
    return run_bf16_prefill(nullptr, plan.amx_causal_offset, q, k, v, out, options);
  }
  if (plan.half == detail::HalfRoute::Bf16Prefill) {
    return run_bf16_prefill(plan.plain, 0, q, k, v, out, options);
  }
  detail::Fp32Output result;
  detail::Fp32Input wq, wmask;
  ATTENTION_RETURN_IF_ERROR(result.stage(out));
  ATTENTION_RETURN_IF_ERROR(wq.widen(q));
  ATTENTION_RETURN_IF_ERROR(wmask.widen(options.mask.additive_mask));
  SdpaOptions fp32_options = options;
  fp32_options.mask.additive_mask = wmask.view();
  const MaskOptions& m = fp32_options.mask;
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2];
  if (plan.half == detail::HalfRoute::HalfKvDecode) {
    const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(q.shape[3])));
    detail::ScratchFloats lse_scratch;
    TensorView lse;
    ATTENTION_RETURN_IF_ERROR(
        detail::stats_or_scratch(options.logsumexp, {B, H, Sq}, lse_scratch, &lse));
    ATTENTION_RETURN_IF_ERROR(run_half_kv_decode(*plan.half_kv, plan.choice, wq.view(), k, v,
                                                 result.view(), lse, scale, m));
    return result.finish();
  }
  detail::Fp32Input wk, wv;
  ATTENTION_RETURN_IF_ERROR(wk.widen(k));
  ATTENTION_RETURN_IF_ERROR(wv.widen(v));
  ATTENTION_RETURN_IF_ERROR(detail::execute_sdpa(*plan.then, wq.view(), wk.view(), wv.view(),
                                                 result.view(), &wmask.view()));
  return result.finish();
}

}  // namespace

namespace detail {

Status execute_sdpa(const SdpaPlan& plan, const TensorView& q, const TensorView& call_k,
                    const TensorView& call_v, const TensorView& out,
                    const TensorView* additive_mask) {
  // A plan's options, the additive mask replaced by the copy a parent route widened.
  SdpaOptions widened_options;
  if (additive_mask != nullptr) {
    if (plan.route == SdpaRoute::Rope || plan.route == SdpaRoute::Half) {
      return Status::error(StatusCode::Unsupported,
                           "internal: a widened call planned as rope or half");
    }
    widened_options = plan.options;
    widened_options.mask.additive_mask = *additive_mask;
  }
  const SdpaOptions& options = additive_mask != nullptr ? widened_options : plan.options;
  const int64_t Sk = plan.key_end - plan.key_begin;
  const TensorView k = slice(call_k, 2, plan.key_begin, Sk);
  const TensorView v = slice(call_v, 2, plan.key_begin, Sk);
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(D)));
  switch (plan.route) {
    case SdpaRoute::Nothing:
      return Status::ok_status();
    case SdpaRoute::Rope:
      return run_rope(plan, q, k, v, out);
    case SdpaRoute::DecodeAsPaged:
      return run_decode_as_paged(q, k, v, out, options, plan.pool);
    case SdpaRoute::GroupedRows:
      return run_grouped_query_rows(q, k, v, out, options, plan.grouped);
    case SdpaRoute::Half:
      return run_half(plan, q, k, v, out);
    case SdpaRoute::NoKeys:  // every row is fully masked (CUDA tensors refused by the checks)
      write_rows_without_keys(out, options.logsumexp);
      return Status::ok_status();
    case SdpaRoute::Gpu:
      return run_gpu(plan.run, q, k, v, out, options.logsumexp, scale, options);
    case SdpaRoute::Masked:
    case SdpaRoute::Plain:
      break;
  }
  detail::ScratchFloats lse_scratch;
  TensorView lse;
  ATTENTION_RETURN_IF_ERROR(
      detail::stats_or_scratch(options.logsumexp, {B, H, Sq}, lse_scratch, &lse));
  if (plan.route == SdpaRoute::Masked) {
    return run_masked(*plan.masked, plan.choice, q, k, v, out, lse, scale, options.mask);
  }
  const auto run_plain = [&, split = plan.choice.key_split](
                             const TensorView& rows_q, const TensorView& rows_out,
                             const TensorView& rows_lse, const MaskOptions&) {
    HalideView hq(rows_q), hk(k), hv(v), hout(rows_out),
        hlse(rows_lse, RowStats{rows_out.shape[3]});
    return run_kernel(plan.plain->name, plan.plain->fn, hq.get(), hk.get(), hv.get(), scale, split,
                      hout.get(), hlse.get());
  };
  return run_cpu_decode(!plan.choice.prefill, q, k.shape[1], out, lse, options.mask, run_plain);
}

Status plan_and_execute_sdpa(const char* entry, Run run, const TensorView& q, const TensorView& k,
                             const TensorView& v, const TensorView& out,
                             const SdpaOptions& options) {
  SdpaPlan plan;
  plan_sdpa(run, q, k, v, out, options, &plan);
  if (log_plans()) log_plan(entry, plan.describe());
  return execute_sdpa(plan, q, k, v, out);
}

}  // namespace detail

}  // namespace attention
