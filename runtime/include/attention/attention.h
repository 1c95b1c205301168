// Public API of the attention kernel library.
//
// The kernels behind these entry points are generated ahead of time by Halide (see generators/) for
// several x86-64 instruction sets and picked at run time by the CPU's features. This header never
// includes Halide.h: it only needs the C++ standard library.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace attention {

// Element type of a tensor. Attention operands (q, k, v, out) are Float32, Float16 (IEEE half) or
// BFloat16, in any combination, e.g. fp32 queries and outputs over a half KV cache; Bool (1 byte,
// nonzero = true) and Int32 appear in masks and lengths. Whatever the storage, scores, softmax and
// accumulation are fp32 and a half output is rounded once, at the end (to nearest even; beyond
// Float16's range ±inf). logsumexp is always Float32.
enum class DType { Float32, Bool, Int32, Float16, BFloat16 };

// Where a tensor's memory lives: host memory, or CUDA device memory (data is the CUdeviceptr,
// cast to void*). The functions with a backend option (SdpaOptions, MhaOptions, DeviceOptions) take
// CUDA tensors, the others host tensors only. Every tensor of one call must live on the same
// device; a code outside the enum is refused, naming the tensor.
enum class Device { CPU, CUDA };

// Which kernels run a call of scaled_dot_product_attention or multi_head_attention.
//   Auto    by the tensors' device: CUDA tensors run the CUDA kernels, host tensors the CPU ones.
//   CPU     the CPU kernels (host tensors only).
//   CUDA    the CUDA kernels. Host tensors are copied to the GPU and back around each call: the
//           slow path, for convenience; keep tensors on the device for speed.
//   OpenCL  the same GPU schedules compiled for OpenCL, on the first OpenCL device (host tensors,
//           copied in and out). CI runs them on PoCL, so the GPU code is checked without a GPU.
// The library dispatches by this choice, never by Halide's multi-target (which would pick the GPU
// for every call of a CUDA-enabled build).
enum class Backend { Auto, CPU, CUDA, OpenCL };

constexpr int kMaxRank = 4;

// A non-owning strided view of a row-major tensor, e.g. q of shape [B, H, S, D].
// Strides are in elements, not bytes; strides may be any value the operation documents (the
// innermost dimension of every attention operand must be contiguous). Unused trailing entries are
// ignored.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};

  // A densely packed row-major view (the last dimension has stride 1).
  static TensorView contiguous(float* data, std::initializer_list<int64_t> shape);
  // A view with explicit per-dimension strides (in elements), outermost first.
  static TensorView strided(float* data, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides);
  // The same for other element types (data points at elements of `dtype`).
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides);
  // Number of elements (the product of the shape; 0 if any dimension is 0).
  int64_t numel() const;
};

// What kind of error a Status holds, for an application to react to without parsing messages.
enum class StatusCode {
  Ok,
  InvalidArgument,     // a bad shape, stride, dtype, device or option: the message names it
  Unsupported,         // a valid request this build or backend does not do (yet)
  BackendUnavailable,  // the backend asked for cannot run on this machine (no driver, no device)
  OutOfMemory,         // host or device memory could not be allocated for the call
  KernelFailure,       // a generated kernel or the GPU runtime reported an error
};

// Result of every entry point: ok, or an error with a code and a message that names the argument
// and what was expected.
class Status {
 public:
  static Status ok_status() { return Status(); }
  static Status invalid(std::string message) {
    return error(StatusCode::InvalidArgument, std::move(message));
  }
  static Status error(StatusCode code, std::string message) {
    return Status(code == StatusCode::Ok ? StatusCode::KernelFailure : code, std::move(message));
  }
  bool ok() const { return code_ == StatusCode::Ok; }
  explicit operator bool() const { return ok(); }
  StatusCode code() const { return code_; }
  // Empty when ok().
  const std::string& message() const { return message_; }

