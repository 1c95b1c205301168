// paged_attention: new tokens against a paged KV cache, read in place by the paged decode kernel
// (generators/sdpa_generator.cpp, paged_sdpa): argument and table checks, then one kernel call
// (on a GPU, one per chunk of batches and heads).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
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
#include "plan/paged_plan.h"
#include "plan/sdpa_plan.h"
#include "plan/thresholds.h"
#include "sdpa_call.h"
#include "tensor_util.h"
#include "validate.h"

namespace attention {
namespace {

// CPU paged decode: key splits until about this many work items per thread (run_paged_cpu).
constexpr int64_t kPagedItemsPerThread = 2;

// GQA decode over a heads-major pool on AVX2 from sequences this long runs through copies of the
// keys (heads_major_by_copies).
constexpr int64_t kHeadsMajorCopyMinKeys = 2048;

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

using detail::PagedChunk;
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

// The masked kernels' arguments, with seq_lens as the key lengths over the table's capacity: the
// kernel adds each sequence's own seq_lens[b] - query_lengths[b] to the diagonal.
MaskOptions paged_mask(const MaskOptions& call_mask, const PagedKvCache& cache) {
  MaskOptions m = call_mask;
  m.key_lengths = cache.seq_lens;
  return m;
}

// The block table the CPU kernel reads: a sequence's entries past its last block repeat that
// block (block 0 for an empty sequence, whose keys are all hidden). The kernel's items read every
// key of their split (SdpaInputs::whole_split_pv); those past a sequence's end then come from a
// block the call has just read, in cache, not from wherever the caller's unused entries point.
std::vector<int32_t> kernel_block_table(const PagedKvCache& cache, const PagedShape& s) {
  std::vector<int32_t> table(static_cast<size_t>(s.B * s.width));
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t used = (int_at(cache.seq_lens, b) + s.block_size - 1) / s.block_size;
    int32_t block = 0;
    for (int64_t n = 0; n < s.width; ++n) {
      if (n < used) block = static_cast<int32_t>(int_at(cache.block_table, b, n));
      table[static_cast<size_t>(b * s.width + n)] = block;
    }
  }
  return table;
}

// The CPU paged kernel of a call. One query row per head over a slots-major pool: the
// whole-split kernel, which prefetches v (bench/RESULTS.md; 1x32x1x4096x128, block 16: 1.3x
// faster; with GQA, 8x32(8)x1x2048x128, block 16: 1.3x on AVX-512, 2.1x on AVX2, 1.2x per head
// with ALiBi). Chunked prefill and heads-major pools keep the predicated kernel, whose loops
// there read v by head.
const detail::KernelSlot<decltype(&sdpa_f32_paged_decode)>& paged_cpu_kernel(
    const PagedKvCache& cache, const PagedShape& s) {
  const bool whole = cache.layout == PagedKvLayout::BlocksSlotsHeads && s.Sq == 1;
  return whole ? detail::paged_whole_decode_kernel(cache.k.dtype)
               : detail::paged_decode_kernel(detail::Run::CPU, cache.k.dtype);
}

Status run_paged_cpu(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                     const SdpaOptions& options, float scale, const PagedShape& s) {
  const auto& kernel = paged_cpu_kernel(cache, s);
  // The kernel's work items are (key split, batch), every kv head inside (paged_sdpa). Splits
  // as short as split_keys / Hkv keys (an item then holds a contiguous decode item's K and V
  // rows), so one short sequence still spreads over the cores: with the contiguous minimum,
  // 1x32(8)x1x512x128 was one item on one core (0.41 -> 0.27 ms on 2 cores).
  attention_contract::CpuTiling tiling = detail::kernel_cpu_tiling(kernel.name);
  tiling.split_keys = static_cast<int>(
      std::max<int64_t>(attention_contract::kSplitKeyMultiple, tiling.split_keys / s.Hkv));
  // No more than kPagedItemsPerThread items per thread: each item pays the softmax and its
  // split's output for every head, so on a small machine fewer, longer splits are faster (2 cores,
  // 4 per thread against 32: 1x32x1x4096x128 and 8x32(8)x1x2048x128 2-9% faster; 2 against 4:
  // 1x32(8)x1x512x128 5-10%, the rest within the noise). Not for a heads-major pool without GQA,
  // whose heads go outside the keys: there long splits were slower (1x32x1x4096x128, block 16:
  // 4.4-4.7 ms at 64 keys per split, 9.7 at 256).
  const bool heads_outside_keys = cache.layout == PagedKvLayout::BlocksHeadsSlots && s.H == s.Hkv;
  const int64_t work_items = heads_outside_keys
                                 ? attention_contract::kDecodeWorkItems
                                 : std::min<int64_t>(attention_contract::kDecodeWorkItems,
                                                     kPagedItemsPerThread * num_threads());
  // A call whose sequences all fit one split takes the least split that holds the longest, in
  // whole key blocks (the masked kernels' unit; a split's items compute every key of it): a group
  // of 16-key sequences (run_paged_cpu_by_length) then computes 16 keys each, not 64.
  const int64_t key_block = std::max(tiling.mask_key_block, 1);
  const int32_t key_split = static_cast<int32_t>(std::min<int64_t>(
      attention_contract::decode_key_split(s.B, /*Hkv=*/1, s.longest, tiling, work_items),
      std::max<int64_t>((s.longest + key_block - 1) / key_block, 1) * key_block));
  std::vector<int32_t> table = kernel_block_table(cache, s);
  detail::HalideView hk(blocks_slots_heads(cache.k, cache.layout)),
      hv(blocks_slots_heads(cache.v, cache.layout)),
      htable(TensorView::contiguous(table.data(), DType::Int32, {s.B, s.width}));
  const auto run = [&](const TensorView& call_q, const TensorView& call_out,
                       const TensorView& call_lse, const MaskOptions& call_mask) {
    const MaskOptions m = paged_mask(call_mask, cache);
    const int64_t H = call_q.shape[1], Sq = call_q.shape[2];
    detail::MaskArgs mask(m, s.B, H, Sq, s.width * s.block_size);
    mask.diag_offset = 0;
    std::vector<float> lse_scratch;
    const TensorView lse = detail::stats_or_scratch(call_lse, {s.B, H, Sq}, lse_scratch);
    detail::HalideView hq(call_q), hout(call_out), hlse(lse, detail::RowStats{call_out.shape[3]});
    return detail::run_kernel_parts(
        kernel.name, kernel.fn, std::tuple(hq.get(), hk.get(), hv.get(), scale),
        mask.arguments(/*values_finite=*/false),
        std::tuple(htable.get(), s.block_shift, key_split, hout.get(), hlse.get()));
  };
  // GQA decode with the group's rows making the kernel's row block: one head's rows per kv head.
  return detail::run_cpu_decode(true, q, s.Hkv, out, options.logsumexp, options.mask, run);
}

// Kv heads [head, head + heads) of one sequence's keys and values (`keys` positions from
// first_position) copied out of the pools (blocks_slots_heads views) into dense [heads, capacity,
// X] tensors, kCopyPositions positions per task of Halide's thread pool.
constexpr int64_t kCopyPositions = 64;
struct SequenceCopy {
  const TensorView *k_pool, *v_pool, *block_table;
  int64_t b, keys, head, heads, block_size, element;
  size_t k_row, v_row;
  unsigned char *k_copy, *v_copy;
  int64_t first_position = 0;  // copy j holds position first_position + j
  int64_t capacity = -1;       // copies per head in k_copy / v_copy (-1: keys)
};
int copy_positions(void*, int task, uint8_t* closure) {
  const SequenceCopy& c = *reinterpret_cast<const SequenceCopy*>(closure);
  const int64_t first = task * kCopyPositions, last = std::min(first + kCopyPositions, c.keys);
  const int64_t capacity = c.capacity < 0 ? c.keys : c.capacity;
  for (int64_t j = first; j < last; ++j) {
    const int64_t position = c.first_position + j;
    const int64_t block = int_at(*c.block_table, c.b, position / c.block_size),
                  slot = position % c.block_size;
    for (int64_t h = 0; h < c.heads; ++h) {
      const auto from = [&](const TensorView& pool) {
        return static_cast<const unsigned char*>(pool.data) +
               (block * pool.strides[0] + slot * pool.strides[1] + (c.head + h) * pool.strides[2]) *
                   c.element;
      };
      std::memcpy(c.k_copy + (h * capacity + j) * c.k_row, from(*c.k_pool), c.k_row);
      std::memcpy(c.v_copy + (h * capacity + j) * c.v_row, from(*c.v_pool), c.v_row);
    }
  }
  return 0;
}

// The copies of one call of run_paged_prefill_cpu: about this many bytes, whole kv heads (at least
// one per thread). Small enough that the attention call after the copy reads it from cache, and
// that the runtime's allocator keeps it for the next call (a whole 1x32x4096x128 sequence, 128
// MiB, was mapped afresh each call: 48 ms against 5.4 for the paged kernel at 4 rows). At
// 1x32(8)x4x4096x128 on 2 threads, block 16: 1-4 MiB (one kv head per call) 4.4-4.5 ms, 8 MiB
// 3.0-3.1, 32 MiB 3.4.
constexpr int64_t kCopyBytes = int64_t{8} << 20;
// The most a call copies at once where one kv head takes less: under the allocator's largest
// cached block (scratch_allocator.cpp), and a bound on the call's memory on machines with many
// threads. One kv head of one sequence is copied whatever its size.
constexpr int64_t kMaxCopyBytes = int64_t{32} << 20;

// Rows [first, last) of head h, batch b of out (any float type: 0.0 is all zero bits) set to
// zeros, and of logsumexp (if given) to -inf: the rows past a sequence's valid rows.
void write_rows_past_valid(const TensorView& out, const TensorView& lse, int64_t b, int64_t h,
                           int64_t first, int64_t last) {
  const int64_t out_element = detail::dtype_size(out.dtype);
  for (int64_t i = first; i < last; ++i) {
    std::memset(static_cast<unsigned char*>(out.data) +
                    (b * out.strides[0] + h * out.strides[1] + i * out.strides[2]) * out_element,
                0, static_cast<size_t>(out.shape[3] * out_element));
    if (detail::given(lse)) {
      static_cast<float*>(lse.data)[b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]] =
          -std::numeric_limits<float>::infinity();
    }
  }
}

