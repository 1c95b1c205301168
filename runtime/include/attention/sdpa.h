// Scaled dot-product attention: masks, RoPE options, SdpaOptions, the call, kernel introspection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention/tensor.h"

namespace attention {

// Which diagonal a causal mask (and a sliding window or ALiBi) is measured from. For query i the
// diagonal key is diag(i) = i (TopLeft, PyTorch's is_causal) or i + Sk - Sq (BottomRight: the last
// query sees the last key, as with a KV cache). The two agree when Sq == Sk.
enum class Causal { None, TopLeft, BottomRight };

// Masks and score biases of one attention call, fused into the kernel (no mask tensor is built).
// Every piece is optional and they combine: a key is visible to a query only if every mask present
// allows it. Scores go: s = scale·q·k -> softcap -> + ALiBi -> + additive_mask -> masks -> softmax.
//
// For query i in [0, Sq) and key j in [0, Sk) of batch b, head h:
//   causal          j <= diag(i) (+ window_forward); see Causal for diag(i).
//   window >= 0     also j >= diag(i) - window: at most window + 1 keys up to and including the
//                   diagonal (window = 255: 256 keys). Needs causal to name the diagonal.
//   window_forward  with a window: lets query i also see keys j <= diag(i) + window_forward (a
//                   local band, not causal). 0 by default.
//   key_lengths     Int32 [B]: keys j >= key_lengths[b] are padding (each in [0, Sk]).
//   query_lengths   Int32 [B]: rows i >= query_lengths[b] are padding and output zeros.
//   bool_mask       Bool [B|1, H|1, Sq, Sk]: false hides the key (PyTorch's attn_mask of bool).
//   additive_mask   Float32 [B|1, H|1, Sq, Sk]: added to the score; -inf hides the key.
//   alibi           adds -slope[h] · |j - diag(i)| (diag from causal, BottomRight when causal is
//                   None). alibi_slopes Float32 [H], or empty for the standard geometric slopes
//                   2^(-8(h+1)/H) (H a power of two; otherwise interleaved as in the ALiBi paper).
//   softcap > 0     s = softcap · tanh(s / softcap) (Gemma 2 style), before the biases.
// Size-1 batch/head dims of the mask tensors broadcast; their other strides are free (inner ones
// need not be 1).
//
//   Sq vs Sk       TopLeft: query i sees keys 0..i      BottomRight: keys 0..i + Sk - Sq
//   Sq == Sk       both are the usual lower triangle
//   Sq < Sk        only the first Sq + 1 keys matter    every query sees the first Sk - Sq keys
//   Sq > Sk        rows >= Sk see every key            rows < Sq - Sk see no key: zeros
//   Sq == 1        the one query sees key 0 only        the one query sees every key
//
// A row that sees no key (fully masked, beyond query_lengths, or Sk == 0) outputs exact zeros and
// logsumexp -inf. Values at keys a row cannot see never reach it, NaN or Inf included.
struct MaskOptions {
  Causal causal = Causal::None;
  int64_t window = -1;  // -1: no sliding window
  int64_t window_forward = 0;
  TensorView key_lengths;
  TensorView query_lengths;
  TensorView bool_mask;
  TensorView additive_mask;
  bool alibi = false;
  TensorView alibi_slopes;
  float softcap = 0.0f;  // 0: off

