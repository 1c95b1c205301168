// The checks of one scaled_dot_product_attention call, shared with the entry points that run SDPA
// calls on views of their arguments (scaled_dot_product_attention_varlen checks every sequence's
// call before the first one runs).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/attention.h"
#include "execute/gpu.h"
#include "execute/half_precision.h"
#include "kernel_contract.h"

namespace attention::detail {

// Everything scaled_dot_product_attention checks before a kernel runs: the backend the tensors
// resolve to (`run`), shapes, dtypes, strides, masks, overlaps and, for a GPU call, that its
// workspace plan fits options.gpu and its dtypes and key count are ones the backend takes. Ok means
// the call can only fail for reasons found while it runs (memory, the driver, the kernel).
Status check_sdpa_call(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const SdpaOptions& options, Run* run);

// Plans a call check_sdpa_call passed, on the backend it resolved (`run`), or a part of one that a
// route made (plan_sdpa, plan/sdpa_plan.h: its mask first without the pieces that hide no key),
// logs the plan where ATTENTION_LOG_PLAN=1 (as `entry`: the entry point, or the part), and
// executes it (execute_sdpa). Checks nothing.
Status plan_and_execute_sdpa(const char* entry, Run run, const TensorView& q, const TensorView& k,
                             const TensorView& v, const TensorView& out,
                             const SdpaOptions& options);

// Decode as paged: a checked CPU decode call (Sq = 1, Sk >= 1) whose k and v are sequence-major
// ([B, Sk, Hkv, D] in memory: each key position's rows of every kv head adjacent, as
// FlashAttention's and many frameworks' KV caches are), whose mask the paged kernel computes alike
// (causal None or BottomRight, key lengths, a softcap; a window and ALiBi without key lengths) and
// whose sizes gain (plan/thresholds.h). The contiguous decode kernels' items go by head, which
// reads such a cache one row per position; the paged kernel's items read every kv head of a
// position together. The pool view: blocks of `block` positions, `width` per sequence,
// `stride_blocks` between sequences, `blocks` in all.
struct DecodePool {
  int64_t block = 0, width = 0, stride_blocks = 0, blocks = 0;
};
bool decode_as_paged_takes(const TensorView& q, const TensorView& k, const TensorView& v,
                           const SdpaOptions& options, DecodePool* pool);
// Runs a call decode_as_paged_takes took, with the pool view it found, as paged_attention over
// the same memory.
Status run_decode_as_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const SdpaOptions& options,
                           const DecodePool& pool);

// Grouped rows: a checked CPU call (Sk >= 1) of grouped-query attention (H / Hkv >= 2) with a few
// query rows (kDecodeMaxQueries < Sq <= kGroupedMaxQueries: speculative decoding's draft tokens, a
// short chunk of a prefill) whose mask treats every row alike (key lengths, a softcap) or is
// bottom-right causal over enough keys: the rows of each kv head's query heads run as one head's
// rows, [B, Hkv, group·Sq, D], so the prefill kernel reads each kv head once, not once per query
// head. At D = 128 the decode kernels' row blocks take a few rows of a head without GQA, or of a
// pair or group of query heads (`decode_rows`, `rows_per_head` rows each, padded), as a decode
// call. Bottom-right causal splits the keys: the prefix every row sees runs that way without the
// mask, the last Sq - 1 keys per head with it, and the parts merge by their logsumexps; with a
// window the keys before the last row's reach (`head_keys`) run per head too.
struct GroupedRows {
  bool decode_rows = false;
  int64_t rows_per_head = 0;
  int64_t head_keys = 0;
};
bool grouped_rows_take(const TensorView& q, const TensorView& k, const TensorView& v,
                       const SdpaOptions& options, GroupedRows* plan);
Status run_grouped_query_rows(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const SdpaOptions& options,
                              const GroupedRows& plan);

// The rows per query head with which `group` query heads per kv head, Sq rows each, at head dim D
// fill one of the decode kernels' row blocks (attention_contract::kDecodeRowBlockRows; each head's
// rows padded to it), or 0 where they fit none.
constexpr int64_t row_block_rows_per_head(int64_t D, int64_t group, int64_t Sq) {
  const int64_t block = attention_contract::kDecodeRowBlockRows
      [group * Sq <= attention_contract::kDecodeRowBlockRows[0] ? 0 : 1];
  return D == attention_contract::kDecodeRowBlockDim && group >= 1 && group * Sq <= block &&
                 block % group == 0
             ? block / group
             : 0;
}

// q32's rows (fp32 [B, H, Sq, D]) copied into dense scratch [B, H, rows, D], rows >= Sq, the rows
// past Sq copies of its first: padding to the decode kernels' row blocks.
Status padded_query_rows(const TensorView& q32, int64_t rows, ScratchFloats& storage,
                         TensorView* padded);

// Rows of two attentions of the same queries over disjoint keys (fp32 outputs [B, H, Sq, Dv] and
// logsumexps [B, H, Sq], any strides) merged, in double, into the attention over all their keys
// (`out`, and `lse` unless its data is null): each part weighed by exp(its logsumexp - the merged
// one). A second part without keys (-inf, zeros) adds nothing; NaN propagates.
void merge_parts(const TensorView& out1, const TensorView& lse1, const TensorView& out2,
                 const TensorView& lse2, const TensorView& out, const TensorView& lse);

// The checks an SDPA-family call shares once its inputs' shapes are known: out [B, H, Sq, Dv],
// the scale, the GPU options, the masks against Sk keys, no output overlapping `inputs` (the
// mask views are added) and logsumexp [B, H, Sq].
Status check_sdpa_outputs(const TensorView& out, const SdpaOptions& options, int64_t B, int64_t H,
                          int64_t Sq, int64_t Sk, int64_t Dv, NamedViews inputs,
                          Device device = Device::CPU);

}  // namespace attention::detail