// The least mean keys per sequence from which run_paged_rows_as_decode gains (see there).
constexpr int64_t kDecodeRowsMinKeys = 128;

// CPU paged calls of 2 or 3 rows per head without GQA, or 2 rows of each of a pair or a group of
// 4 query heads sharing a kv head under bottom-right causal, at D = 128 (speculative decoding's
// draft tokens): the decode kernels' row blocks, as in detail::run_grouped_query_rows. The keys
// every valid row sees, [0, seq_lens[b] - rows_b + 1) under bottom-right causal (all of them
// without), run as a paged decode call whose kv heads each have 4 or 8 query heads (the rows,
// padded with copies of the first); the last rows_b - 1 keys, copied, run bottom-right causal per
// head; the two merge by their logsumexps. 1x32x{2,3}x4096x128 causal, block 16: 8.4-8.6 /
// 12.8-13.1 -> 5.0-5.2 ms; 1x32(16)x2x4096x128 3.5 -> 2.1-2.2; 1x32(8)x2x4096x128 3.2-3.4 ->
// 1.7. The paged kernel keeps 4 rows of a head (its own row block:
// 1x32x4x4096x128 even, 1x8x4x256x128 0.073 against 0.082 ms), calls of fewer than
// kDecodeRowsMinKeys keys per sequence on average (8x32x2x64x128: 1.13-1.17 against 1.29-1.30,
// gains from 128: 2.17-2.20 -> 1.82-1.84), a window or ALiBi (measured from each row's own
// diagonal), and a sequence with fewer keys than its rows but one: rows_as_decode_rows says 0.
int64_t rows_as_decode_rows(const PagedKvCache& cache, const SdpaOptions& options,
                            const PagedShape& s) {
  const MaskOptions& m = options.mask;
  const int64_t group = s.H / s.Hkv;
  // Each head's rows, padded to R: the memory of a decode call [B, H·R, 1, X].
  const int64_t R = detail::row_block_rows_per_head(s.D, group, s.Sq);
  const bool bottom_right = m.causal == Causal::BottomRight;
  int64_t total_keys = 0;
  for (int64_t b = 0; b < s.B; ++b) total_keys += int_at(cache.seq_lens, b);
  // 2-3 rows of a head without GQA (the paged kernel takes 4 as its own row block), 2 rows of a
  // pair or a group of 4 under bottom-right causal (unmasked, the paged kernel takes them as its
  // row blocks). 5-8 rows of a head and 3-4 of a pair keep the chunked prefill's copies, which
  // then run as the contiguous row blocks (run_grouped_query_rows): as rows here they took 8.4-
  // 8.6 against 8.7-8.8 ms over a slots-major pool (1x32x8x4096x128 causal, block 16) but 9.1-9.3
  // against 8.0-8.5 over a heads-major one, and a pair's 3-4 rows gained 5% at most.
  const bool few_rows = group == 1 ? s.Sq == 2 || s.Sq == 3 : s.Sq == 2 && bottom_right;
  if (R == 0 || m.window >= 0 || m.alibi || !few_rows || total_keys < kDecodeRowsMinKeys * s.B) {
    return 0;
  }
  const bool query_lengths = detail::given(options.mask.query_lengths);
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t keys = int_at(cache.seq_lens, b);
    const int64_t valid = query_lengths ? int_at(options.mask.query_lengths, b) : s.Sq;
    if (bottom_right && valid > 0 && keys < valid - 1) return 0;
  }
  return R;
}