 private:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

// The code in words, e.g. "invalid argument", "backend unavailable" or "out of memory".
const char* status_code_name(StatusCode code);

// ok when `backend` can run here: for CUDA a driver (libcuda.so.1) with at least one device, for
// OpenCL an ICD loader (libOpenCL.so.1) with a device; otherwise an error saying what is missing.
// CPU and Auto are always ok. A call on an unavailable backend fails with the same message.
Status backend_available(Backend backend);

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

// Options of the GPU backends (CUDA, OpenCL); CPU calls ignore them (but reject a negative limit).
struct GpuOptions {
  // Most device memory, in bytes, a call's split results may take: the partial outputs of each
  // block of 64 keys (128 for decode) that the split-KV kernels write before combining them, about
  // 8 · B·H · Sq · (Sk / 64) · Dv' bytes, Dv' being Dv rounded up to 128 (decode: 256). A call
  // that needs more runs in chunks of query rows (and, when one tile of 64 rows of every head is
  // still too much, of batches and heads) that fit, with the same results bit for bit. 0 takes
  // kDefaultGpuWorkspaceLimit. A limit below the smallest chunk (64 rows, decode 2, of the query
  // heads of one kv head; multi_head_attention: of every head of one batch) is an InvalidArgument
  // error naming gpu.workspace_limit and the least it needs.
  int64_t workspace_limit = 0;
  // Backend::CUDA: the CUstream (as void*) the call's kernels and device copies are queued on,
  // after the work the caller queued there before; nullptr: the default stream. Read device
  // outputs in that stream's order (the call may return before its last kernel ends); outputs on
  // the host are copied back before it returns. Other backends refuse it (InvalidArgument).
  void* cuda_stream = nullptr;
};
inline constexpr int64_t kDefaultGpuWorkspaceLimit = int64_t{1} << 30;  // 1 GiB

// Where a tensor utility (convert_dtype, apply_rotary_embedding) runs.
struct DeviceOptions {
  // Auto: Device::CUDA tensors on the GPU, host tensors on the CPU. OpenCL: host tensors through
  // the OpenCL kernels. CUDA: host or device tensors on the GPU.
  Backend backend = Backend::Auto;
  GpuOptions gpu;  // cuda_stream (Backend::CUDA): the work is queued there
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

// The kernel f of Nadaraya–Watson regression, of the scaled distance u = ‖q − k‖ / bandwidth.
enum class RegressionKernel {
  Gaussian,      // f = exp(−u²/2): bandwidth is σ
  Boxcar,        // f = 1 if u <= 1, else 0: bandwidth is the radius h
  Epanechnikov,  // f = max(0, 1 − u) (the form the issue names; not the quadratic 1 − u²)
};

// Options of nadaraya_watson_attention.
struct KernelRegressionOptions {
  RegressionKernel kernel = RegressionKernel::Gaussian;
  // σ or h above: finite and > 0, with 1 / bandwidth² finite in fp32 (bandwidth >= ~1e-19).
  float bandwidth = 1.0f;
  // Optional output [B, Sq]: log Σ_j f(q_i, k_j) (natural log). -inf marks a row that no key
  // reaches (boxcar / Epanechnikov with every key farther than the bandwidth, or Sk == 0); its
  // output row is zeros. Leave data == nullptr to skip it.
  TensorView log_weight_sum;
};

// Nadaraya–Watson kernel regression as attention: each query averages the values with weights
// f(q_i, k_j) / Σ_j f(q_i, k_j), f from options.kernel.
//
//   queries [B, Sq, D]      keys [B, Sk, D]      values [B, Sk, Dv]      out [B, Sq, Dv]
//
// D is the dimension of the regression's inputs (1 for the classic scalar demo); Dv that of its
// outputs. View rules, zero sizes, limits and NaN propagation are those of
// scaled_dot_product_attention (rank 3 here; a NaN input makes the rows it reaches NaN). A row
// whose weights are all zero outputs zeros and reports -inf in log_weight_sum. The Gaussian never
// does: its weights are normalized in the log domain, so a query far from every key still gets the
// nearest keys' average (where exp(−u²/2) itself would underflow to 0/0).
Status nadaraya_watson_attention(const TensorView& queries, const TensorView& keys,
                                 const TensorView& values, const TensorView& out,
                                 const KernelRegressionOptions& options = {});

// ---- The other score forms (Luong, Bahdanau). Single-head [B, S, D] tensors; `mask` takes every
// MaskOptions piece with H = 1 (mask tensors [B|1, 1, Sq, Sk], alibi_slopes [1]). View rules, zero
// sizes, NaN propagation and the fully masked row rule (zeros, logsumexp -inf) are those of
// scaled_dot_product_attention.

// Options of the dot-product and bilinear forms.
struct ScoreFormOptions {
  // Optional output [B, Sq]: natural-log logsumexp of each query row's scores.
  TensorView logsumexp;
  // Optional output [B, Sq, Sk]: the attention weights (the alignment matrix), softmax over keys
  // per query row; 0 at hidden keys, all 0 in a row without keys. A second pass over the scores.
  TensorView weights;
  MaskOptions mask;
};

// Plain dot-product attention (Luong's "dot"): softmax(q·kᵀ)·v, no scaling.
//
//   q [B, Sq, D]      k [B, Sk, D]      v [B, Sk, Dv]      out [B, Sq, Dv]
//
// The SDPA kernels with scale 1 (scaled_dot_product_attention with options.scale = 1 on one head).
Status dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const ScoreFormOptions& options = {});

// Bilinear ("general", Luong) attention: score(q, k) = qᵀ·W·k, softmax over keys, weighted sum of
// v.
//
//   q [B, Sq, Dq]      k [B, Sk, Dk]      v [B, Sk, Dv]      weight [Dq, Dk]      out [B, Sq, Dv]
//
// Computes q·W once per query (the generated linear kernel) and runs dot-product attention on it;
// weight may have any strides (a transposed view works as is).
Status bilinear_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& weight, const TensorView& out,
                          const ScoreFormOptions& options = {});

