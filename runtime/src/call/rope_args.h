// RopeOptions checked and turned into kernel arguments: shared by apply_rotary_embedding and the
// attention calls that rotate q and k (SdpaOptions::rope).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "execute/gpu.h"

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

// SdpaOptions::rope of an SDPA call: the query rows sit at the last Sq of the Sk key positions.
inline Status check_call_rope(const RopeOptions& rope, const TensorView& q, const TensorView& k,
                              RopeArgs* args) {
  const int64_t Sq = q.shape[2], Sk = k.shape[2];
  // Without keys the rows are written as zeros and nothing is rotated.
  const int64_t first = Sk == 0 ? 0 : (Sk - Sq < 0 ? Sk - Sq : 0);
  return check_rope(rope, q.shape[0], q.shape[3], first, Sk - 1, "rope.", args);
}

// apply_rotary_embedding's work on validated views: x rotated into out by `args` (for x's B) on
// `run`'s backend (gpu.h): the CPU kernel, or the GPU one on host tensors (copied in and out) or
// Device::CUDA ones (in place, on `cuda_stream`). Half tensors are widened and rounded around it.
Status rotate(Run run, const TensorView& x, const TensorView& out, const RopeArgs& args,
              void* cuda_stream);

}  // namespace attention::detail