// Runs a call rows_as_decode_rows took, each head's rows padded to R.
Status run_paged_rows_as_decode(const TensorView& q, const PagedKvCache& cache,
                                const TensorView& out, const SdpaOptions& options,
                                const PagedShape& s, int64_t R) {
  const bool bottom_right = options.mask.causal == Causal::BottomRight;
  const bool query_lengths = detail::given(options.mask.query_lengths);
  std::vector<int32_t> rows(static_cast<size_t>(s.B)), prefix(rows.size()), tail(rows.size());
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t keys = int_at(cache.seq_lens, b);
    const int64_t valid = query_lengths ? int_at(options.mask.query_lengths, b) : s.Sq;
    rows[b] = static_cast<int32_t>(valid);
    prefix[b] = static_cast<int32_t>(valid == 0 ? 0 : bottom_right ? keys - valid + 1 : keys);
    tail[b] = static_cast<int32_t>(valid == 0 ? 0 : keys - prefix[b]);
  }
  detail::HostFp32Scratch halves;
  TensorView q32, out32;
  ATTENTION_RETURN_IF_ERROR(halves.widen(q, &q32));
  ATTENTION_RETURN_IF_ERROR(halves.stage(out, &out32));
  detail::ScratchFloats q_storage, out_storage, lse_storage;
  TensorView q_rows, prefix_rows_out, prefix_rows_lse;
  ATTENTION_RETURN_IF_ERROR(detail::padded_query_rows(q32, R, q_storage, &q_rows));
  ATTENTION_RETURN_IF_ERROR(
      detail::allocate_fp32({s.B, s.H, R, s.Dv}, out_storage, &prefix_rows_out));
  ATTENTION_RETURN_IF_ERROR(detail::allocate_fp32({s.B, s.H, R}, lse_storage, &prefix_rows_lse));
  const auto as_decode = [&](const TensorView& dense) {
    auto* data = static_cast<float*>(dense.data);
    return dense.rank == 4 ? TensorView::contiguous(data, {s.B, s.H * R, 1, dense.shape[3]})
                           : TensorView::contiguous(data, {s.B, s.H * R, 1});
  };
  PagedKvCache prefix_cache = cache;
  prefix_cache.seq_lens = TensorView::contiguous(prefix.data(), DType::Int32, {s.B});
  SdpaOptions part = options;
  part.backend = Backend::CPU;
  part.mask.causal = Causal::None;
  part.mask.window_forward = 0;  // every row sees the whole prefix, however far it reaches
  part.mask.query_lengths = TensorView();
  part.logsumexp = as_decode(prefix_rows_lse);
  // The prefix's rows as one decode call, planned and run as such.
  const TensorView decode_q = as_decode(q_rows), decode_out = as_decode(prefix_rows_out);
  detail::PagedPlan prefix_plan;
  ATTENTION_RETURN_IF_ERROR(detail::plan_paged(detail::Run::CPU, decode_q, prefix_cache, decode_out,
                                               part, detail::paged_shape(decode_q, prefix_cache),
                                               &prefix_plan));
  if (detail::log_plans()) detail::log_plan("paged_attention rows part", prefix_plan.describe());
  ATTENTION_RETURN_IF_ERROR(detail::execute_paged(prefix_plan, decode_q, decode_out));
  const TensorView prefix_out = detail::slice(prefix_rows_out, 2, 0, s.Sq),
                   prefix_lse = detail::slice(prefix_rows_lse, 2, 0, s.Sq);
  if (!bottom_right) {
    detail::copy(prefix_out, out32);
    if (detail::given(options.logsumexp)) detail::copy(prefix_lse, options.logsumexp);
  } else {
    // The tail's keys, key p of sequence b its position prefix[b] + p: each row i then sees
    // p <= i - 1, bottom-right causal for Sq rows over Sq - 1 keys.
    const int64_t T = s.Sq - 1, element = detail::dtype_size(cache.k.dtype);
    const TensorView k_pool = blocks_slots_heads(cache.k, cache.layout),
                     v_pool = blocks_slots_heads(cache.v, cache.layout);
    const size_t k_row = static_cast<size_t>(s.D * element),
                 v_row = static_cast<size_t>(s.Dv * element);
    std::vector<unsigned char> k_tail(s.B * s.Hkv * T * k_row), v_tail(s.B * s.Hkv * T * v_row);
    for (int64_t b = 0; b < s.B; ++b) {  // at most 2 positions: one copy_positions task
      SequenceCopy copy{&k_pool,
                        &v_pool,
                        &cache.block_table,
                        b,
                        tail[b],
                        0,
                        s.Hkv,
                        s.block_size,
                        element,
                        k_row,
                        v_row,
                        &k_tail[b * s.Hkv * T * k_row],
                        &v_tail[b * s.Hkv * T * v_row],
                        prefix[b],
                        T};
      copy_positions(nullptr, 0, reinterpret_cast<uint8_t*>(&copy));
    }
    detail::ScratchFloats tail_out_storage, tail_lse_storage;
    TensorView tail_out, tail_lse;
    ATTENTION_RETURN_IF_ERROR(
        detail::allocate_fp32({s.B, s.H, s.Sq, s.Dv}, tail_out_storage, &tail_out));
    ATTENTION_RETURN_IF_ERROR(detail::allocate_fp32({s.B, s.H, s.Sq}, tail_lse_storage, &tail_lse));
    part.mask.causal = Causal::BottomRight;
    part.mask.window_forward = options.mask.window_forward;
    part.mask.key_lengths = TensorView::contiguous(tail.data(), DType::Int32, {s.B});
    part.logsumexp = tail_lse;
    ATTENTION_RETURN_IF_ERROR(detail::plan_and_execute_sdpa(
        "paged_attention causal tail", detail::Run::CPU, q32,
        TensorView::contiguous(k_tail.data(), cache.k.dtype, {s.B, s.Hkv, T, s.D}),
        TensorView::contiguous(v_tail.data(), cache.v.dtype, {s.B, s.Hkv, T, s.Dv}), tail_out,
        part));
    detail::merge_parts(prefix_out, prefix_lse, tail_out, tail_lse, out32, options.logsumexp);
  }
  ATTENTION_RETURN_IF_ERROR(halves.finish(out32, out));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      write_rows_past_valid(out, options.logsumexp, b, h, rows[b], s.Sq);
  return Status::ok_status();
}

