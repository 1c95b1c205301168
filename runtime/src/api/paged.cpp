// paged_attention and explain_paged: the call checked (the cache, its table and lengths, the
// options), planned (plan/paged_plan.h) and executed (execute/paged_execute.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/sdpa_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/gpu.h"
#include "plan/paged_plan.h"
#include "plan/sdpa_plan.h"

namespace attention {
namespace {

using detail::blocks_slots_heads;
using detail::int_at;
using detail::PagedShape;

// The cache and q on `device` (the call's); the table and lengths are host tensors.
Status check_cache(const TensorView& q, const PagedKvCache& cache, Device device, PagedShape* s) {
  const char* layout = cache.layout == PagedKvLayout::BlocksSlotsHeads
                           ? "[num_blocks, block_size, Hkv, D]"
                           : "[num_blocks, Hkv, block_size, D]";
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(q, "q", 4, "[B, H, Sq, D]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(cache.k, "cache.k", 4, layout, device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(cache.v, "cache.v", 4, layout, device));
  if (cache.v.dtype != cache.k.dtype) {
    return Status::invalid(std::string("cache.v: expected the dtype of cache.k, ") +
                           detail::dtype_name(cache.k.dtype) + ", got " +
                           detail::dtype_name(cache.v.dtype));
  }
  s->B = q.shape[0];
  s->H = q.shape[1];
  s->Sq = q.shape[2];
  s->D = q.shape[3];
  const TensorView k = blocks_slots_heads(cache.k, cache.layout);
  const TensorView v = blocks_slots_heads(cache.v, cache.layout);
  s->blocks = k.shape[0];
  s->block_size = k.shape[1];
  s->Hkv = k.shape[2];
  s->Dv = v.shape[3];
  if (s->D == 0)
    return Status::invalid("q: head dim D must be >= 1, got shape " + detail::shape_string(q));
  if (s->block_size < 1 || (s->block_size & (s->block_size - 1)) != 0) {
    return Status::invalid("cache.k: block_size must be a power of two, got " +
                           std::to_string(s->block_size) + " in shape " +
                           detail::shape_string(cache.k));
  }
  s->block_shift = 0;
  while ((int64_t{1} << s->block_shift) < s->block_size) ++s->block_shift;
  // A pool's dims in the cache's layout (-1: any).
  const auto check_pool = [&](const TensorView& pool, const char* name, int64_t blocks,
                              int64_t slots, int64_t heads, const char* feature, int64_t features) {
    if (cache.layout == PagedKvLayout::BlocksSlotsHeads) {
      return detail::check_shape(
          pool, name,
          {{"num_blocks", blocks}, {"block_size", slots}, {"Hkv", heads}, {feature, features}});
    }
    return detail::check_shape(
        pool, name,
        {{"num_blocks", blocks}, {"Hkv", heads}, {"block_size", slots}, {feature, features}});
  };
  ATTENTION_RETURN_IF_ERROR(check_pool(cache.k, "cache.k", -1, -1, -1, "D", s->D));
  ATTENTION_RETURN_IF_ERROR(
      check_pool(cache.v, "cache.v", s->blocks, s->block_size, s->Hkv, "Dv", -1));
  if (s->Dv == 0) {
    return Status::invalid("cache.v: head dim Dv must be >= 1, got shape " +
                           detail::shape_string(cache.v));
  }
  if (s->Hkv == 0 || s->H % s->Hkv != 0) {
    return Status::invalid("cache.k: kv heads Hkv=" + std::to_string(s->Hkv) +
                           " must divide the query heads H=" + std::to_string(s->H) +
                           " (grouped-query attention)");
  }
  ATTENTION_RETURN_IF_ERROR(detail::check_view(cache.block_table, "cache.block_table", 2,
                                               "[B, max_blocks_per_seq]", DType::Int32));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(cache.block_table, "cache.block_table",
                                                {{"B", s->B}, {"max_blocks_per_seq", -1}}));
  s->width = cache.block_table.shape[1];
  ATTENTION_RETURN_IF_ERROR(detail::check_view(cache.seq_lens, "cache.seq_lens", 1, "[B]",
                                               DType::Int32, /*any_strides=*/true));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(cache.seq_lens, "cache.seq_lens", {{"B", s->B}}));
  const int64_t capacity = s->width * s->block_size;
  if (capacity > INT32_MAX) {
    return Status::invalid("cache.block_table: max_blocks_per_seq · block_size = " +
                           std::to_string(capacity) + " keys exceeds the 32-bit index limit");
  }
  s->longest = 0;
  for (int64_t b = 0; b < s->B; ++b) {
    const int64_t length = int_at(cache.seq_lens, b);
    if (length < 0 || length > capacity) {
      return Status::invalid("cache.seq_lens[" + std::to_string(b) +
                             "] = " + std::to_string(length) + " is outside [0, " +
                             std::to_string(capacity) + "] (max_blocks_per_seq · block_size keys)");
    }
    s->longest = std::max(s->longest, length);
    for (int64_t n = 0; n < (length + s->block_size - 1) / s->block_size; ++n) {
      const int64_t block = int_at(cache.block_table, b, n);
      if (block < 0 || block >= s->blocks) {
        return Status::invalid("cache.block_table[" + std::to_string(b) + ", " + std::to_string(n) +
                               "] = " + std::to_string(block) + " is outside [0, num_blocks=" +
                               std::to_string(s->blocks) + ") (sequence " + std::to_string(b) +
                               ", block " + std::to_string(n) + ")");
      }
    }
  }
  return Status::ok_status();
}

Status check_paged_options(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                           const SdpaOptions& options, Device device, const PagedShape& s) {
  const MaskOptions& m = options.mask;
  if (options.rope) {
    return Status::error(StatusCode::Unsupported,
                         "rope: paged_attention takes a cache of rotated keys; rotate new keys at "
                         "append time and q before the call (apply_rotary_embedding)");
  }
  if (m.causal == Causal::TopLeft) {
    return Status::invalid(
        "mask.causal: paged_attention aligns each sequence's queries with its last keys; use "
        "Causal::BottomRight (or None), not TopLeft");
  }
  if (detail::given(m.key_lengths)) {
    return Status::invalid(
        "mask.key_lengths: paged_attention takes each sequence's keys from cache.seq_lens");
  }
  ATTENTION_RETURN_IF_ERROR(
      detail::refuse_mask_tensors(m, "mask tensors are not supported by paged_attention"));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(out, "out", 4, "[B, H, Sq, Dv]", device));
  return detail::check_sdpa_outputs(out, options, s.B, s.H, s.Sq, s.width * s.block_size, s.Dv,
                                    {{&q, "q"},
                                     {&cache.k, "cache.k"},
                                     {&cache.v, "cache.v"},
                                     {&cache.block_table, "cache.block_table"},
                                     {&cache.seq_lens, "cache.seq_lens"}},
                                    device);
}