// The parameters of additive attention: score(q, k) = w_aᵀ · tanh(W_q·q + W_k·k + bias).
struct AdditiveWeights {
  TensorView query_weight;  // W_q [A, Dq] (PyTorch nn.Linear layout: y = W·x)
  TensorView key_weight;    // W_k [A, Dk]
  TensorView score_weight;  // w_a [A]
  TensorView bias;          // optional [A], added inside the tanh; leave data == nullptr for none
};

// Additive (Bahdanau) attention: score(q, k) = w_aᵀ · tanh(W_q·q + W_k·k + bias), softmax over
// keys, weighted sum of values.
//
//   q [B, Sq, Dq]      k [B, Sk, Dk]      v [B, Sk, Dv]      out [B, Sq, Dv]
//
// W_q·q (+ bias) and W_k·k are computed once per query and key (the generated linear kernel), not
// per pair; the kernel (additive_f32_{prefill,decode}) then evaluates A tanh terms per pair.
// Weights may have any strides.
Status additive_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const AdditiveWeights& weights, const TensorView& out,
                          const ScoreFormOptions& options = {});

// Static attention: out[b] = softmax(W) · X[b], the softmax over each row of W (over the keys, the
// last axis), computed once for every batch.
//
//   weight W [Sq, Sk]      values X [B, Sk, D]      out [B, Sq, D]
//
// W's rows must be contiguous. -inf in W gives a key weight 0; a row of W that is all -inf has no
// key and outputs zeros. NaN in W makes its row NaN; a NaN or Inf in X reaches every row (even one
// whose weight for that key is 0: static attention has no masks). Sk == 0 gives zeros.
Status static_attention(const TensorView& weight, const TensorView& values, const TensorView& out);

// The factorised form, out[b] = softmax(W₁ · W₂) · X[b]: W₁ [Sq, R], W₂ [R, Sk] (any strides);
// the [Sq, Sk] product is formed once (the generated linear kernel), then as static_attention.
Status factorized_static_attention(const TensorView& w1, const TensorView& w2,
                                   const TensorView& values, const TensorView& out);

// ---- Multi-head attention with projections (nn.MultiheadAttention).

// The projection weights, in PyTorch's layout (row-major float arrays exported from a model work as
// they are; every view may have any strides). E = num_heads · D is the model width, Ekv the width
// of x_kv, Hkv·D the width of K and V (Hkv = num_kv_heads).
//
// Either packed, as nn.MultiheadAttention stores them when Ekv == E:
//   in_proj_weight [E + 2·Hkv·D, E]   rows: W_q, then W_k, then W_v   (PyTorch: [3E, E])
//   in_proj_bias   [E + 2·Hkv·D]      optional
// or separate (kdim/vdim, as PyTorch's q/k/v_proj_weight when Ekv != E):
//   q_proj_weight [E, E]      k_proj_weight [Hkv·D, Ekv]      v_proj_weight [Hkv·D, Ekv]
//   q_bias [E], k_bias [Hkv·D], v_bias [Hkv·D]                optional
// and always
//   out_proj_weight [E, E]    out_proj_bias [E] (optional)
// A projection is y = x·Wᵀ + b (nn.Linear).
struct MhaWeights {
  TensorView in_proj_weight, in_proj_bias;
  TensorView q_proj_weight, k_proj_weight, v_proj_weight;
  TensorView q_bias, k_bias, v_bias;
  TensorView out_proj_weight, out_proj_bias;
};