// A window leaves each sequence's keys before seq_lens[b] - rows_b - window behind for every row
// (rows_b: its valid rows; the diagonals are measured from each sequence's end). A call whose
// window leaves whole blocks behind runs on a table without them and lengths shortened alike: the
// kernels' splits are planned over each sequence's length (CPU) or the table's width (GPU) and
// compute every key of theirs. CPU: 1x32x1x16384x128, window 4095, block 16: 16.0-18.1 -> 3.7-5.2
// ms; 8x32(8)x1x4096x128, window 1023: 14.1-21.1 -> 3.6. OpenCL on PoCL (host pools, copied each
// call): 1x32(8)x1x16384x128, window 4095: 162-174 -> 95-98 ms; 8x32(8)x1x4096x128, window 1023:
// 309-354 -> 188-197; the first with 4 rows: 459-504 -> 199-206. The pools are not offset (their
// device copies or handles stay whole). Sets plan->cache (over plan->table and plan->lengths) and
// plan->cut_blocks where a block is left behind.
void cut_window(const PagedKvCache& cache, const MaskOptions& m, const PagedShape& s,
                detail::PagedPlan* plan) {
  if (m.window < 0 || m.causal != Causal::BottomRight) return;
  std::vector<int64_t> dropped(static_cast<size_t>(s.B));
  int64_t width = 0, most = 0;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t keys = int_at(cache.seq_lens, b);
    const int64_t rows =
        detail::given(m.query_lengths) ? int_at(m.query_lengths, b) : s.Sq;  // validated <= Sq
    const int64_t behind = m.window < keys - rows ? keys - rows - m.window : 0;
    dropped[b] = behind / s.block_size;
    most = std::max(most, dropped[b]);
    width = std::max(width, (keys - dropped[b] * s.block_size + s.block_size - 1) / s.block_size);
  }
  if (most == 0) return;
  // Entries past a sequence's blocks are never read: block 0 stands in. At least one column, so
  // the table is a valid [B, columns] view even when every sequence is empty.
  const int64_t columns = std::max<int64_t>(width, 1);
  std::vector<int32_t>& table = plan->table;
  std::vector<int32_t>& lengths = plan->lengths;
  table.assign(static_cast<size_t>(s.B * columns), 0);
  lengths.assign(static_cast<size_t>(s.B), 0);
  for (int64_t b = 0; b < s.B; ++b) {
    lengths[b] = static_cast<int32_t>(int_at(cache.seq_lens, b) - dropped[b] * s.block_size);
    const int64_t used = (lengths[b] + s.block_size - 1) / s.block_size;
    for (int64_t n = 0; n < used; ++n)
      table[static_cast<size_t>(b * columns + n)] =
          static_cast<int32_t>(int_at(cache.block_table, b, dropped[b] + n));
  }
  plan->cache = cache;
  plan->cache.block_table = TensorView::contiguous(table.data(), DType::Int32, {s.B, columns});
  plan->cache.seq_lens = TensorView::contiguous(lengths.data(), DType::Int32, {s.B});
  plan->cut_blocks = most;
}

// CPU chunked prefill: a paged call of more rows than the decode kernels take
// (Sq > kDecodeMaxQueries). The paged kernel's items are decode-shaped, a dot product per row and
// key, so its time grows with the rows (1x32(8)xSqx4096x128, block 16: 4 rows 5.2 ms, 64 rows
// 77 ms). Here each sequence's keys are copied, a few kv heads at a time (kCopyBytes), into dense
// [1, heads, seq_lens[b], X] tensors, and its valid rows (query_lengths) of those heads' query
// heads attend to them through scaled_dot_product_attention with Sk = seq_lens[b]: bottom-right
// causal, a window and ALiBi then measure from the sequence's own length, as in the paged kernel.
// Rows past a sequence's valid rows get zeros and -inf.
Status run_paged_prefill_cpu(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                             const SdpaOptions& options, const PagedShape& s) {
  const TensorView k_pool = blocks_slots_heads(cache.k, cache.layout),
                   v_pool = blocks_slots_heads(cache.v, cache.layout);
  const int64_t element = detail::dtype_size(cache.k.dtype), group = s.H / s.Hkv;
  const size_t k_row = static_cast<size_t>(s.D * element),
               v_row = static_cast<size_t>(s.Dv * element);
  const int64_t head_bytes = std::max<int64_t>(1, s.longest) * static_cast<int64_t>(k_row + v_row);
  // At least a kv head per thread (the prefill kernel's work items are (query tile, head, batch)),
  // but at most kMaxCopyBytes unless one kv head is more.
  const int64_t wanted = std::max<int64_t>(kCopyBytes / head_bytes, num_threads());
  const int64_t chunk_heads = std::clamp<int64_t>(
      std::min(wanted, std::max<int64_t>(kMaxCopyBytes / head_bytes, 1)), 1, s.Hkv);
  detail::configure_halide_runtime();  // the caching allocator behind halide_malloc
  const detail::ScratchFloats storage(
      static_cast<float*>(halide_malloc(nullptr, static_cast<size_t>(chunk_heads * head_bytes))));
  if (storage == nullptr) {
    return Status::error(StatusCode::OutOfMemory, "out of memory for a copy of " +
                                                      std::to_string(s.longest) +
                                                      " positions of the cache (paged_attention)");
  }
  const bool query_lengths = detail::given(options.mask.query_lengths);
  const bool lse_given = detail::given(options.logsumexp);
  std::vector<float> slopes = detail::slopes_for(options.mask, s.H);
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t keys = int_at(cache.seq_lens, b);
    const int64_t rows = query_lengths ? int_at(options.mask.query_lengths, b) : s.Sq;
    for (int64_t head = 0; head < s.Hkv; head += chunk_heads) {
      const int64_t heads = std::min(chunk_heads, s.Hkv - head);
      auto* k_copy = reinterpret_cast<unsigned char*>(storage.get());
      unsigned char* v_copy = k_copy + heads * keys * static_cast<int64_t>(k_row);
      SequenceCopy copy{&k_pool, &v_pool,      &cache.block_table,
                        b,       keys,         head,
                        heads,   s.block_size, element,
                        k_row,   v_row,        k_copy,
                        v_copy};
      const int tasks = static_cast<int>((keys + kCopyPositions - 1) / kCopyPositions);
      if (tasks > 0)
        halide_do_par_for(nullptr, copy_positions, 0, tasks, reinterpret_cast<uint8_t*>(&copy));
      // The chunk's query heads and rows of batch b.
      const auto rows_of = [&](const TensorView& t) {
        return detail::slice(
            detail::slice(detail::slice(t, 0, b, 1), 1, head * group, heads * group), 2, 0, rows);
      };
      const auto copied = [&](unsigned char* data, int64_t features) {
        return TensorView::contiguous(data, cache.k.dtype, {1, heads, keys, features});
      };
      SdpaOptions call = options;
      call.backend = Backend::CPU;
      call.mask.query_lengths = TensorView();
      if (options.mask.alibi) {
        call.mask.alibi_slopes =
            TensorView::contiguous(&slopes[static_cast<size_t>(head * group)], {heads * group});
      }
      call.logsumexp = lse_given ? rows_of(options.logsumexp) : TensorView();
      ATTENTION_RETURN_IF_ERROR(detail::plan_and_execute_sdpa(
          "paged_attention copied keys", detail::Run::CPU, rows_of(q), copied(k_copy, s.D),
          copied(v_copy, s.Dv), rows_of(out), call));
    }
    for (int64_t h = 0; h < s.H; ++h)
      write_rows_past_valid(out, options.logsumexp, b, h, rows, s.Sq);
  }
  return Status::ok_status();
}

