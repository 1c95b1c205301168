// RopeOptions checked and turned into kernel arguments: shared by apply_rotary_embedding and the
// attention calls that rotate q and k (SdpaOptions::rope).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "gpu.h"

namespace attention::detail {

// A checked RopeOptions: R, θ_i and each batch's position offset.
struct RopeArgs {
  int64_t rotary_dim = 0;        // R
  std::vector<float> inv_freq;   // θ_i, R/2 of them
  std::vector<int32_t> offsets;  // [B]
  bool interleaved = false;
};

// Checks `options` for rows of B batches of D features whose positions run from offset + first
// to offset + last (first <= last; no rows: first > last), every position in [0, 2^24). Errors
// name `prefix` + the field ("rope." in an attention call).
Status check_rope(const RopeOptions& options, int64_t B, int64_t D, int64_t first, int64_t last,
                  const std::string& prefix, RopeArgs* args);

// apply_rotary_embedding's work on validated views: x rotated into out by `args` (for x's B) on
// `run`'s backend (gpu.h): the CPU kernel, or the GPU one on host tensors (copied in and out) or
// Device::CUDA ones (in place, on `cuda_stream`). Half tensors are widened and rounded around it.
Status rotate(Run run, const TensorView& x, const TensorView& out, const RopeArgs& args,
              void* cuda_stream);

}  // namespace attention::detail