// Everything paged_attention checks before a kernel runs: the backend the tensors resolve to
// (`run`), the cache (`s`: its shape), the options and outputs, and what a GPU backend refuses.
Status check_paged_call(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                        const SdpaOptions& options, detail::Run* run, PagedShape* s) {
  // The cache's table and lengths are host tensors in every call (read by the checks).
  const detail::NamedViews tensors = {{&q, "q"},
                                      {&cache.k, "cache.k"},
                                      {&cache.v, "cache.v"},
                                      {&out, "out"},
                                      {&options.logsumexp, "logsumexp"}};
  ATTENTION_RETURN_IF_ERROR(detail::resolve_backend(options.backend, tensors, run));
  ATTENTION_RETURN_IF_ERROR(detail::check_cuda_stream(options.gpu, "gpu", *run));
  const Device device = detail::device_of(tensors);
  ATTENTION_RETURN_IF_ERROR(check_cache(q, cache, device, s));
  ATTENTION_RETURN_IF_ERROR(check_paged_options(q, cache, out, options, device, *s));
  if (*run != detail::Run::CPU) ATTENTION_RETURN_IF_ERROR(detail::check_gpu_strides(tensors));
  if (out.numel() > 0 && s->width == 0 && device == Device::CUDA) {
    return Status::error(StatusCode::Unsupported,
                         "cache.block_table: max_blocks_per_seq = 0 is not supported for "
                         "Device::CUDA tensors yet");
  }
  return Status::ok_status();
}

}  // namespace

namespace {

// The checks of a paged_attention call, then its plan (explain_paged plans exactly what the call
// runs).
Status check_and_plan_paged(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                            const SdpaOptions& call_options, detail::PagedPlan* plan) {
  const SdpaOptions options = detail::without_absent_logsumexp(call_options);
  detail::Run run = detail::Run::CPU;
  PagedShape s{};
  ATTENTION_RETURN_IF_ERROR(check_paged_call(q, cache, out, options, &run, &s));
  return detail::plan_paged(run, q, cache, out, options, s, plan);
}

}  // namespace

Status paged_attention(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                       const SdpaOptions& options) {
  detail::PagedPlan plan;
  ATTENTION_RETURN_IF_ERROR(check_and_plan_paged(q, cache, out, options, &plan));
  if (detail::log_plans()) detail::log_plan("paged_attention", plan.describe());
  return detail::execute_paged(plan, q, out);
}

Status explain_paged(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                     const SdpaOptions& options, std::string* plan) {
  if (plan == nullptr) return Status::invalid("plan: must not be null");
  detail::PagedPlan planned;
  ATTENTION_RETURN_IF_ERROR(check_and_plan_paged(q, cache, out, options, &planned));
  *plan = planned.describe();
  return Status::ok_status();
}

}  // namespace attention