// Whether run_paged_prefill_cpu's copies, which index with 32 bits, hold the call's longest
// sequence (a table may repeat blocks past the pool's size, so the pool's checks do not bound it).
bool copies_index_in_32_bits(const PagedShape& s) {
  return s.longest * s.Hkv * std::max(s.D, s.Dv) <= INT32_MAX;
}

// GQA decode (one query row) over a heads-major pool where the decode row block has no pairs of
// rows in registers (16 vector registers; measured on AVX2): the paged kernel's P·V waits on v,
// which it cannot prefetch under its predicate, and took 2.2-3.5x the contiguous call. Copies of
// each kv head's keys and the contiguous kernel (run_paged_prefill_cpu) from kHeadsMajorCopyMinKeys
// (AVX2, ms: 1x32(8)x1x4096x128, block 16 3.33 -> 2.30, block 64 2.18 -> 2.00; 1x64(8) 4.54 ->
// 2.71; 8x32(8)x1x2048x128 12.4 -> 10.0; from cache at 512 keys, block 64, 0.29 -> 0.33, lost).
// AVX-512 keeps the kernel (1.2-1.4x the contiguous call). NEON is not measured: kernel there.
bool heads_major_by_copies(const PagedKvCache& cache, const PagedShape& s) {
  if (cache.layout != PagedKvLayout::BlocksHeadsSlots || s.Sq != 1 || s.H == s.Hkv ||
      s.longest < kHeadsMajorCopyMinKeys) {
    return false;
  }
  const detail::CpuKernelInfo& info = detail::cpu_kernel_info();  // runs a probe on first use
  return info.target.find("avx2") != std::string::npos &&
         !attention_contract::two_row_blocks(info.decode);
}

// run_paged_cpu per group of sequences of similar length (detail::paged_length_groups): each
// group's q rows, table rows (no wider than its longest sequence), lengths and query lengths
// gathered into a call of its own; the out and logsumexp rows go back once every group has run.
// `groups`: the plan's.
Status run_paged_cpu_by_length(const TensorView& q, const PagedKvCache& cache,
                               const TensorView& out, const SdpaOptions& options, float scale,
                               const PagedShape& s,
                               const std::vector<std::vector<int64_t>>& groups) {
  if (groups.size() <= 1) return run_paged_cpu(q, cache, out, options, scale, s);
  const bool lse_given = detail::given(options.logsumexp);
  const bool query_lengths = detail::given(options.mask.query_lengths);
  // Every group's rows, one group after another.
  std::vector<float> q_rows(static_cast<size_t>(q.numel())),
      out_rows(static_cast<size_t>(out.numel())), lse_rows(static_cast<size_t>(s.B * s.H * s.Sq));
  const TensorView all_q = TensorView::contiguous(q_rows.data(), {s.B, s.H, s.Sq, s.D}),
                   all_out = TensorView::contiguous(out_rows.data(), {s.B, s.H, s.Sq, s.Dv}),
                   all_lse = TensorView::contiguous(lse_rows.data(), {s.B, s.H, s.Sq});
  std::vector<int32_t> group_lengths(static_cast<size_t>(s.B)), row_lengths(group_lengths.size());
  std::vector<int32_t> table;
  int64_t first = 0;  // the group's first row
  for (const std::vector<int64_t>& group : groups) {
    PagedShape shape = s;
    shape.B = static_cast<int64_t>(group.size());
    shape.longest = int_at(cache.seq_lens, group[0]);
    shape.width = std::max<int64_t>(1, (shape.longest + s.block_size - 1) / s.block_size);
    table.resize(static_cast<size_t>(shape.B * shape.width));
    for (int64_t g = 0; g < shape.B; ++g) {
      const int64_t b = group[g];
      detail::copy(detail::slice(q, 0, b, 1), detail::slice(all_q, 0, first + g, 1));
      for (int64_t n = 0; n < shape.width; ++n)
        table[static_cast<size_t>(g * shape.width + n)] =
            static_cast<int32_t>(int_at(cache.block_table, b, n));
      group_lengths[first + g] = static_cast<int32_t>(int_at(cache.seq_lens, b));
      if (query_lengths)
        row_lengths[first + g] = static_cast<int32_t>(int_at(options.mask.query_lengths, b));
    }
    const TensorView group_out = detail::slice(all_out, 0, first, shape.B),
                     group_lse = detail::slice(all_lse, 0, first, shape.B);
    if (shape.longest == 0) {  // sequences without keys: every row is fully masked
      detail::write_rows_without_keys(group_out, group_lse);
    } else {
      PagedKvCache part = cache;
      part.block_table = TensorView::contiguous(table.data(), DType::Int32, {shape.B, shape.width});
      part.seq_lens = TensorView::contiguous(&group_lengths[first], DType::Int32, {shape.B});
      SdpaOptions part_options = options;
      part_options.logsumexp = lse_given ? group_lse : TensorView();
      if (query_lengths)
        part_options.mask.query_lengths =
            TensorView::contiguous(&row_lengths[first], DType::Int32, {shape.B});
      ATTENTION_RETURN_IF_ERROR(run_paged_cpu(detail::slice(all_q, 0, first, shape.B), part,
                                              group_out, part_options, scale, shape));
    }
    first += shape.B;
  }
  first = 0;
  for (const std::vector<int64_t>& group : groups) {
    for (int64_t b : group) {
      detail::copy(detail::slice(all_out, 0, first, 1), detail::slice(out, 0, b, 1));
      if (lse_given)
        detail::copy(detail::slice(all_lse, 0, first, 1),
                     detail::slice(options.logsumexp, 0, b, 1));
      ++first;
    }
  }
  return Status::ok_status();
}

