// MaskOptions for the masked kernels: validation, and the kernel arguments built from them. Shared
// by every entry point that runs a kernel of the masked_sdpa generator.
#pragma once

#include <cstdint>
#include <tuple>

#include "attention/attention.h"
#include "call/small_vector.h"
#include "call/validate.h"
#include "kernels/halide_view.h"

namespace attention::detail {

// Per-batch lengths and per-head slopes, inline for the batch and head counts of common calls.
using BatchLengths = SmallVector<int32_t, 64>;
using HeadSlopes = SmallVector<float, 128>;

// Every field of `m` against a call of B batches, H query heads, Sq queries and Sk keys; the error
// names the field (mask.key_lengths[1] = 9 is outside [0, Sk=8]). The mask tensors must be on
// `device` (the call's); lengths and slopes are read here, so they are host tensors in every call.
// The additive mask is Float32, or also Float16/BFloat16 where the caller widens it
// (half_additive).
Status check_mask(const MaskOptions& m, int64_t B, int64_t H, int64_t Sq, int64_t Sk,
                  Device device = Device::CPU, bool half_additive = false);

// A validated `m` without the pieces that hide no key of a call of Sq queries and Sk >= 1 keys:
// a window that reaches key 0 from every row's diagonal; causal (with window_forward) where row
// 0's diagonal already reaches the last key, unless ALiBi would then measure from another
// diagonal; key lengths that are all Sk and query lengths that are all Sq. Every row sees the same
// keys with the same scores, so the plainer kernel and the routes that take plain masks apply: a
// decode call's BottomRight causal, a server's full key lengths, a sliding window longer than the
// cache.
MaskOptions without_inert_pieces(const MaskOptions& m, int64_t B, int64_t Sq, int64_t Sk);

// A validated `m` of a call of B batches and Sk keys, for the same queries over keys
// [begin, end): key lengths shifted and clamped into `lengths` (which the result points to), mask
// tensors cut alike. The caller keeps the diagonals right (bottom-right ones follow the keys' end).
MaskOptions mask_over_keys(const MaskOptions& m, int64_t B, int64_t Sk, int64_t begin, int64_t end,
                           BatchLengths& lengths);

// Unsupported, "<field>: <reason>", when `m` holds a mask tensor (bool_mask or additive_mask): for
// entry points whose layout gives those tensors no shape.
Status refuse_mask_tensors(const MaskOptions& m, const char* reason);

// Appends the mask's input views (for the checks that outputs overlap no input).
void append_mask_views(const MaskOptions& m, NamedViews& views);

// The B lengths of a validated Int32 lengths view (key_lengths, query_lengths), or `full` for each
// batch when it is absent.
BatchLengths lengths_or(const TensorView& lengths, int64_t B, int64_t full);

// ALiBi's slope per query head of a validated `m` with H heads: alibi_slopes, or the standard
// geometric slopes when it is empty; zeros without ALiBi. A call over some of the heads passes
// its share of these (the standard slopes depend on H).
HeadSlopes slopes_for(const MaskOptions& m, int64_t H);

// The masked kernels' mask arguments for a validated `m`: neutral values for absent pieces,
// lengths and slopes copied into owned buffers. Lives until the kernel call returns.
class MaskArgs {
 public:
  // `row`, `rows`: a kernel call that computes the call's query rows [row, row + rows) as its rows
  // [0, rows) (a chunk of a GPU call); rows < 0: all Sq rows.
  MaskArgs(const MaskOptions& m, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t row = 0,
           int64_t rows = -1);
  MaskArgs(const MaskArgs&) = delete;
  MaskArgs& operator=(const MaskArgs&) = delete;

  halide_buffer_t* key_lengths() { return key_lengths_view_.get(); }
  halide_buffer_t* query_lengths() { return query_lengths_view_.get(); }
  halide_buffer_t* bool_mask() { return bool_mask_view_.get(); }
  halide_buffer_t* additive_mask() { return additive_mask_view_.get(); }
  halide_buffer_t* alibi_slopes() { return slopes_view_.get(); }
  // Every masked kernel's mask arguments, in the order the generators declare them
  // (generators/generator_inputs.h, MaskArguments): written out here only, and spliced into a
  // call's arguments with run_kernel_parts / GpuCall::run_parts.
  using Arguments = std::tuple<halide_buffer_t*, halide_buffer_t*, int32_t, int32_t, int32_t, bool,
                               halide_buffer_t*, halide_buffer_t*, halide_buffer_t*, float, bool>;
  Arguments arguments(bool values_finite) {
    return {key_lengths(), query_lengths(), diag_offset,    band_back, band_forward, has_bias,
            bool_mask(),   additive_mask(), alibi_slopes(), softcap,   values_finite};
  }

  // The two mask tensors as given (device memory in a CUDA call), or the neutral host ones.
  HalideView& bool_mask_view() { return bool_mask_view_; }
  HalideView& additive_mask_view() { return additive_mask_view_; }

  int32_t diag_offset;
  int32_t band_back;
  int32_t band_forward;
  bool has_bias;
  float softcap;

 private:
  BatchLengths key_lengths_, query_lengths_;
  HeadSlopes slopes_;
  HalideView key_lengths_view_, query_lengths_view_, bool_mask_view_, additive_mask_view_,
      slopes_view_;
};

}  // namespace attention::detail
