// Serving paths: packed varlen batches, paged KV caches and rotary embeddings (RoPE).
#pragma once

#include <string>

#include "attention/sdpa.h"
#include "attention/tensor.h"

namespace attention {

// scaled_dot_product_attention over a packed batch of sequences of different lengths
// (FlashAttention's varlen layout): sequence b's queries are rows [cu_seqlens_q[b],
// cu_seqlens_q[b+1]) of q and out, its keys and values rows [cu_seqlens_k[b], cu_seqlens_k[b+1])
// of k and v. No work or memory is spent on padding: each sequence runs as its own call on views
// of the packed tensors (no copies).
//
//   q [Tq, H, D]    k [Tk, Hkv, D]    v [Tk, Hkv, Dv]    out [Tq, H, Dv]
//   cu_seqlens_q, cu_seqlens_k   Int32 [B + 1] host tensors: prefix sums of the sequences'
//                                query and key lengths, starting at 0, non-decreasing, ending
//                                at Tq and Tk.
//
// Options as for scaled_dot_product_attention, applied per sequence with that sequence's own
// lengths Sq_b and Sk_b: a causal mask (and a window, ALiBi) is aligned to each sequence's own
// diagonal, so Causal::BottomRight with cu_seqlens_k ahead of cu_seqlens_q is chunked prefill
// over per-sequence cache lengths. mask.key_lengths / query_lengths are Int32 [B] (each within
// its sequence's Sk_b / Sq_b); mask tensors (bool_mask, additive_mask) have no packed form and
// are refused (Unsupported). logsumexp, if given, is Float32 [H, Tq] (FlashAttention's
// softmax_lse layout) with Tq contiguous. rope: each sequence's keys from position
// rope.position_offsets[b] (Int32 [B]; absent: 0), its queries the last Sq_b of its Sk_b
// positions. Strides of q, k, v, out are free except the innermost;
// dtypes and backends as scaled_dot_product_attention. Every argument and every sequence is
// checked before the first kernel runs; on error nothing is written.
Status scaled_dot_product_attention_varlen(const TensorView& q, const TensorView& k,
                                           const TensorView& v, const TensorView& out,
                                           const TensorView& cu_seqlens_q,
                                           const TensorView& cu_seqlens_k,
                                           const SdpaOptions& options = {});

// How a paged KV cache orders a block's positions and kv heads (the feature dim is innermost).
enum class PagedKvLayout {
  BlocksSlotsHeads,  // [num_blocks, block_size, Hkv, D]: vLLM's / FlashAttention's paged layout
  BlocksHeadsSlots,  // [num_blocks, Hkv, block_size, D]
};

// A paged KV cache (vLLM's PagedAttention): k and v are pools of fixed-size blocks, and each
// sequence's keys are the blocks its row of the block table names, in order. Key j of sequence
// b is slot j % block_size of block block_table[b, j / block_size].
struct PagedKvCache {
  TensorView k;            // [num_blocks, block_size, Hkv, D] (or BlocksHeadsSlots)
  TensorView v;            // [num_blocks, block_size, Hkv, Dv] (the same layout and dtype)
  TensorView block_table;  // Int32 [B, max_blocks_per_seq], host, rows contiguous
  TensorView seq_lens;     // Int32 [B], host: keys in each sequence's cache, new tokens included
  PagedKvLayout layout = PagedKvLayout::BlocksSlotsHeads;
};

// scaled_dot_product_attention of new tokens against a paged KV cache, read in place (decode,
// and chunked prefill of a few tokens per sequence):
//
//   q [B, H, Sq, D]      cache (see PagedKvCache)      out [B, H, Sq, Dv]
//
// block_size is a power of two (vLLM uses 8 to 128); H a multiple of Hkv (GQA). Sequence b has
// seq_lens[b] keys (0 <= seq_lens[b] <= max_blocks_per_seq · block_size); only the table entries
// that hold them are read, and each must be a block id in [0, num_blocks) (blocks may repeat
// across sequences, e.g. a shared prefix). The query rows are the sequence's last tokens: row i of
// Sq_b = mask.query_lengths[b] (default Sq) valid rows is position seq_lens[b] - Sq_b + i, so
// Causal::BottomRight (and a window, ALiBi) align to each sequence's own length, as in a batch
// whose sequences have different cache lengths. Causal::None lets every row see all of its
// sequence's keys. Options: scale, logsumexp ([B, H, Sq]), mask.causal (None or BottomRight),
// window, window_forward, query_lengths, alibi, softcap; key_lengths is refused (seq_lens is
// that), mask tensors and TopLeft too. The cache is Float32, Float16 or BFloat16 (read as stored,
// widened in registers); q and out any of the three. Every table entry read and every length is
// checked before the kernel runs; on error nothing is written. On the CPU, calls with several
// query rows per kv head may copy each sequence's keys out of the pool (a few kv heads at a time,
// up to about 32 MiB of scratch) and attend over the copies, or run the rows as decode row blocks
// merged by logsumexp; a batch of very different lengths may run as a few calls over sequences of
// similar length. Results match the call over the gathered keys to rounding.
//
// Backends: the CPU, and CUDA / OpenCL (options.backend; Auto picks CUDA for Device::CUDA q, cache
// pools and outputs). block_table and seq_lens are host tensors in every call (the checks read
// them); a GPU call copies them to the device. On a GPU, chunks of the call (gpu.workspace_limit)
// hold every query row of whole GQA groups, so the least limit is the split results of one kv
// head's query heads over all Sq rows and the table's max_blocks_per_seq · block_size keys.
// Device::CUDA calls refuse a table without columns (Unsupported).
Status paged_attention(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                       const SdpaOptions& options = {});

// What a paged_attention call of these arguments would run, as one line in `plan` (the route, e.g.
// "kernel", "copied-keys" or "rows-as-decode", the backend, the kernel, a window cut; the format
// is for people and may change). The arguments are checked exactly as the call checks them, and
// their error is returned instead; nothing is written and no kernel runs. ATTENTION_LOG_PLAN=1
// logs every call's plan to stderr in the same form.
Status explain_paged(const TensorView& q, const PagedKvCache& cache, const TensorView& out,
                     const SdpaOptions& options, std::string* plan);

// Rotary position embeddings (RoPE): out = x with each pair of features of row s of batch b
// rotated by the angle p·θ_i, p = position_offsets[b] + s. The angle is the fp32 product, as
// PyTorch, HF and vLLM compute it; its cosine and sine are accurate to about one ulp (not a fast
// approximation), so outputs match the frameworks' up to rounding.
//
//   x [B, H, S, D]      out [B, H, S, D]
//
// For queries before attention and for a KV cache that stores rotated keys (rotate the new keys
// at append time with their positions). Any outer strides (a [B, S, H, D] buffer passes as a
// view), innermost contiguous on the CPU (a GPU takes any non-negative strides); Float32, Float16
// or BFloat16 (half tensors are widened and the result rounded once); out must not overlap x.
// `device` picks the CPU or a GPU (Device::CUDA tensors: rope_f32_cuda; Backend::OpenCL on host
// tensors: rope_f32_opencl, which needs a device with fp64, cl_khr_fp64, for the angles' range
// reduction); position_offsets is a host tensor in every call.
Status apply_rotary_embedding(const TensorView& x, const TensorView& out,
                              const RopeOptions& options = {}, const DeviceOptions& device = {});

}  // namespace attention