// For a call with query rows (B, H, Sq > 0) and keys in the table (max_blocks_per_seq > 0).
Status plan_paged_chunks(const attention_contract::GpuTiling& t, const PagedShape& s,
                         const GpuOptions& gpu, std::vector<PagedChunk>* chunks) {
  const int64_t limit = detail::gpu_workspace_limit(gpu);
  const int64_t group = s.H / s.Hkv;
  const int64_t unit = attention_contract::gpu_split_workspace_bytes(
      group, s.Sq, s.width * s.block_size, s.Dv, t);  // one kv head's query heads, every row
  if (limit < unit) {
    return Status::invalid("gpu.workspace_limit: " + std::to_string(limit) +
                           " bytes is below the " + std::to_string(unit) +
                           " bytes the split results of one chunk need (paged_attention: the " +
                           std::to_string(s.Sq) + " query rows of " + std::to_string(group) +
                           (group == 1 ? " head" : " heads") + " against the table's " +
                           std::to_string(s.width * s.block_size) + " keys, Dv=" +
                           std::to_string(s.Dv) + ")");
  }
  const int64_t units = limit / unit;  // kv heads' groups per chunk
  const int64_t batches = std::clamp<int64_t>(units / s.Hkv, 1, s.B);
  const int64_t heads = units >= s.Hkv ? s.H : units * group;
  chunks->clear();
  // Heads outermost: consecutive chunks share the pools' window of kv heads.
  for (int64_t h = 0; h < s.H; h += heads) {
    for (int64_t b = 0; b < s.B; b += batches) {
      chunks->push_back({b, std::min(batches, s.B - b), h, std::min(heads, s.H - h)});
    }
  }
  return Status::ok_status();
}

#if ATTENTION_GPU
// Each chunk's q, out, logsumexp, block-table rows and the pools' kv heads are windows that keep
// their batch and head indices (the kernel takes the GQA group from q's heads over the pools').
// The pools are copied to the device (host tensors) or wrapped (Device::CUDA) once per window of
// kv heads, shared by consecutive chunks.
// `chunks`: plan_paged_chunks's. GQA decode runs with each group's heads as rows of its kv head
// where the mask allows (detail::gqa_rows), in chunks planned again for that shape (their least
// workspace is no larger than the call's).
Status run_paged_gpu(detail::Run run, const TensorView& q, const PagedKvCache& cache,
                     const TensorView& out, const SdpaOptions& options, float scale,
                     const PagedShape& s, const std::vector<PagedChunk>& chunks) {
  const auto& kernel = detail::paged_decode_kernel(run, cache.k.dtype);
  detail::GqaRows grouped;
  if (detail::gqa_rows(q, out, options.logsumexp, options.mask, s.H / s.Hkv, &grouped)) {
    PagedShape rows = s;
    rows.H = s.Hkv;
    rows.Sq = s.Sq * (s.H / s.Hkv);
    SdpaOptions rows_options = options;
    rows_options.mask = grouped.mask;
    rows_options.logsumexp = grouped.lse;
    std::vector<PagedChunk> rows_chunks;
    ATTENTION_RETURN_IF_ERROR(plan_paged_chunks(detail::kernel_gpu_tiling(kernel.name), rows,
                                                options.gpu, &rows_chunks));
    return run_paged_gpu(run, grouped.q, cache, grouped.out, rows_options, scale, rows,
                         rows_chunks);  // one head per kv head now: no further regrouping
  }
  const int32_t key_split = detail::kernel_gpu_tiling(kernel.name).split_keys;
  const MaskOptions m = paged_mask(options.mask, cache);
  const bool lse_given = detail::given(options.logsumexp);
  // The buffers outlive `call`, whose destructor releases their device memory.
  std::deque<detail::HalideView> views;
  std::deque<detail::MaskArgs> masks;
  detail::GpuCall call(run, options.gpu.cuda_stream);
  const int64_t group = s.H / s.Hkv;
  detail::HalideView *hk = nullptr, *hv = nullptr;
  const PagedChunk* pool_chunk = nullptr;  // the first chunk of the pools' current kv heads
  for (const PagedChunk& c : chunks) {
    if (!pool_chunk || c.head != pool_chunk->head || c.heads != pool_chunk->heads) {
      pool_chunk = &c;
      if (hk != nullptr) {
        call.release(hk->get());
        call.release(hv->get());
      }
      const auto heads = [&](const TensorView& pool) {  // [blocks, slots, Hkv, X]
        return detail::slice(blocks_slots_heads(pool, cache.layout), 2, c.head / group,
                             c.heads / group);
      };
      const std::array<int64_t, kMaxRank> pool_mins = {0, 0, c.head / group, 0};
      hk = &views.emplace_back(heads(cache.k), pool_mins);
      hv = &views.emplace_back(heads(cache.v), pool_mins);
      if (detail::is_half(cache.k.dtype)) {
        detail::as_half_bits(hk->get());
        detail::as_half_bits(hv->get());
      }
      ATTENTION_RETURN_IF_ERROR(call.input(hk->get(), cache.k.device));
      ATTENTION_RETURN_IF_ERROR(call.input(hv->get(), cache.v.device));
    }
    const auto window = [&](const TensorView& x) {
      return detail::slice(detail::slice(x, 0, c.batch, c.batches), 1, c.head, c.heads);
    };
    const std::array<int64_t, kMaxRank> mins = {c.batch, c.head, 0, 0};
    detail::HalideView& hq = views.emplace_back(window(q), mins);
    detail::HalideView& hout = views.emplace_back(window(out), mins);
    detail::HalideView& hlse = views.emplace_back(
        lse_given ? window(options.logsumexp)
                  : TensorView::contiguous(nullptr, {c.batches, c.heads, s.Sq}),
        mins);
    detail::HalideView& htable =
        views.emplace_back(detail::slice(cache.block_table, 0, c.batch, c.batches),
                           std::array<int64_t, kMaxRank>{c.batch, 0, 0, 0});
    ATTENTION_RETURN_IF_ERROR(call.begin_chunk());
    ATTENTION_RETURN_IF_ERROR(call.input(hq.get(), q.device));
    ATTENTION_RETURN_IF_ERROR(call.input(htable.get(), Device::CPU));
    ATTENTION_RETURN_IF_ERROR(call.output(hout.get(), out.device));
    ATTENTION_RETURN_IF_ERROR(lse_given ? call.output(hlse.get(), options.logsumexp.device)
                                        : call.scratch(hlse.get()));
    detail::MaskArgs& mask = masks.emplace_back(m, s.B, s.H, s.Sq, s.width * s.block_size);
    mask.diag_offset = 0;
    ATTENTION_RETURN_IF_ERROR(call.mask_inputs(mask, m));
    ATTENTION_RETURN_IF_ERROR(call.run_parts(
        kernel.name, kernel.fn, std::tuple(hq.get(), hk->get(), hv->get(), scale),
        mask.arguments(/*values_finite=*/false),
        std::tuple(htable.get(), s.block_shift, key_split, hout.get(), hlse.get())));
  }
  return Status::ok_status();
}
#else
Status run_paged_gpu(detail::Run, const TensorView&, const PagedKvCache&, const TensorView&,
                     const SdpaOptions&, float, const PagedShape&, const std::vector<PagedChunk>&) {
  // resolve_backend refuses GPU backends first; this is its guard.
  return Status::error(StatusCode::BackendUnavailable, "internal: no GPU kernels in this build");
}
#endif

