// One scaled_dot_product_attention call's plan: what runs, decided once from the checked call's
// arguments by plan_sdpa (a pure function: it allocates no scratch and runs no kernel) and run by
// run_checked_sdpa (sdpa.cpp), which follows it and decides nothing. explain_sdpa prints it, and
// ATTENTION_LOG_PLAN=1 logs every call's plan to stderr.
//
// The candidates, in order (the first that takes the call runs it):
//   nothing        out is empty (B, H or Sq is 0)
//   rope           SdpaOptions::rope with keys: fused into the masked prefill, else q and k rotated
//                  into scratch and the rest planned again
//   [key cuts]     CPU: a bottom-right window leaves the keys before its reach; key lengths leave
//                  the keys past the longest (where the diagonals do not follow Sk): k and v are
//                  narrowed and the mask moved onto the kept keys, then the candidates below
//   decode-as-paged, grouped-rows   CPU rewrites (sdpa_call.h; thresholds in plan/thresholds.h)
//   half           a Float16/BFloat16 operand: AMX or AVX-512 BF16 prefill, half-KV decode, or
//                  operands widened to fp32 and the fp32 call planned again
//   no-keys        Sk = 0: every row fully masked (zeros, logsumexp -inf)
//   gpu            a GPU backend
//   masked, plain  the CPU masked or unmasked kernel (built-in, tuned or from a kernel library)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "gpu.h"
#include "kernel_contract.h"
#include "kernel_table.h"
#include "sdpa_call.h"

namespace attention::detail {

enum class SdpaRoute {
  Nothing,
  Rope,
  DecodeAsPaged,
  GroupedRows,
  Half,
  NoKeys,
  Gpu,
  Masked,
  Plain
};
const char* route_name(SdpaRoute route);

// How a half-precision call runs (SdpaRoute::Half on the CPU).
enum class HalfRoute { AmxPrefill, Bf16Prefill, HalfKvDecode, Widened, Gpu };

// k and v narrowed to keys [begin, end) of the keys left before it.
struct KeyCut {
  const char* why;  // "window" or "key lengths"
  int64_t begin, end;
};

struct SdpaPlan {
  SdpaPlan() = default;
  SdpaPlan(const SdpaPlan&) = delete;  // options.mask may point into key_lengths
  SdpaPlan& operator=(const SdpaPlan&) = delete;

  Run run = Run::CPU;
  SdpaRoute route = SdpaRoute::Nothing;
  std::vector<KeyCut> cuts;
  int64_t key_begin = 0, key_end = 0;  // the cuts composed, over the call's keys
  SdpaOptions options;                 // the call's, its mask over the kept keys, inert pieces out
  std::vector<int32_t> key_lengths;    // options.mask.key_lengths' storage after a cut

  // The route's parameters.
  DecodePool pool;      // DecodeAsPaged
  GroupedRows grouped;  // GroupedRows
  HalfRoute half = HalfRoute::Widened;
  int64_t amx_causal_offset = 0;                                           // HalfRoute::AmxPrefill
  const KernelSlot<decltype(&sdpa_f32_prefill)>* plain = nullptr;          // Plain, Bf16Prefill
  const KernelSlot<decltype(&sdpa_f32_masked_prefill)>* masked = nullptr;  // Masked
  const HalfKvDecodeRow* half_kv = nullptr;   // HalfRoute::HalfKvDecode
  attention_contract::KernelChoice choice{};  // Plain, Masked, HalfKvDecode
  // The kernel that runs, where the route runs one (nullptr where it plans again): a static name,
  // so planning allocates nothing.
  const char* kernel = nullptr;

  // One line: "route kernel=... [cuts ...] [...]".
  std::string describe() const;
};

// Whether a call has a Float16 or BFloat16 operand (q, k, v, out or the additive mask).
bool has_half_operand(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const MaskOptions& m);

// The plan of a call check_sdpa_call passed on backend `run`.
void plan_sdpa(Run run, const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const SdpaOptions& options, SdpaPlan* plan);

// Whether ATTENTION_LOG_PLAN=1 (read once), and the logging of one plan.
bool log_plans();
void log_plan(const char* entry, const std::string& plan);

// Kernel recording for tests: while a recorder is installed (non-null), every generated kernel a
// call runs appends its name (run_kernel, halide_view.h, and the AMX prefill's tasks). One
// recorder at a time.
void record_kernels(std::vector<std::string>* names);

}  // namespace attention::detail
