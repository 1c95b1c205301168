// plan_paged: what a checked paged_attention call runs (plan/paged_plan.h), and the rewrite of a
// contiguous decode call as a paged one (decode_as_paged_takes). Allocates nothing, runs nothing.
#include "plan/paged_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/sdpa_call.h"
#include "execute/gpu.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"
#include "plan/thresholds.h"

namespace attention {
namespace {

using detail::blocks_slots_heads;
using detail::int_at;
using detail::kDecodeRowsMinKeys;
using detail::kHeadsMajorCopyMinKeys;
using detail::PagedChunk;
using detail::PagedShape;

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

}  // namespace

namespace detail {

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

// For a call with query rows (B, H, Sq > 0) and keys in the table (max_blocks_per_seq > 0).
Status plan_paged_chunks(const attention_contract::GpuTiling& t, const PagedShape& s,
                         const GpuOptions& gpu, std::vector<PagedChunk>* chunks) {
  const int64_t limit = detail::gpu_workspace_limit(gpu);
  const int64_t group = s.H / s.Hkv;
  const int64_t unit = attention_contract::gpu_split_workspace_bytes(
      group, s.Sq, s.width * s.block_size, s.Dv, t);  // one kv head's query heads, every row
  if (limit < unit) {
    return Status::invalid(
        "gpu.workspace_limit: " + std::to_string(limit) + " bytes is below the " +
        std::to_string(unit) + " bytes the split results of one chunk need (paged_attention: the " +
        std::to_string(s.Sq) + " query rows of " + std::to_string(group) +
        (group == 1 ? " head" : " heads") + " against the table's " +
        std::to_string(s.width * s.block_size) + " keys, Dv=" + std::to_string(s.Dv) + ")");
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
    SmallVector<int64_t, 64> lengths;
    for (int64_t b = 0; b < s.B; ++b) lengths.push_back(int_at(plan->cache.seq_lens, b));
    plan->length_groups = paged_length_groups(lengths);
    return Status::ok_status();
  }
  // A GPU call with keys in its table runs the kernel in chunks, planned (the workspace limit
  // checked) before anything is written.
  plan->route = PagedRoute::Gpu;
  plan->kernel = paged_decode_kernel(run, cache.k.dtype).name;
  return plan_paged_chunks(kernel_gpu_tiling(plan->kernel), s, options.gpu, &plan->chunks);
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
}  // namespace attention