// Everything paged_attention checks before a kernel runs: the backend the tensors resolve to
// (`run`), the cache (`s`: its shape), the options and outputs, and what a GPU backend refuses.
Status check_paged_call(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                        const SdpaOptions& options, detail::Run* run, PagedShape* s) {
  // The cache's table and lengths are host tensors in every call (read by the checks).
  const std::vector<detail::NamedView> tensors = {{&q, "q"},
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

namespace detail {

bool decode_as_paged_takes(const TensorView& q, const TensorView& k, const TensorView& v,
                           const SdpaOptions& options, DecodePool* pool) {
  const MaskOptions& m = options.mask;
  const int64_t B = q.shape[0], Hkv = k.shape[1], Sk = k.shape[2];
  // The one query's diagonal is Sk - 1 in the contiguous call and seq_lens - 1 in the paged one:
  // causal hides no key of the sequence in either; a window and ALiBi, measured from it, match
  // only where the lengths are all Sk (no key_lengths).
  const bool same_diagonal = (m.window < 0 && !m.alibi) || !given(m.key_lengths);
  const bool same_mask = m.causal != Causal::TopLeft && same_diagonal && !given(m.query_lengths) &&
                         !given(m.bool_mask) && !given(m.additive_mask);
  // One short sequence stays: there the call's few items cost more than the reads save; a batch
  // has an item per sequence, where 4 kv heads or more gain at any length, 2 do not
  // (plan/thresholds.h).
  const bool long_cache = Sk >= kPagedDecodeMinKeys && Sk * Hkv >= kPagedDecodeMinKeysTimesHeads;
  const bool batch_of_heads = B >= 2 && Hkv >= kPagedDecodeBatchMinKvHeads;
  if (q.shape[2] != 1 || Hkv < 2 || Sk == 0 || !(long_cache || batch_of_heads) || !same_mask ||
      options.rope || k.dtype != v.dtype) {
    return false;
  }
  // Sequence-major: each position's kv heads inside its stride. One pool for both tensors needs
  // the same number of positions per batch stride (R).
  int64_t R = Sk;
  for (const TensorView* t : {&k, &v}) {
    const int64_t head = t->strides[1], position = t->strides[2];
    if (head <= 0 || position < Hkv * head) return false;
    if (B > 1) {
      if (t->strides[0] <= 0 || t->strides[0] % position != 0) return false;
      if (t == &k) R = t->strides[0] / position;
      if (t->strides[0] / position != R || R < Sk) return false;
    }
  }
  // Blocks of the largest power of two up to 64 that divides both, so no block reaches past Sk
  // (the kernel reads every slot of a block it uses); the block size barely matters here
  // (bench/RESULTS.md).
  int64_t block = 64;
  while (block > 1 && (Sk % block != 0 || R % block != 0)) block /= 2;
  const int64_t width = Sk / block, stride_blocks = R / block;
  const int64_t blocks = (B - 1) * stride_blocks + width;
  // Sizes and strides the pool's checks would refuse (int32) keep the contiguous kernel.
  if (blocks > INT32_MAX || block * std::max(k.strides[2], v.strides[2]) > INT32_MAX) return false;
  *pool = DecodePool{block, width, stride_blocks, blocks};
  return true;
}

Status run_decode_as_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const SdpaOptions& options,
                           const DecodePool& geometry) {
  const MaskOptions& m = options.mask;
  const int64_t B = q.shape[0], Hkv = k.shape[1], Sk = k.shape[2];
  const int64_t block = geometry.block, width = geometry.width,
                stride_blocks = geometry.stride_blocks, blocks = geometry.blocks;
  std::vector<int32_t> table(static_cast<size_t>(B * width));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < width; ++n)
      table[static_cast<size_t>(b * width + n)] = static_cast<int32_t>(b * stride_blocks + n);
  }
  std::vector<int32_t> lengths = lengths_or(m.key_lengths, B, Sk);
  const auto pool = [&](const TensorView& t) {
    return TensorView::strided(t.data, t.dtype, {blocks, block, Hkv, t.shape[3]},
                               {block * t.strides[2], t.strides[2], t.strides[1], 1});
  };
  PagedKvCache cache;
  cache.k = pool(k);
  cache.v = pool(v);
  cache.block_table = TensorView::contiguous(table.data(), DType::Int32, {B, width});
  cache.seq_lens = TensorView::contiguous(lengths.data(), DType::Int32, {B});
  SdpaOptions paged_options = options;
  paged_options.mask.key_lengths = TensorView();
  paged_options.backend = Backend::CPU;
  PagedPlan plan;
  ATTENTION_RETURN_IF_ERROR(
      plan_paged(Run::CPU, q, cache, out, paged_options, paged_shape(q, cache), &plan));
  if (log_plans()) log_plan("decode-as-paged part", plan.describe());
  return execute_paged(plan, q, out);
}

