// execute_paged: runs a PagedPlan (plan/paged_plan.h): the paged decode kernel by groups of
// sequences of similar length, its GPU chunks, the rows run as a decode call with the causal tail
// merged, and the chunked prefill over copies of each sequence's keys. Decides nothing.
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
#include "call/mask_args.h"
#include "call/sdpa_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/gpu.h"
#include "execute/half_precision.h"
#include "kernels/halide_view.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"
#include "plan/paged_plan.h"
#include "plan/sdpa_plan.h"
#include "plan/thresholds.h"

namespace attention {
namespace {

using detail::blocks_slots_heads;
using detail::int_at;
using detail::kCopyBytes;
using detail::kMaxCopyBytes;
using detail::kPagedItemsPerThread;
using detail::PagedChunk;
using detail::PagedShape;

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
// `table`: B × width entries.
void kernel_block_table(const PagedKvCache& cache, const PagedShape& s, int32_t* table) {
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t used = (int_at(cache.seq_lens, b) + s.block_size - 1) / s.block_size;
    int32_t block = 0;
    for (int64_t n = 0; n < s.width; ++n) {
      if (n < used) block = static_cast<int32_t>(int_at(cache.block_table, b, n));
      table[static_cast<size_t>(b * s.width + n)] = block;
    }
  }
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
  detail::ScratchInts table;
  ATTENTION_RETURN_IF_ERROR(detail::allocate_ints(s.B * s.width, "the block table", table));
  kernel_block_table(cache, s, table.get());
  detail::HalideView hk(blocks_slots_heads(cache.k, cache.layout)),
      hv(blocks_slots_heads(cache.v, cache.layout)),
      htable(TensorView::contiguous(table.get(), DType::Int32, {s.B, s.width}));
  const auto run = [&](const TensorView& call_q, const TensorView& call_out,
                       const TensorView& call_lse, const MaskOptions& call_mask) {
    const MaskOptions m = paged_mask(call_mask, cache);
    const int64_t H = call_q.shape[1], Sq = call_q.shape[2];
    detail::MaskArgs mask(m, s.B, H, Sq, s.width * s.block_size);
    mask.diag_offset = 0;
    detail::ScratchFloats lse_scratch;
    TensorView lse;
    ATTENTION_RETURN_IF_ERROR(detail::stats_or_scratch(call_lse, {s.B, H, Sq}, lse_scratch, &lse));
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
  detail::HeadSlopes slopes = detail::slopes_for(options.mask, s.H);
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

// run_paged_cpu per group of sequences of similar length (detail::paged_length_groups): each
// group's q rows, table rows (no wider than its longest sequence), lengths and query lengths
// gathered into a call of its own; the out and logsumexp rows go back once every group has run.
// `groups`: the plan's.
Status run_paged_cpu_by_length(const TensorView& q, const PagedKvCache& cache,
                               const TensorView& out, const SdpaOptions& options, float scale,
                               const PagedShape& s, const detail::PagedLengthGroups& groups) {
  if (groups.size() <= 1) return run_paged_cpu(q, cache, out, options, scale, s);
  const bool lse_given = detail::given(options.logsumexp);
  const bool query_lengths = detail::given(options.mask.query_lengths);
  // Every group's rows, one group after another.
  detail::ScratchFloats q_rows, out_rows, lse_rows;
  TensorView all_q, all_out, all_lse;
  ATTENTION_RETURN_IF_ERROR(detail::allocate_fp32({s.B, s.H, s.Sq, s.D}, q_rows, &all_q));
  ATTENTION_RETURN_IF_ERROR(detail::allocate_fp32({s.B, s.H, s.Sq, s.Dv}, out_rows, &all_out));
  ATTENTION_RETURN_IF_ERROR(detail::allocate_fp32({s.B, s.H, s.Sq}, lse_rows, &all_lse));
  // Per group: its lengths, query lengths and table rows (no wider than the call's).
  detail::ScratchInts lengths_storage, table_storage;
  ATTENTION_RETURN_IF_ERROR(detail::allocate_ints(2 * s.B, "the groups' lengths", lengths_storage));
  ATTENTION_RETURN_IF_ERROR(detail::allocate_ints(s.B * std::max<int64_t>(s.width, 1),
                                                  "the groups' block tables", table_storage));
  int32_t* const group_lengths = lengths_storage.get();
  int32_t* const row_lengths = group_lengths + s.B;
  int32_t* const table = table_storage.get();
  int64_t first = 0;  // the group's first row
  for (const auto group : groups) {
    PagedShape shape = s;
    shape.B = static_cast<int64_t>(group.size());
    shape.longest = int_at(cache.seq_lens, group[0]);
    shape.width = std::max<int64_t>(1, (shape.longest + s.block_size - 1) / s.block_size);
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
      part.block_table = TensorView::contiguous(table, DType::Int32, {shape.B, shape.width});
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
  for (const auto group : groups) {
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
    ATTENTION_RETURN_IF_ERROR(
        plan_paged_chunks(detail::kernel_gpu_tiling(kernel.name), rows, options.gpu, &rows_chunks));
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
    detail::HalideView& hlse =
        views.emplace_back(lse_given ? window(options.logsumexp)
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
    ATTENTION_RETURN_IF_ERROR(
        call.run_parts(kernel.name, kernel.fn, std::tuple(hq.get(), hk->get(), hv->get(), scale),
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

}  // namespace

namespace detail {

Status run_decode_as_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const SdpaOptions& options,
                           const DecodePool& geometry) {
  const MaskOptions& m = options.mask;
  const int64_t B = q.shape[0], Hkv = k.shape[1], Sk = k.shape[2];
  const int64_t block = geometry.block, width = geometry.width,
                stride_blocks = geometry.stride_blocks, blocks = geometry.blocks;
  ScratchInts table_storage;
  ATTENTION_RETURN_IF_ERROR(allocate_ints(B * width, "the block table", table_storage));
  int32_t* const table = table_storage.get();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < width; ++n)
      table[static_cast<size_t>(b * width + n)] = static_cast<int32_t>(b * stride_blocks + n);
  }
  BatchLengths lengths = lengths_or(m.key_lengths, B, Sk);
  const auto pool = [&](const TensorView& t) {
    return TensorView::strided(t.data, t.dtype, {blocks, block, Hkv, t.shape[3]},
                               {block * t.strides[2], t.strides[2], t.strides[1], 1});
  };
  PagedKvCache cache;
  cache.k = pool(k);
  cache.v = pool(v);
  cache.block_table = TensorView::contiguous(table, DType::Int32, {B, width});
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

}  // namespace detail
}  // namespace attention
