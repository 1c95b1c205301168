// paged_attention: new tokens against a paged KV cache, read in place by the paged decode kernel
// (generators/sdpa_generator.cpp, paged_sdpa): argument and table checks, then one kernel call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "gpu.h"
#include "half_precision.h"
#include "halide_view.h"
#include "kernel_choice.h"
#include "kernel_table.h"
#include "mask_args.h"
#include "sdpa_call.h"
#include "tensor_util.h"
#include "validate.h"

namespace attention {
namespace {

// The pool in the kernel's order, [num_blocks, block_size, Hkv, X] (Halide's (x, kv_head, slot,
// block)): the other layout with its middle dimensions swapped.
TensorView blocks_slots_heads(const TensorView& pool, PagedKvLayout layout) {
  TensorView view = pool;
  if (layout == PagedKvLayout::BlocksHeadsSlots) {
    std::swap(view.shape[1], view.shape[2]);
    std::swap(view.strides[1], view.strides[2]);
  }
  return view;
}

// Reads an Int32 element of a validated host view.
int64_t int_at(const TensorView& t, int64_t i, int64_t j = 0) {
  return static_cast<const int32_t*>(t.data)[i * t.strides[0] + j * t.strides[1]];
}

struct PagedShape {
  int64_t B, H, Sq, D, Dv, Hkv, blocks, block_size, width;  // width: max_blocks_per_seq
  int32_t block_shift;
  int64_t longest;  // max seq_lens
};

Status check_cache(const TensorView& q, const PagedKvCache& cache, PagedShape* s) {
  const char* layout = cache.layout == PagedKvLayout::BlocksSlotsHeads
                           ? "[num_blocks, block_size, Hkv, D]"
                           : "[num_blocks, Hkv, block_size, D]";
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(q, "q", 4, "[B, H, Sq, D]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(cache.k, "cache.k", 4, layout));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(cache.v, "cache.v", 4, layout));
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
  // The expected dims of a pool in the cache's layout (-1: any).
  const auto pool_dims = [&](int64_t blocks, int64_t slots, int64_t heads, const char* feature,
                             int64_t features) -> std::vector<detail::ExpectedDim> {
    if (cache.layout == PagedKvLayout::BlocksSlotsHeads)
      return {{"num_blocks", blocks}, {"block_size", slots}, {"Hkv", heads}, {feature, features}};
    return {{"num_blocks", blocks}, {"Hkv", heads}, {"block_size", slots}, {feature, features}};
  };
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(cache.k, "cache.k", pool_dims(-1, -1, -1, "D", s->D)));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(
      cache.v, "cache.v", pool_dims(s->blocks, s->block_size, s->Hkv, "Dv", -1)));
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
      return Status::invalid("cache.seq_lens[" + std::to_string(b) + "] = " +
                             std::to_string(length) + " is outside [0, " +
                             std::to_string(capacity) +
                             "] (max_blocks_per_seq · block_size keys)");
    }
    s->longest = std::max(s->longest, length);
    for (int64_t n = 0; n < (length + s->block_size - 1) / s->block_size; ++n) {
      const int64_t block = int_at(cache.block_table, b, n);
      if (block < 0 || block >= s->blocks) {
        return Status::invalid("cache.block_table[" + std::to_string(b) + ", " +
                               std::to_string(n) + "] = " + std::to_string(block) +
                               " is outside [0, num_blocks=" + std::to_string(s->blocks) +
                               ") (sequence " + std::to_string(b) + ", block " +
                               std::to_string(n) + ")");
      }
    }
  }
  return Status::ok_status();
}

Status check_paged_options(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                           const SdpaOptions& options, const PagedShape& s) {
  const MaskOptions& m = options.mask;
  if (options.backend != Backend::Auto && options.backend != Backend::CPU) {
    return Status::error(StatusCode::Unsupported,
                         "backend: paged_attention runs on the CPU only (GPU kernels for paged KV "
                         "caches are not built yet)");
  }
  ATTENTION_RETURN_IF_ERROR(detail::check_cuda_stream(options.gpu, "gpu", detail::Run::CPU));
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
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(out, "out", 4, "[B, H, Sq, Dv]"));
  return detail::check_sdpa_outputs(out, options, s.B, s.H, s.Sq, s.width * s.block_size, s.Dv,
                                    {{&q, "q"},
                                     {&cache.k, "cache.k"},
                                     {&cache.v, "cache.v"},
                                     {&cache.block_table, "cache.block_table"},
                                     {&cache.seq_lens, "cache.seq_lens"}});
}

}  // namespace

Status paged_attention(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                       const SdpaOptions& options) {
  PagedShape s{};
  ATTENTION_RETURN_IF_ERROR(check_cache(q, cache, &s));
  ATTENTION_RETURN_IF_ERROR(check_paged_options(q, cache, out, options, s));
  if (out.numel() == 0) return Status::ok_status();  // B, H or Sq is 0
  // Half q and out (a few rows) go through the conversion kernels; the cache is read as stored.
  detail::Fp32Input wq;
  detail::Fp32Output result;
  ATTENTION_RETURN_IF_ERROR(wq.widen(q));
  ATTENTION_RETURN_IF_ERROR(result.stage(out));
  if (s.longest == 0) {  // no sequence has a key: every row is fully masked
    detail::write_rows_without_keys(result.view(), options.logsumexp);
    return result.finish();
  }
  // The masked kernels' arguments, with seq_lens as the key lengths over the table's capacity;
  // the kernel adds each sequence's own seq_lens[b] - query_lengths[b] to the diagonal.
  MaskOptions m = options.mask;
  m.key_lengths = cache.seq_lens;
  detail::MaskArgs mask(m, s.B, s.H, s.Sq, s.width * s.block_size);
  mask.diag_offset = 0;
  const auto& kernel = detail::paged_decode_kernel(cache.k.dtype);
  // The kernel's work items are (key split, batch), every head inside (paged_sdpa).
  const int32_t key_split = attention_contract::decode_key_split(
      s.B, /*Hkv=*/1, s.longest, detail::kernel_cpu_tiling(kernel.name));
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(s.D)));
  std::vector<float> lse_scratch;
  const TensorView lse = detail::stats_or_scratch(options.logsumexp, {s.B, s.H, s.Sq}, lse_scratch);
  detail::HalideView hq(wq.view()), hk(blocks_slots_heads(cache.k, cache.layout)),
      hv(blocks_slots_heads(cache.v, cache.layout)), htable(cache.block_table),
      hout(result.view()), hlse(lse);
  ATTENTION_RETURN_IF_ERROR(detail::run_kernel_parts(
      kernel.name, kernel.fn, std::tuple(hq.get(), hk.get(), hv.get(), scale),
      mask.arguments(/*values_finite=*/false),
      std::tuple(htable.get(), s.block_shift, key_split, hout.get(), hlse.get())));
  return result.finish();
}

}  // namespace attention