  // True when no piece is set (the plain kernel runs).
  bool empty() const;
};

// Which features a rotary embedding pairs (both rotate pair i by the angle p·θ_i).
enum class RopeStyle {
  HalfSplit,    // GPT-NeoX / Llama (HF's rotate_half): feature i with i + R/2
  Interleaved,  // GPT-J: feature 2i with 2i + 1
};

// Options of apply_rotary_embedding and SdpaOptions::rope.
struct RopeOptions {
  RopeStyle style = RopeStyle::HalfSplit;
  // θ_i = base^(-2i/R) for pair i (fp32, as the frameworks compute inv_freq). Finite and > 0.
  float base = 10000.0f;
  // R, the rotated features (the first R of D; the rest pass unchanged): even, 2 <= R <= D.
  // 0: R = D.
  int64_t rotary_dim = 0;
  // Optional Int32 [B] host tensor: the position of row s = 0 of batch b (e.g. its cache length
  // before the new tokens); row s is at position_offsets[b] + s. Absent: 0. Positions must be in
  // [0, 2^24) (exact in fp32).
  TensorView position_offsets;
};

// Options of scaled_dot_product_attention.
struct SdpaOptions {
  // Multiplies q·kᵀ before the softmax. Unset: 1/sqrt(D). Any finite value, negative included.
  std::optional<float> scale;
  // Optional output [B, H, Sq]: the natural-log logsumexp of each query row's scaled scores
  // (what a backward pass or a split-KV combine needs). Leave data == nullptr to skip it.
  TensorView logsumexp;
  // Causal, padding, window, boolean/additive masks, ALiBi, softcap: see MaskOptions.
  MaskOptions mask;
  // CPU or GPU kernels: see Backend.
  Backend backend = Backend::Auto;
  // GPU calls: the bound on their device workspace (see GpuOptions).
  GpuOptions gpu;
  // Rotary position embeddings applied to q and k inside the call (RoPE; apply_rotary_embedding's
  // rotation): key j of batch b at position p_b + j and query row i at p_b + Sk - Sq + i, the
  // queries being the last Sq of the Sk positions (self-attention, and chunked prefill against a
  // cache that holds the new keys), with p_b = rope->position_offsets[b] (absent: 0). Every
  // position must lie in [0, 2^24). q and k are not modified. On CPU fp32 calls that take the
  // prefill kernels (Sq above the decode rule's few rows) the rotation is fused into the masked
  // prefill kernel (sdpa_f32_rope_prefill): q rotated per query tile, k per tile and key split,
  // nothing written to memory. Other calls (decode, half-precision operands, GPU backends)
  // rotate q and k into scratch first (apply_rotary_embedding: Device::CUDA tensors on the GPU
  // into device scratch, host tensors on the CPU), then attend. A cache that stores rotated keys
  // passes no rope and rotates its queries with apply_rotary_embedding instead.
  std::optional<RopeOptions> rope;
};

// out = softmax(scale · q·kᵀ) · v, per batch and query head (PyTorch's
// scaled_dot_product_attention).
//
//   q   [B, H,   Sq, D]      k [B, Hkv, Sk, D]      v [B, Hkv, Sk, Dv]      out [B, H, Sq, Dv]
//
// Grouped-query attention: H must be a multiple of Hkv; query head h reads kv head h / (H / Hkv)
// (Hkv == 1 is multi-query attention). Dv may differ from D. All views are fp32 on the CPU, rank 4,
// with a contiguous innermost dimension; the other strides are free, of either sign (transposed,
// padded or reversed batch/head/sequence layouts work without copies), but out must not overlap q,
// k, v or logsumexp, nor itself. The same rules hold for logsumexp (rank 3, Sq contiguous).
//
// Which kernels run (and how the call's rows and keys are laid out for them) is the runtime's
// choice for the machine, the shapes, strides and masks; explain_sdpa says what it is for a call.
// The results match naive attention to rounding whatever runs.
//
// Zero sizes: if B, H or Sq is 0 the outputs are empty and the call succeeds without doing
// anything. If Sk is 0 every query row has no key to attend to: out is all zeros and logsumexp is
// -inf (the same rule as a fully masked row). D == 0 or Dv == 0 is an error (a head without
// features is a caller bug; the default scale 1/sqrt(D) is undefined). A data pointer may be null
// only for an empty tensor.
//
// Limits: each tensor must span less than 2 GiB (the kernels index with 32 bits) and every size and
// stride must fit in int32; larger calls are rejected with an error.
//
// NaN and Inf propagate as in PyTorch's math path: a NaN in q makes its query row NaN, in k every
// row of the query heads that read that kv head, in v that value feature of those heads (and an
// infinite score makes its row NaN through inf - inf).
//
// Every argument is checked before any kernel runs; on error nothing is written. Calls may run
// concurrently from several threads (they share the worker pool set by set_num_threads).
Status scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const SdpaOptions& options = {});

// The plan scaled_dot_product_attention would run for these arguments now, as one line of text:
// the route (e.g. "plain", "masked", "grouped-rows", "decode-as-paged", "half"), the backend, the
// generated kernel where the route runs one, its key split, and any cuts of the keys ("cut(window)=
// [begin,end)"). The arguments are checked exactly as the call checks them, and their error is
// returned instead; nothing is written to any tensor and no kernel runs. ATTENTION_LOG_PLAN=1 in
// the environment logs every SDPA call's plan to stderr in the same form.
Status explain_sdpa(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const SdpaOptions& options, std::string* plan);

// The Halide target of the built-in CPU kernel variant that runs on this machine, e.g.
// "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41" or "arm-64-linux". Every built-in
// CPU kernel is built for the same list of targets, best first, and picks the first one whose
// features this CPU has (Halide's multi-target dispatch); this names that pick, so timings from
// different machines can be compared knowing which code ran. Roles a registered kernel library
// serves run that library's pick instead (KernelLibraryInfo::target).
std::string cpu_kernel_target();

// Tuned kernels (docs/tuning.md): a build that found a current tuned table for a target it builds
// (autoschedules/<target>.json) also generated that table's winning tilings for that target, and
// CPU calls of scaled_dot_product_attention whose shape falls in a tuned bucket run them when this
// CPU runs that target's kernels. On by default; the environment variable ATTENTION_TUNED=0 turns
// them off at start, set_tuned_kernels at any time (between calls). Results stay within the same
// tolerances either way; only the tiling differs.
void set_tuned_kernels(bool enabled);
bool tuned_kernels_enabled();
// The buckets this machine has tuned kernels for, e.g. "long_q.long_k.d_le64.plain" (empty when
// the build has none for the variant that runs here).
std::vector<std::string> tuned_kernel_buckets();

// Kernel libraries generated for the application's own targets (attention/kernel_library.h,
// docs/api.md "Kernel libraries") that this process has linked: each with its
// targets, its kernels and whether the runtime took it (status ok) or refused it (status says
// why; the built-in kernels then keep serving). A taken library's kernels serve the CPU calls of
// their roles in place of the built-in and tuned kernels.
struct KernelLibraryInfo {
  std::string name;
  std::string targets;               // Halide targets, best first, space-separated
  std::string target;                // the one of them this CPU runs (empty: refused before that)
  std::vector<std::string> kernels;  // generated function names
  Status status;
};
std::vector<KernelLibraryInfo> kernel_libraries();

// The generated kernel of a CPU multi_head_attention call, without or with masks.
std::string mha_kernel_name(bool masked = false);

}  // namespace attention
