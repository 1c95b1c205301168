// One paged_attention call's plan: what runs, decided once from the checked call by plan_paged and
// run by execute_paged (paged.cpp), which follows it and decides nothing. explain_paged prints it;
// ATTENTION_LOG_PLAN=1 logs it. Contiguous decode calls that SDPA's plan rewrites as paged ones
// (decode-as-paged) go through the same plan.
//
// The candidates, in order (the first that takes the call runs it):
//   nothing          out is empty (B, H or Sq is 0)
//   [window cut]     a bottom-right window leaves whole blocks of a sequence behind: the call runs
//                    on a table without them (lengths shortened alike), then the candidates below
//   rows-as-decode   CPU, 2-3 rows per head without GQA or 2 rows of a pair or group of 4 under
//                    bottom-right causal, D = 128: the rows as a paged decode call (its own plan,
//                    run then), the causal tail merged by logsumexp
//   copied-keys      CPU chunked prefill (more rows than the decode row block), or GQA decode over
//                    a heads-major pool on AVX2: each sequence's keys copied, a few kv heads at a
//                    time, and SDPA planned and run on the copies
//   no-keys          no sequence has keys (host tensors): zeros, logsumexp -inf
//   kernel           CPU: the paged decode kernel, per group of sequences of similar length
//   gpu              a GPU backend: the paged decode kernel in chunks of batches and heads
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "execute/gpu.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"

namespace attention::detail {

// The pool in the kernel's order, [num_blocks, block_size, Hkv, X] (Halide's (x, kv_head, slot,
// block)): the other layout with its middle dimensions swapped.
inline TensorView blocks_slots_heads(const TensorView& pool, PagedKvLayout layout) {
  TensorView view = pool;
  if (layout == PagedKvLayout::BlocksHeadsSlots) {
    std::swap(view.shape[1], view.shape[2]);
    std::swap(view.strides[1], view.strides[2]);
  }
  return view;
}

// Reads an Int32 element of a validated host view (the block table, the lengths).
inline int64_t int_at(const TensorView& t, int64_t i, int64_t j = 0) {
  return static_cast<const int32_t*>(t.data)[i * t.strides[0] + j * t.strides[1]];
}

struct PagedShape {
  int64_t B, H, Sq, D, Dv, Hkv, blocks, block_size, width;  // width: max_blocks_per_seq
  int32_t block_shift;
  int64_t longest;  // max seq_lens
};

// A GPU call's chunks: batches [batch, batch + batches) and heads [head, head + heads), every query
// row (the kernel aligns each sequence's diagonal from its query and cache lengths, which a chunk
// of rows would shift). Each holds whole GQA groups, within gpu.workspace_limit.
struct PagedChunk {
  int64_t batch, batches, head, heads;
};

enum class PagedRoute { Nothing, RowsAsDecode, CopiedKeys, NoKeys, Kernel, Gpu };

struct PagedPlan {
  PagedPlan() = default;
  PagedPlan(const PagedPlan&) = delete;  // cache may point into table and lengths
  PagedPlan& operator=(const PagedPlan&) = delete;

  Run run = Run::CPU;
  PagedRoute route = PagedRoute::Nothing;
  SdpaOptions options;
  PagedKvCache cache;      // the call's, or its window cut: over `table` and `lengths`
  PagedShape shape{};      // of `cache`
  int64_t cut_blocks = 0;  // the window cut: the most blocks one sequence left behind (0: none)
  std::vector<int32_t> table, lengths;
  int64_t rows_per_head = 0;  // RowsAsDecode: each head's rows padded to this
  // Kernel: the sequences in groups of similar length (paged_length_groups), one call each.
  PagedLengthGroups length_groups;
  std::vector<PagedChunk> chunks;  // Gpu
  const char* kernel = nullptr;    // Kernel, Gpu

  // One line: "route backend=... [kernel=...] [cut(window) ...] [...]".
  std::string describe() const;
};

// The plan of a call whose checks passed (`shape`: check_cache's, or paged_shape's for a cache a
// route made), on backend `run`. Fails only where a GPU call's chunks do not fit
// options.gpu.workspace_limit, before anything is written.
Status plan_paged(Run run, const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                  const SdpaOptions& options, const PagedShape& shape, PagedPlan* plan);

// Runs `plan` on q and out. Decides nothing, checks nothing, enters no public or checked entry
// point (a route's parts are planned and executed the same way).
Status execute_paged(const PagedPlan& plan, const TensorView& q, const TensorView& out);

// The shape of a valid cache (one a route built over checked memory), without checks.
PagedShape paged_shape(const TensorView& q, const PagedKvCache& cache);

// The CPU paged kernel of a call (plan_paged names it, execute_paged runs it).
const KernelSlot<decltype(&sdpa_f32_paged_decode)>& paged_cpu_kernel(const PagedKvCache& cache,
                                                                     const PagedShape& s);

// A GPU call's chunks (query rows, and keys in the table), each within gpu.workspace_limit.
Status plan_paged_chunks(const attention_contract::GpuTiling& t, const PagedShape& s,
                         const GpuOptions& gpu, std::vector<PagedChunk>* chunks);

}  // namespace attention::detail
