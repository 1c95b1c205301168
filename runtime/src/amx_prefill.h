// The AMX bf16 prefill (generators/amx_sdpa_generator.cpp): unmasked bfloat16 q, k, v on CPUs with
// AMX-BF16, one head per kernel call over K and V packed once per kv head.
#pragma once

#include <cstdint>

#include "attention/attention.h"

namespace attention::detail {

// The kernel's name, for sdpa_kernel_name.
const char* amx_prefill_kernel_name();

// Whether the AMX kernel serves an unmasked bf16 prefill of these sizes here: an x86 build, a CPU
// with AMX-BF16 whose Linux granted the tile state (asked once per process), ATTENTION_CPU_AMX not
// "0", D a multiple of 32, Dv a multiple of 16, Sq >= 32 (one work item of rows) and
// 1 <= Sk <= kAmxMaxKeys (a work item's scores, 32 x Sk fp32, stay within L2).
bool amx_prefill_serves(int64_t Sq, int64_t Sk, int64_t D, int64_t Dv);

// Runs it: q, k, v bfloat16 with dense rows ([B, H, Sq, D], [B, Hkv, Sk, D], [B, Hkv, Sk, Dv]),
// out32 fp32 [B, H, Sq, Dv] and lse fp32 [B, H, Sq], any strides between rows. Allocates the packed
// K and V of one kv head at a time.
Status run_amx_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out32, const TensorView& lse, float scale);

}  // namespace attention::detail