struct MhaOptions {
  int64_t num_heads = 1;
  int64_t num_kv_heads = 0;    // 0: num_heads. Fewer: grouped-query (1: multi-query) attention
  std::optional<float> scale;  // unset: 1/sqrt(D)
  MaskOptions mask;            // as for scaled_dot_product_attention, with H = num_heads
  // Optional output of the attention weights: [B, H, Sq, Sk] per head, or [B, Sq, Sk] averaged
  // over heads (PyTorch's need_weights with average_attn_weights). Leave data == nullptr to skip.
  TensorView attention_weights;
  // CPU or GPU kernels: see Backend. The GPU kernels do not produce attention_weights.
  Backend backend = Backend::Auto;
  // GPU calls: the bound on their device workspace (see GpuOptions; chunks cover every head).
  GpuOptions gpu;
};

// out = concat_h(softmax(Q_h·K_hᵀ · scale)·V_h)·W_oᵀ + b_o with Q = x_q·W_qᵀ + b_q, K = x_kv·W_kᵀ +
// b_k, V = x_kv·W_vᵀ + b_v split into heads of D features (query head h reads kv head
// h / (H / Hkv)).
//
//   x_q [B, Sq, E]      x_kv [B, Sk, Ekv]      out [B, Sq, E]
//
// Self-attention passes the same tensor as x_q and x_kv. Every weight shape is checked against E,
// Ekv and the head counts. Masks, zero sizes and NaN rules are those of
// scaled_dot_product_attention (a row that sees no key outputs b_o). The whole block runs as one
// generated kernel (mha_f32); asking for attention_weights adds a second kernel and two products.
// Inputs, weights, biases, the additive mask and out may be Float16 or BFloat16 (host tensors):
// they are widened exactly, the block runs in fp32 and out is rounded once; attention_weights
// stays Float32.
Status multi_head_attention(const TensorView& x_q, const TensorView& x_kv,
                            const MhaWeights& weights, const TensorView& out,
                            const MhaOptions& options = {});

// Converts `from` into `to`, between Float32 and Float16 or BFloat16 in either direction (e.g. an
// fp32 KV cache into a half one), with the generated conversion kernels (CPU: all cores; GPU: the
// GPU convert kernels, the same results bit for bit): rounding to nearest even, beyond Float16's
// range ±inf, NaN stays NaN; widening is exact. Same shape, rank 1 to 4, tensors that do not
// overlap, both on one device; on the CPU the innermost dimension is contiguous and other strides
// any, on a GPU any non-negative strides.
Status convert_dtype(const TensorView& from, const TensorView& to,
                     const DeviceOptions& device = {});

// Number of worker threads the kernels use, process-wide (Halide's thread pool). Defaults to the
// HL_NUM_THREADS environment variable if set, else the number of cores. n < 1 restores that
// default. Safe to call at any time, also while other threads run kernels. Results never depend on
// it: each work item reduces in a fixed order on one thread, so outputs are bit-identical for any
// thread count and from run to run (on the same CPU; another ISA variant may round differently).
void set_num_threads(int n);
int num_threads();

// The Halide target of the CPU kernel variant that runs on this machine, e.g.
// "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41" or "arm-64-linux". Every CPU kernel
// of the library is built for the same list of targets, best first, and picks the first one whose
// features this CPU has (Halide's multi-target dispatch); this names that pick, so timings from
// different machines can be compared knowing which code ran.
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
  std::vector<std::string> kernels;  // generated function names
  Status status;
};
std::vector<KernelLibraryInfo> kernel_libraries();

// explain_sdpa says what a whole call runs (kv heads, strides, masks, dtypes); this names only the
// kernel a CPU scaled_dot_product_attention call of this shape with Hkv = H runs now (with any
// mask when `masked`, k and v of dtype `kv`, q and out of dtype `q_out`, rows contiguous):
// built-in, tuned or from a kernel library, e.g. "sdpa_f32_decode", "sdpa_bf16kv_decode" for a
// decode call over a BFloat16 KV cache, "sdpa_bf16_prefill" for an unmasked all-BFloat16 prefill
// on a CPU with AVX-512 BF16, "sdpa_bf16_amx_prefill" for one on a CPU with AMX whose shape its
// tiles take (Dv taken as D; any other half call names the fp32 kernel it runs on widened
// operands). `masked` stands for a mask other than a lone causal one, which an AMX CPU runs on
// sdpa_bf16_amx_prefill as well (where every row sees a key and v is finite).
std::string sdpa_kernel_name(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D,
                             bool masked = false, DType kv = DType::Float32,
                             DType q_out = DType::Float32);
// The generated kernel of a CPU multi_head_attention call, without or with masks.
std::string mha_kernel_name(bool masked = false);

}  // namespace attention
