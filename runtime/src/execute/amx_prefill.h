// The AMX bf16 prefill (generators/amx_sdpa_generator.cpp): bfloat16 q, k, v and out, unmasked
// or causal, on CPUs with AMX-BF16; one head per kernel call over K and V packed once per kv head.
#pragma once

#include <cstdint>

#include "attention/attention.h"

namespace attention::detail {

// The kernel's name, for plans and the kernel recorder.
const char* amx_prefill_kernel_name();

// Whether the AMX kernel serves a bf16 prefill of these sizes here: an x86 build, a CPU with
// AMX-BF16 whose Linux granted the tile state (asked once per process), ATTENTION_CPU_AMX not "0",
// Halide's feature hook allowing Sapphire Rapids' features, D a multiple of 32, Dv of 16,
// Sq >= 32 (one work item of rows) and 1 <= Sk <= 8192 (a work item's scratch about L2's size).
bool amx_prefill_serves(int64_t Sq, int64_t Sk, int64_t D, int64_t Dv);

// Whether it serves this CPU call, and if so the causal offset to run it with (row i sees keys
// j <= i + offset; kAmxNoCausal for none): q, k, v and out BFloat16 with dense rows, the native
// bf16 prefill allowed (bf16_prefill_for), amx_prefill_serves, and a mask that is empty or a
// lone causal one under which every row sees a key (top-left; bottom-right with Sq <= Sk) and v
// holds no inf or NaN (a hidden key's weight is 0, and AMX's 0 · inf would be NaN).
bool amx_prefill_takes(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const MaskOptions& mask, int64_t* causal_offset);
inline constexpr int64_t kAmxNoCausal = int64_t{1} << 30;

// Runs it: q, k, v and out (BFloat16 [B, H, Sq, Dv], rounded once by the kernel) as
// amx_prefill_takes took them and lse fp32 [B, H, Sq], at any strides. K and V are packed once per
// kv head, in groups of heads of about 1 MiB per thread, into scratch from halide_malloc's
// per-thread cache; then the group's kernel calls (64 query rows under a causal mask, longer
// without) run in parallel.
Status run_amx_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const TensorView& lse, float scale,
                       int64_t causal_offset);

}  // namespace attention::detail
