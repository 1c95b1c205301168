// The kernel table: for each kernel family and backend, a config row holding the generated
// functions that serve it (prefill/decode × plain/masked), each named. Entry points pick their
// function from a row; tests/kernel_contract_test.cpp checks every slot against the parameters the
// build generated its kernel with (kernel_slots.h).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "additive_f32_decode.h"
#include "additive_f32_prefill.h"
#include "execute/gpu.h"
#include "kernel_contract.h"
#include "kernels/generated_kernels.h"
#include "kernels/kernel_choice.h"
#include "mha_f32.h"
#include "mha_f32_masked.h"
#include "nadaraya_watson_f32_decode.h"
#include "nadaraya_watson_f32_prefill.h"
#include "sdpa_f32_decode.h"
#include "sdpa_f32_masked_decode.h"
#include "sdpa_f32_masked_prefill.h"
#include "sdpa_f32_paged_decode.h"
#include "sdpa_f32_prefill.h"
#include "sdpa_f32_rope_prefill.h"

namespace attention::detail {

template <typename Fn>
struct KernelSlot {
  Fn fn;
  const char* name;
};

// A family whose calls go to its prefill or decode variant by the shape (KernelChoice).
template <typename Fn>
struct TilingPair {
  KernelSlot<Fn> prefill, decode;
  const KernelSlot<Fn>& operator[](const attention_contract::KernelChoice& choice) const {
    return choice.prefill ? prefill : decode;
  }
};

// scaled_dot_product_attention: without masking code, and with every mask.
struct SdpaRow {
  TilingPair<decltype(&sdpa_f32_prefill)> plain;
  TilingPair<decltype(&sdpa_f32_masked_prefill)> masked;
};

// The decode kernels that read a half-precision KV cache as stored (GeneratorParam kv_type), with
// fp32 q and out; scaled_dot_product_attention takes them when the fp32 kernels' rule picks
// decode for the call.
struct HalfKvDecodeRow {
  KernelSlot<decltype(&sdpa_f32_decode)> plain;
  KernelSlot<decltype(&sdpa_f32_masked_decode)> masked;
};
// The row for k and v of `kv` (built-in or from a registered library); nullptr unless it is
// Float16 or BFloat16.
const HalfKvDecodeRow* half_kv_decode_row(DType kv);
// The half-KV decode row a CPU call with k of `kv` and v of `v` runs (the fp32 kernels' rule, with
// its kernels as the decode side), its split in *choice; nullptr when the call widens k and v
// instead (prefill, mixed or fp32 k and v, Sk = 0).
const HalfKvDecodeRow* half_kv_decode(DType kv, DType v, bool masked, int64_t B, int64_t Hkv,
                                      int64_t Sq, int64_t Sk, KernelChoice* choice);

// The GPU decode kernels over a half KV cache (k and v read as raw 16-bit words, fp32 q and out)
// for a `run` on a GPU with k of `kv`, v of `v`, Sq queries and Sk keys: those of the cache's type
// when both are one half type, Sk >= 1 and the fp32 rule picks the decode tiling; nullptr
// otherwise (the call widens k and v instead).
const HalfKvDecodeRow* gpu_half_kv_decode(Run run, DType kv, DType v, int64_t Sq, int64_t Sk);

// The native bf16 prefill (generators/CMakeLists.txt: sdpa_bf16_prefill; the fp32 kernels'
// signature, with bfloat16 q, k and v), when this build has it and this CPU runs it: AVX-512 BF16
// by CPUID, and the rest of its target's features by Halide's check (so a hook that caps the ISA,
// halide_set_custom_can_use_target_features, caps it too). nullptr otherwise.
const KernelSlot<decltype(&sdpa_f32_prefill)>* bf16_prefill_kernel();
// The native bf16 prefill for a CPU call with q, k, v and out of these dtypes, its mask `masked`
// and D, if it serves the call: all BFloat16, no mask, the prefill variant (Sq >
// attention_contract::kDecodeMaxQueries), D even, Sk >= 1. nullptr: the call widens to fp32.
const KernelSlot<decltype(&sdpa_f32_prefill)>* bf16_prefill_for(DType q, DType k, DType v,
                                                                DType out, bool masked, int64_t Sq,
                                                                int64_t Sk, int64_t D);

// paged_attention's kernel on `run` for a cache of `kv` (Float32, Float16 or BFloat16; generator
// paged_sdpa: the masked decode over a paged KV cache, k and v read as stored, raw 16-bit words
// on the GPU).
const KernelSlot<decltype(&sdpa_f32_paged_decode)>& paged_decode_kernel(Run run, DType kv);
// The CPU's whole-split variant of it (whole_keys=true: P·V over every key of each split without
// the per-key predicate, v prefetched a position ahead): the same results, faster for one query
// row per head, with or without GQA, over a [num_blocks, block_size, Hkv, D] pool (paged.cpp
// picks it).
const KernelSlot<decltype(&sdpa_f32_paged_decode)>& paged_whole_decode_kernel(DType kv);

// The masked prefill with rotary embeddings fused in (SdpaOptions::rope; generator masked_sdpa
// with rope=true): the masked kernel's arguments, then the rotation's, then key_split.
const KernelSlot<decltype(&sdpa_f32_rope_prefill)>& rope_prefill_kernel();

// multi_head_attention's whole block (always the prefill tiling).
struct MhaRow {
  KernelSlot<decltype(&mha_f32)> plain;
  KernelSlot<decltype(&mha_f32_masked)> masked;
};

// A kernel generated from a tuned table (autoschedules/<target>.json, cmake/AttentionTuning.cmake):
// it serves the CPU calls of its shape bucket (attention_contract::shape_bucket) when the CPU runs
// the kernels of `target`, the one target it was built for.
template <typename Fn>
struct TunedSlot {
  KernelSlot<Fn> slot;
  const char* bucket;
  const char* target;
};

// The CPU rows of the SDPA and MHA families: the built-in kernels, or in place of some, the
// kernels of generated kernel libraries the application registered (kernel_registry.cpp). Tuned
// kernels serve a family only while its built-in kernels do.
struct CpuRows {
  SdpaRow sdpa;
  MhaRow mha;
  HalfKvDecodeRow f16kv, bf16kv;
  bool builtin_plain = true, builtin_masked = true;
};
const CpuRows& builtin_cpu_rows();  // kernel_table.cpp
// The rows now, after registering the libraries that asked to be at their first use.
const CpuRows& cpu_rows();  // kernel_registry.cpp
// The tiling a registered library's kernel runs with here; nullptr for other names. Lock-free:
// it is read on every call.
const CpuTiling* registered_kernel_tiling(std::string_view kernel);
// The words of a Halide target string (arch, bits, os, features), sorted, without the build-only
// features (user_context, no_runtime, c_plus_plus_name_mangling, asan): equal for two spellings of
// one target.
std::vector<std::string> target_features(std::string_view target);
// The tiling of a kernel made with generator parameters `params` ("key=value ...") from a
// variant's default tiling `base`.
CpuTiling tiling_with_params(const CpuTiling& base, const char* params);

// The kernel that serves a CPU call, and its variant and key split.
template <typename Fn>
struct CpuPick {
  const KernelSlot<Fn>& kernel;
  attention_contract::KernelChoice choice;
};

// The tuned kernel for a call in `bucket` that this machine runs, if the build has one and tuned
// kernels are on (attention::set_tuned_kernels); nullptr otherwise.
const KernelSlot<decltype(&sdpa_f32_prefill)>* tuned_sdpa(std::string_view bucket);
const KernelSlot<decltype(&sdpa_f32_masked_prefill)>* tuned_masked_sdpa(std::string_view bucket);

// The SDPA kernel for a CPU call of B batches of Hkv kv heads: the tuned kernel of its bucket if
// there is one (its own tiling sets the key split), else the row's prefill or decode kernel.
template <typename Fn>
CpuPick<Fn> pick_cpu_kernel(const TilingPair<Fn>& pair, const KernelSlot<Fn>* tuned, int64_t B,
                            int64_t Hkv, int64_t Sq, int64_t Sk) {
  if (tuned != nullptr) return {*tuned, choose_tuned_kernel(tuned->name, B, Hkv, Sq, Sk)};
  const attention_contract::KernelChoice choice =
      choose_kernel(pair.prefill.name, pair.decode.name, B, Hkv, Sq, Sk);
  return {pair[choice], choice};
}
// attention_contract::shape_bucket(Sq, Sk, D, masked) made once per bucket, not per call.
const char* shape_bucket_name(int64_t Sq, int64_t Sk, int64_t D, bool masked);

inline CpuPick<decltype(&sdpa_f32_prefill)> pick_sdpa(const CpuRows& rows, int64_t B, int64_t Hkv,
                                                      int64_t Sq, int64_t Sk, int64_t D) {
  const auto* tuned =
      rows.builtin_plain ? tuned_sdpa(shape_bucket_name(Sq, Sk, D, false)) : nullptr;
  return pick_cpu_kernel(rows.sdpa.plain, tuned, B, Hkv, Sq, Sk);
}
inline CpuPick<decltype(&sdpa_f32_masked_prefill)> pick_masked_sdpa(const CpuRows& rows, int64_t B,
                                                                    int64_t Hkv, int64_t Sq,
                                                                    int64_t Sk, int64_t D) {
  const auto* tuned =
      rows.builtin_masked ? tuned_masked_sdpa(shape_bucket_name(Sq, Sk, D, true)) : nullptr;
  return pick_cpu_kernel(rows.sdpa.masked, tuned, B, Hkv, Sq, Sk);
}

void set_tuned_enabled(bool enabled);
bool tuned_enabled_now();

// "cpu", "cuda" or "opencl".
const char* backend_name(Run run);

// `run` must be a backend this build has kernels for (resolve_backend checks).
const SdpaRow& sdpa_row(Run run);
// The GPU SDPA kernel, unmasked or masked, that a call of Sq query rows on `run` takes.
const char* gpu_sdpa_kernel_name(Run run, bool masked, int64_t Sq);
const MhaRow& mha_row(Run run);
// CPU only.
const TilingPair<decltype(&additive_f32_prefill)>& additive_row();
const TilingPair<decltype(&nadaraya_watson_f32_prefill)>& nadaraya_watson_row();

}  // namespace attention::detail
