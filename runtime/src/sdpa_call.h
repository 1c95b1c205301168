// The checks of one scaled_dot_product_attention call, shared with the entry points that run SDPA
// calls on views of their arguments (scaled_dot_product_attention_varlen checks every sequence's
// call before the first one runs).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/attention.h"
#include "gpu.h"
#include "half_precision.h"
#include "kernel_contract.h"

namespace attention::detail {

// Everything scaled_dot_product_attention checks before a kernel runs: the backend the tensors
// resolve to (`run`), shapes, dtypes, strides, masks, overlaps and, for a GPU call, that its
// workspace plan fits options.gpu and its dtypes and key count are ones the backend takes. Ok means the call
// can only fail for reasons found while it runs (memory, the driver, the kernel).
Status check_sdpa_call(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const SdpaOptions& options, Run* run);

// Runs a call check_sdpa_call passed, on the backend it resolved (`run`), its mask first without
// the pieces that hide no key (without_inert_pieces): such a call takes the plain kernels and
// the routes below as if they were absent.
Status run_checked_sdpa(Run run, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const SdpaOptions& options);

// A checked CPU decode call (Sq = 1) whose k and v are sequence-major ([B, Sk, Hkv, D] in memory:
// each key position's rows of every kv head adjacent, as FlashAttention's and many frameworks'
// KV caches are), whose mask the paged kernel computes alike (causal None or BottomRight, key
// lengths, a softcap; a window and ALiBi without key lengths) and whose sizes gain (a batch with
// Hkv >= 4, or Hkv >= 2 with Sk >= 128 and Sk · Hkv >= 1024): runs it as paged_attention over the
// same memory viewed as a pool of blocks, and sets *ran. The contiguous decode kernels' items go
// by head, which reads such a cache one row per position (1x32x1x4096x128: 1.6-1.9x slower than
// the paged kernel, whose items read every kv head of a position together). Otherwise *ran =
// false.
Status run_decode_as_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const SdpaOptions& options, bool* ran);

// A checked CPU call of grouped-query attention (H / Hkv >= 2) with a few query rows
// (kDecodeMaxQueries < Sq <= 64: speculative decoding's draft tokens, a short chunk of a prefill)
// whose mask treats every row alike (key lengths, a softcap) or is bottom-right causal with
// Sk >= 8·Sq: runs the rows of each kv head's query heads as one head's rows, [B, Hkv, group·Sq,
// D], so the prefill kernel reads each kv head once, not once per query head (1x32(8)x4x4096x128:
// 5.7 -> 1.8 ms on Zen 4). At D = 128 the decode kernels' row blocks take 3-8 rows of a head
// without GQA (padded to 4 or 8; 5-8 from 128 keys), 2 from a sequence-major cache, 3-4 rows of
// each of a pair of query heads (AVX-512: two_row_blocks), and 2 rows of each of a pair (causal or
// sequence-major) or a group of 4 (sequence-major) from 256 keys, as a decode call whose kv heads
// have 4 or 8 query heads each (1x32x3x4096x128 causal: 9.3 -> 4.0 ms; 1x32x4: 6.6 -> 4.0;
// 1x32x8: 9.7 -> 5.0). Bottom-right causal splits the keys: the prefix every row sees runs that way
// without the mask, the last Sq - 1 keys per head with it, and the parts merge by their logsumexps;
// with a window
// (>= Sq - 1, over 24·Sq keys or more, 48·Sq from 16 rows) the keys before the last row's reach
// run per head too. Sets *ran; otherwise *ran = false and nothing runs.
Status run_grouped_query_rows(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const SdpaOptions& options, bool* ran);

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
                          int64_t Sq, int64_t Sk, int64_t Dv, std::vector<NamedView> inputs,
                          Device device = Device::CPU);

}  // namespace attention::detail
