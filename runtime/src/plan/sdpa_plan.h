// One scaled_dot_product_attention call's plan: what runs, decided once from the checked call's
// arguments by plan_sdpa (a pure function: it allocates no scratch and runs no kernel) and run by
// execute_sdpa (sdpa.cpp), which follows it and decides nothing. A route that runs the rest of the
// call on operands it makes (rotated or widened copies) carries the rest's plan (`then`), planned
// over views of those copies' shapes, strides and dtypes. explain_sdpa prints it, and
// ATTENTION_LOG_PLAN=1 logs every call's plan to stderr.
//
// The candidates, in order (the first that takes the call runs it):
//   nothing        out is empty (B, H or Sq is 0)
//   rope           SdpaOptions::rope with keys: fused into the masked prefill, else q and k rotated
//                  into fp32 scratch and the rest planned over them (then)
//   [key cuts]     CPU: a bottom-right window leaves the keys before its reach; key lengths leave
//                  the keys past the longest (where the diagonals do not follow Sk): k and v are
//                  narrowed and the mask moved onto the kept keys, then the candidates below
//   decode-as-paged, grouped-rows   CPU rewrites (sdpa_call.h; thresholds in plan/thresholds.h)
//   half           a Float16/BFloat16 operand: AMX or AVX-512 BF16 prefill, half-KV decode, or
//                  operands widened to fp32 and the fp32 call planned over them (then)
//   no-keys        Sk = 0: every row fully masked (zeros, logsumexp -inf)
//   gpu            a GPU backend
//   masked, plain  the CPU masked or unmasked kernel (built-in, tuned or from a kernel library)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/sdpa_call.h"
#include "call/small_vector.h"
#include "execute/gpu.h"
#include "kernel_contract.h"
#include "kernels/kernel_table.h"

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
  const char* why = nullptr;  // "window" or "key lengths"
  int64_t begin = 0, end = 0;
};

struct SdpaPlan;
// A nested plan's storage comes back to a per-thread free list when the plan is destroyed, so a
// call whose plan nests (half operands, RoPE not fused) allocates nothing in steady state.
struct RecycledPlanDelete {
  void operator()(SdpaPlan* plan) const;
};
using NestedSdpaPlan = std::unique_ptr<SdpaPlan, RecycledPlanDelete>;
NestedSdpaPlan new_nested_plan();

struct SdpaPlan {
  SdpaPlan() = default;
  SdpaPlan(const SdpaPlan&) = delete;  // options.mask may point into key_lengths
  SdpaPlan& operator=(const SdpaPlan&) = delete;

  Run run = Run::CPU;
  SdpaRoute route = SdpaRoute::Nothing;
  SmallVector<KeyCut, 4> cuts;
  int64_t key_begin = 0, key_end = 0;  // the cuts composed, over the call's keys
  SdpaOptions options;                 // the call's, its mask over the kept keys, inert pieces out
  BatchLengths key_lengths;            // options.mask.key_lengths' storage after a cut

  // The route's parameters.
  DecodePool pool;      // DecodeAsPaged
  GroupedRows grouped;  // GroupedRows
  HalfRoute half = HalfRoute::Widened;
  int64_t amx_causal_offset = 0;                                           // HalfRoute::AmxPrefill
  const KernelSlot<decltype(&sdpa_f32_prefill)>* plain = nullptr;          // Plain, Bf16Prefill
  const KernelSlot<decltype(&sdpa_f32_masked_prefill)>* masked = nullptr;  // Masked
  const HalfKvDecodeRow* half_kv = nullptr;   // HalfRoute::HalfKvDecode, and Gpu over a half cache
  bool rope_fused = false;                    // Rope: the masked prefill rotates q and k itself
  attention_contract::KernelChoice choice{};  // Plain, Masked, HalfKvDecode
  // The kernel that runs, where the route runs one (nullptr where it plans again): a static name,
  // so planning allocates nothing.
  const char* kernel = nullptr;
  // The rest of the call over the operands this route makes (Rope not fused: q and k rotated into
  // dense fp32 copies; HalfRoute::Widened, and HalfRoute::Gpu without a half-KV kernel: every
  // operand as fp32), or null.
  NestedSdpaPlan then;

  // One line: "route kernel=... [cuts ...] [...] [then: <the rest's plan>]".
  std::string describe() const;
};

// Whether a call has a Float16 or BFloat16 operand (q, k, v, out or the additive mask).
bool has_half_operand(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const MaskOptions& m);

// The plan of a call check_sdpa_call passed on backend `run` (or of a part of one such call, on
// operands a route made).
void plan_sdpa(Run run, const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const SdpaOptions& options, SdpaPlan* plan);

// The fp32 view Fp32Input::widen and Fp32Output::stage (and the GPU scratch alike) make of `t`,
// as a stand-in for planning the rest of a call: `t` itself when it is fp32, typed fp32 when it
// holds nothing, else dense fp32 of its shape over t's own pointer (planning reads shapes,
// strides, dtypes and whether a tensor is given, never its elements).
TensorView fp32_copy_view(const TensorView& t);

// Runs `plan` (sdpa.cpp) on q, k, v and out: the call's, or the copies a parent route made for
// the stand-ins it planned over, with `additive_mask` (a widened copy) in place of the plan's
// where given. Decides nothing, checks nothing, and enters no public or checked entry point.
Status execute_sdpa(const SdpaPlan& plan, const TensorView& q, const TensorView& k,
                    const TensorView& v, const TensorView& out,
                    const TensorView* additive_mask = nullptr);

// Whether ATTENTION_LOG_PLAN=1 (read once), and the logging of one plan.
bool log_plans();
void log_plan(const char* entry, const std::string& plan);

// Kernel recording for tests: while a recorder is installed (non-null), every generated kernel a
// call runs appends its name (run_kernel, halide_view.h, and the AMX prefill's tasks). One
// recorder at a time.
void record_kernels(std::vector<std::string>* names);

}  // namespace attention::detail
