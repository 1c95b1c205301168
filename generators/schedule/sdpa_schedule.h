// Where an SDPA-family generator's schedule branches on its target, once: the tiling it uses (which
// the algorithm's mask blocks follow) and the CPU or GPU schedule built from it.
#pragma once

#include <array>
#include <utility>

#include "Halide.h"
#include "algorithm/masks.h"
#include "algorithm/sdpa.h"
#include "schedule/cpu.h"
#include "schedule/cuda.h"

namespace attention_gen {

struct SdpaPlan {
  bool gpu = false;
  bool wide_queries = true;  // prefill; otherwise decode
  PagedItems paged;          // CPU decode over a paged cache (schedule_decode_stages)
  CpuTiling cpu{};           // when !gpu
  GpuTiling gpu_tiling{};    // when gpu
};

// The tiling GeneratorParams (named in kernel_contract.h; 0 takes the target's default), a member
// of each SDPA-family generator: the tuner's search space.
class TilingParams {
 public:
  std::array<int, attention_contract::kCpuTilingParamCount> cpu_values() const {
    return values<attention_contract::kCpuTilingParamCount>(cpu_);
  }
  std::array<int, attention_contract::kGpuTilingParamCount> gpu_values() const {
    return values<attention_contract::kGpuTilingParamCount>(gpu_);
  }

 private:
  using Param = Halide::GeneratorParam<int>;
  template <size_t N>
  static std::array<int, N> values(const std::array<Param, N>& params) {
    std::array<int, N> result{};
    for (size_t i = 0; i < N; ++i) result[i] = params[i].value();
    return result;
  }
  // Built in place (no copies: a GeneratorParam registers its own address with the generator).
  template <size_t... I>
  static std::array<Param, sizeof...(I)> cpu_params(std::index_sequence<I...>) {
    return {Param(attention_contract::kCpuTilingParams[I].name, 0)...};
  }
  template <size_t... I>
  static std::array<Param, sizeof...(I)> gpu_params(std::index_sequence<I...>) {
    return {Param(attention_contract::kGpuTilingParams[I].name, 0)...};
  }
  std::array<Param, attention_contract::kCpuTilingParamCount> cpu_ =
      cpu_params(std::make_index_sequence<attention_contract::kCpuTilingParamCount>());
  std::array<Param, attention_contract::kGpuTilingParamCount> gpu_ =
      gpu_params(std::make_index_sequence<attention_contract::kGpuTilingParamCount>());
};

// `tiling_target` picks the CPU tiling (the generators' tests-only tiling_as; normally `target`).
// A tiling the schedule cannot honour stops the generator with a message naming the parameter.
// bf16_pairs: the native bf16 prefill's tiling (attention_contract::cpu_pair_tiling).
inline SdpaPlan sdpa_plan(const Halide::Target& target, const Halide::Target& tiling_target,
                          bool wide_queries, const TilingParams& params, bool bf16_pairs = false) {
  SdpaPlan p;
  p.gpu = target.has_gpu_feature();
  p.wide_queries = wide_queries;
  std::string error;
  if (p.gpu) {
    p.gpu_tiling =
        attention_contract::with_overrides(gpu_tiling(target, wide_queries), params.gpu_values());
    error = attention_contract::gpu_tiling_error(p.gpu_tiling);
  } else {
    const CpuTiling base =
        bf16_pairs ? attention_contract::cpu_pair_tiling(tiling_target.natural_vector_size<float>())
                   : cpu_tiling(tiling_target, wide_queries);
    p.cpu = attention_contract::with_overrides(base, params.cpu_values());
    error = attention_contract::cpu_tiling_error(p.cpu, vector_registers(tiling_target),
                                                 wide_queries, bf16_pairs);
  }
  _halide_user_assert(error.empty())
      << "tiling for " << tiling_target.to_string() << " (" << (wide_queries ? "prefill" : "decode")
      << "): " << error << "\n";
  return p;
}

// The masks skip keys in the blocks and query groups the schedule's tiles walk.
inline void set_mask_blocks(MaskInputs& mask, const SdpaPlan& p) {
  mask.query_group = p.gpu ? p.gpu_tiling.query_tile : p.cpu.query_tile;
  mask.key_block = p.gpu ? p.gpu_tiling.key_block : p.cpu.mask_key_block;
  mask.score_keys = p.gpu ? 1 : std::max(p.cpu.score_keys, 1);
}

// The GPU schedule stages and loads q and k in whole blocks of features (SdpaInputs::
// feature_block; dot-product scores only, whose padding adds exact zeros).
inline void set_feature_blocks(SdpaInputs& in, const SdpaPlan& p) {
  if (p.gpu && !in.score_term) in.feature_block = p.gpu_tiling.feature_block;
}

inline void schedule_sdpa(SdpaFuncs& f, const SdpaPlan& p) {
  if (p.gpu) {
    schedule_sdpa_gpu(f, p.gpu_tiling);
  } else {
    schedule_sdpa_cpu(f, p.cpu, p.wide_queries, p.paged);
  }
}

}  // namespace attention_gen