PagedShape paged_shape(const TensorView& q, const PagedKvCache& cache) {
  PagedShape s{};
  s.B = q.shape[0];
  s.H = q.shape[1];
  s.Sq = q.shape[2];
  s.D = q.shape[3];
  const TensorView k = blocks_slots_heads(cache.k, cache.layout);
  s.blocks = k.shape[0];
  s.block_size = k.shape[1];
  s.Hkv = k.shape[2];
  s.Dv = blocks_slots_heads(cache.v, cache.layout).shape[3];
  s.block_shift = 0;
  while ((int64_t{1} << s.block_shift) < s.block_size) ++s.block_shift;
  s.width = cache.block_table.shape[1];
  s.longest = 0;
  for (int64_t b = 0; b < s.B; ++b)
    s.longest = std::max<int64_t>(s.longest, int_at(cache.seq_lens, b));
  return s;
}

Status plan_paged(Run run, const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                  const SdpaOptions& options, const PagedShape& shape, PagedPlan* plan) {
  plan->run = run;
  plan->options = options;
  plan->cache = cache;
  plan->shape = shape;
  if (out.numel() == 0) {
    plan->route = PagedRoute::Nothing;
    return Status::ok_status();
  }
  cut_window(cache, options.mask, shape, plan);
  if (plan->cut_blocks > 0) plan->shape = paged_shape(q, plan->cache);
  const PagedShape& s = plan->shape;
  if (run == Run::CPU) {
    plan->rows_per_head = rows_as_decode_rows(plan->cache, options, s);
    if (plan->rows_per_head > 0) {
      plan->route = PagedRoute::RowsAsDecode;
      return Status::ok_status();
    }
    // Chunked prefill through copies of the keys where a kv head has more than the decode
    // kernels' row block of query rows; at 3 or 4 rows without GQA the paged kernel was as fast
    // or faster (1x32x4096x128, block 16, ms: 3 rows 13.3 against 13.7, 4 rows 5.5 against 14.0;
    // 5 rows 17.5 against 13.8, 16 rows 34.4 against 14.8; 1x32(16): 6 rows 5.2 against 5.8, 8
    // rows 6.2 against 5.8, 16 rows 10.1 against 6.1). AVX2's heads-major GQA decode takes the
    // copies too.
    if (copies_index_in_32_bits(s) && ((s.Sq > attention_contract::kDecodeMaxQueries &&
                                        s.H / s.Hkv * s.Sq > attention_contract::kDecodeRowBlock) ||
                                       heads_major_by_copies(plan->cache, s))) {
      plan->route = PagedRoute::CopiedKeys;
      return Status::ok_status();
    }
  }
  if (s.longest == 0 && q.device != Device::CUDA) {  // no keys: every row is fully masked
    plan->route = PagedRoute::NoKeys;
    return Status::ok_status();
  }
  if (run == Run::CPU) {
    plan->route = PagedRoute::Kernel;
    plan->kernel = paged_cpu_kernel(plan->cache, s).name;
    std::vector<int64_t> lengths(static_cast<size_t>(s.B));
    for (int64_t b = 0; b < s.B; ++b) lengths[b] = int_at(plan->cache.seq_lens, b);
    plan->length_groups = paged_length_groups(lengths);
    return Status::ok_status();
  }
  // A GPU call with keys in its table runs the kernel in chunks, planned (the workspace limit
  // checked) before anything is written.
  plan->route = PagedRoute::Gpu;
  plan->kernel = paged_decode_kernel(run, cache.k.dtype).name;
  return plan_paged_chunks(kernel_gpu_tiling(plan->kernel), s, options.gpu, &plan->chunks);
}

Status execute_paged(const PagedPlan& plan, const TensorView& q, const TensorView& out) {
  const PagedKvCache& cache = plan.cache;
  const PagedShape& s = plan.shape;
  const SdpaOptions& options = plan.options;
  switch (plan.route) {
    case PagedRoute::Nothing:
      return Status::ok_status();
    case PagedRoute::RowsAsDecode:
      return run_paged_rows_as_decode(q, cache, out, options, s, plan.rows_per_head);
    case PagedRoute::CopiedKeys:
      return run_paged_prefill_cpu(q, cache, out, options, s);
    case PagedRoute::NoKeys:
    case PagedRoute::Kernel:
    case PagedRoute::Gpu:
      break;
  }
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(s.D)));
  // Half q and out (a few rows) go through the conversion kernels (on the device for
  // Device::CUDA tensors); the cache is read as stored.
  return with_fp32_scratch(q.device, options.gpu.cuda_stream, [&](auto& scratch) -> Status {
    TensorView q32, out32;
    ATTENTION_RETURN_IF_ERROR(scratch.widen(q, &q32));
    ATTENTION_RETURN_IF_ERROR(scratch.stage(out, &out32));
    if (plan.route == PagedRoute::NoKeys) {
      write_rows_without_keys(out32, options.logsumexp);
    } else if (plan.route == PagedRoute::Kernel) {
      ATTENTION_RETURN_IF_ERROR(
          run_paged_cpu_by_length(q32, cache, out32, options, scale, s, plan.length_groups));
    } else {
      ATTENTION_RETURN_IF_ERROR(
          run_paged_gpu(plan.run, q32, cache, out32, options, scale, s, plan.chunks));
    }
    return scratch.finish(out32, out);
  });
}

std::string PagedPlan::describe() const {
  static const char* const kRoutes[] = {"nothing", "rows-as-decode", "copied-keys",
                                        "no-keys", "kernel",         "gpu"};
  std::string text =
      std::string(kRoutes[static_cast<int>(route)]) + " backend=" + backend_name(run);
  if (kernel != nullptr) text += std::string(" kernel=") + kernel;
  if (cut_blocks > 0) {
    text += " cut(window)=" + std::to_string(cut_blocks) +
            " blocks width=" + std::to_string(shape.width);
  }
  if (route == PagedRoute::RowsAsDecode) text += " rows_per_head=" + std::to_string(rows_per_head);
  if (route == PagedRoute::Kernel) text += " length_groups=" + std::to_string(length_groups.size());
  if (route == PagedRoute::Gpu) text += " chunks=" + std::to_string(chunks.size());
  return text;
}

}  // namespace detail

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
