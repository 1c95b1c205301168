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

namespace attention {

// Element type of a tensor. Only fp32 is generated so far.
enum class DType { Float32 };

// Where a tensor's memory lives. Only host memory is supported so far.
enum class Device { CPU };

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
  // Number of elements (the product of the shape; 0 if any dimension is 0).
  int64_t numel() const;
};

// Result of every entry point: ok, or an error whose message names the argument and what was
// expected.
class Status {
 public:
  static Status ok_status() { return Status(); }
  static Status invalid(std::string message) { return Status(std::move(message)); }
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  // Empty when ok().
  const std::string& message() const;

 private:
  Status() = default;
  explicit Status(std::string message) : error_(std::move(message)) {}
  std::optional<std::string> error_;
};

// Options of scaled_dot_product_attention.
struct SdpaOptions {
  // Multiplies q·kᵀ before the softmax. Unset: 1/sqrt(D). Any finite value, negative included.
  std::optional<float> scale;
  // Optional output [B, H, Sq]: the natural-log logsumexp of each query row's scaled scores
  // (what a backward pass or a split-KV combine needs). Leave data == nullptr to skip it.
  TensorView logsumexp;
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

// Number of worker threads the kernels use, process-wide (Halide's thread pool). Defaults to the
// HL_NUM_THREADS environment variable if set, else the number of cores. n < 1 restores that
// default. Safe to call at any time, also while other threads run kernels. Results never depend on
// it: each work item reduces in a fixed order on one thread, so outputs are bit-identical for any
// thread count and from run to run (on the same CPU; another ISA variant may round differently).
void set_num_threads(int n);
int num_threads();

}  // namespace attention
