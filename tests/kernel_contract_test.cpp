// The contract between generators and runtime (generators/contract/kernel_contract.h): every slot
// of the runtime's kernel table holds a kernel the build generated for that role, and the runtime's
// split rules fit the tilings the kernels that run here were scheduled with (as the generated
// kernel_info kernel reports them).
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_slots.h"

namespace attention_test {
namespace {

using attention::detail::build_param;
using attention::detail::find_kernel_build;
using attention_contract::CpuTiling;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(KernelContract, EverySlotHoldsAKernelBuiltForItsRole) {
  const auto slots = attention::detail::kernel_slots();
  ASSERT_FALSE(slots.empty());
  for (const auto& slot : slots) {
    SCOPED_TRACE(slot.family + "/" + slot.backend + "/" + slot.role + ": " + slot.kernel);
    const attention::detail::KernelBuild* build = find_kernel_build(slot.kernel);
    ASSERT_NE(build, nullptr) << "no kernel of that name in the build";
    const std::string generator = build->generator;
    const bool masked_role = slot.role.rfind("masked", 0) == 0;
    // The half-KV families read k and v as float16 / bfloat16, the native bf16 prefill q too;
    // every other kernel takes fp32.
    const bool bf16 = slot.family == "sdpa_bf16";
    const auto ends_with = [&](const std::string& suffix) {
      return slot.family.size() >= suffix.size() &&
             slot.family.compare(slot.family.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const std::string kv_type = ends_with("_f16kv")            ? "float16"
                                : ends_with("_bf16kv") || bf16 ? "bfloat16"
                                                               : "";
    EXPECT_EQ(build_param(*build, "kv_type"), kv_type);
    EXPECT_EQ(build_param(*build, "q_type"), bf16 ? "bfloat16" : "");
    // Only the sdpa_rope family rotates q and k.
    EXPECT_EQ(build_param(*build, "rope"), slot.family == "sdpa_rope" ? "true" : "");
    // Only the sdpa_paged_whole families read whole splits.
    EXPECT_EQ(build_param(*build, "whole_keys"),
              slot.family.rfind("sdpa_paged_whole", 0) == 0 ? "true" : "");
    if (slot.family.rfind("sdpa_paged", 0) == 0) {
      EXPECT_EQ(generator, "paged_sdpa");
    } else if (slot.family == "sdpa_rope") {
      EXPECT_EQ(generator, "masked_sdpa");
    } else if (slot.family == "sdpa" || !kv_type.empty()) {
      EXPECT_EQ(generator, masked_role ? "masked_sdpa" : "sdpa");
    } else if (slot.family == "additive") {
      EXPECT_EQ(generator, "masked_sdpa");
      EXPECT_EQ(build_param(*build, "score"), "additive");
    } else if (slot.family == "nadaraya_watson") {
      EXPECT_EQ(generator, "kernel_regression");
    } else if (slot.family == "mha") {
      EXPECT_EQ(generator, "mha");
      EXPECT_EQ(build_param(*build, "masked"), masked_role ? "true" : "false");
    } else {
      ADD_FAILURE() << "unknown family";
    }
    if (slot.family != "additive") {
      EXPECT_NE(build_param(*build, "score"), "additive");
    }
    EXPECT_NE(build_param(*build, "output"), "weights");
    // Prefill is the SDPA generators' default tiling; MHA has no other.
    std::string tiling = build_param(*build, "query_tiling");
    if (tiling.empty()) tiling = "prefill";
    const bool decode_role = contains(slot.role, "decode");
    EXPECT_EQ(tiling, decode_role ? "decode" : "prefill");
    EXPECT_EQ(build_param(*build, "tiling_as"), "");
    const std::string targets = build->targets;
    EXPECT_EQ(contains(targets, "-cuda"), slot.backend == "cuda") << targets;
    EXPECT_EQ(contains(targets, "-opencl"), slot.backend == "opencl") << targets;
  }
}

// The tiling the contract gives the ISA of the variant that runs, from its target string.
CpuTiling expected_tiling(const std::string& target, bool wide_queries) {
  if (target.rfind("arm-64", 0) == 0) return attention_contract::cpu_tiling(4, 32, wide_queries);
  if (contains(target, "avx512")) return attention_contract::cpu_tiling(16, 32, wide_queries);
  if (contains(target, "avx")) return attention_contract::cpu_tiling(8, 16, wide_queries);
  return attention_contract::cpu_tiling(4, 16, wide_queries);
}

TEST(KernelContract, GeneratedTilingsAreTheContractsForThisIsa) {
  const auto& info = attention::detail::cpu_kernel_info();
  EXPECT_EQ(info.target, attention::cpu_kernel_target());
  EXPECT_EQ(info.prefill, expected_tiling(info.target, true)) << info.target;
  EXPECT_EQ(info.decode, expected_tiling(info.target, false)) << info.target;
}

// The (prefill, decode) kernel names of every row with both, per backend.
struct Pair {
  std::string family, backend, prefill, decode;
};
std::vector<Pair> tiling_pairs() {
  std::vector<Pair> pairs;
  const auto slots = attention::detail::kernel_slots();
  for (const auto& slot : slots) {
    if (slot.role != "prefill" && slot.role != "masked_prefill") continue;
    const std::string decode_role = slot.role == "prefill" ? "decode" : "masked_decode";
    for (const auto& other : slots) {
      if (other.family == slot.family && other.backend == slot.backend &&
          other.role == decode_role) {
        pairs.push_back({slot.family, slot.backend, slot.kernel, other.kernel});
      }
    }
  }
  return pairs;
}

TEST(KernelContract, CpuSplitsHoldWholeBlocksOfTheTilingThatRuns) {
  int checked = 0;
  for (const Pair& pair : tiling_pairs()) {
    if (pair.backend != "cpu") continue;
    SCOPED_TRACE(pair.prefill + " / " + pair.decode);
    ++checked;
    const CpuTiling& prefill = attention::detail::kernel_cpu_tiling(pair.prefill);
    ASSERT_GT(prefill.score_keys, 0);
    EXPECT_EQ(attention_contract::cpu_tiling_error(prefill, 32, true), "");
    for (int64_t Sk = 1; Sk <= 5000; ++Sk) {
      const auto choice = attention::detail::choose_kernel(pair.prefill, pair.decode, 1, 8, 64, Sk);
      ASSERT_TRUE(choice.prefill);
      ASSERT_EQ(choice.key_split % prefill.score_keys, 0) << "Sk " << Sk;
      // No split is empty: the last one starts before Sk.
      const int64_t splits = (Sk + choice.key_split - 1) / choice.key_split;
      ASSERT_LT((splits - 1) * choice.key_split, Sk) << "Sk " << Sk;
      ASSERT_LE(choice.key_split, prefill.split_keys + prefill.score_keys);
    }
    const CpuTiling& decode = attention::detail::kernel_cpu_tiling(pair.decode);
    ASSERT_GT(decode.mask_key_block, 0);
    for (int64_t BH : {1, 3, 8, 64, 256}) {
      for (int64_t Sk : {1, 63, 64, 65, 511, 4096, 100003}) {
        const auto choice =
            attention::detail::choose_kernel(pair.prefill, pair.decode, 1, BH, 1, Sk);
        ASSERT_FALSE(choice.prefill);
        ASSERT_EQ(choice.key_split % decode.mask_key_block, 0) << "BH " << BH << " Sk " << Sk;
        ASSERT_EQ(choice.key_split % decode.vector, 0) << "BH " << BH << " Sk " << Sk;
      }
    }
  }
  EXPECT_EQ(checked, 4);  // sdpa, masked sdpa, additive, Nadaraya–Watson
}

// decode_key_split with fewer work items asked for (the paged CPU call asks for a few per thread):
// splits only get longer, stay whole multiples of kSplitKeyMultiple with none empty, and with no
// more items asked for than (batch, kv head) pairs, each sequence is one split.
TEST(KernelContract, DecodeSplitsForFewerWorkItemsAreLonger) {
  namespace contract = attention_contract;
  const CpuTiling decode = contract::cpu_tiling(16, 32, false);
  for (int64_t items : {1, 3, 8, 64, 256}) {
    for (int64_t Sk : {1, 63, 64, 65, 511, 4096, 100003}) {
      int64_t previous = contract::decode_key_split(items, 1, Sk, decode);
      EXPECT_EQ(previous,
                contract::decode_key_split(items, 1, Sk, decode, contract::kDecodeWorkItems));
      for (int64_t work_items : {32, 8, 2, 1}) {
        SCOPED_TRACE("items " + std::to_string(items) + " Sk " + std::to_string(Sk) +
                     " work_items " + std::to_string(work_items));
        const int64_t split = contract::decode_key_split(items, 1, Sk, decode, work_items);
        ASSERT_EQ(split % contract::kSplitKeyMultiple, 0);
        ASSERT_GE(split, previous);
        const int64_t splits = (Sk + split - 1) / split;
        ASSERT_LT((splits - 1) * split, Sk);  // the last split starts before Sk
        if (work_items <= items) {
          ASSERT_EQ(splits, 1);
        }
        previous = split;
      }
    }
  }
}

// The native bf16 prefill (x86 builds): its tiling is the pair tiling the generator scheduled
// (attention_contract::cpu_pair_tiling), and every split holds whole key blocks, hence whole
// pairs of keys.
TEST(KernelContract, Bf16PrefillSplitsHoldWholeKeyBlocks) {
  int checked = 0;
  for (const auto& slot : attention::detail::kernel_slots()) {
    if (slot.family != "sdpa_bf16") continue;
    ++checked;
    const CpuTiling& tiling = attention::detail::kernel_cpu_tiling(slot.kernel);
    EXPECT_EQ(tiling, attention_contract::cpu_pair_tiling(16));
    EXPECT_EQ(attention_contract::cpu_tiling_error(tiling, 32, true, /*bf16_pairs=*/true), "");
    for (int64_t Sk = 1; Sk <= 5000; ++Sk) {
      const int32_t split = attention::detail::prefill_key_split(slot.kernel, Sk);
      ASSERT_EQ(split % tiling.score_keys, 0) << "Sk " << Sk;
      ASSERT_LT((Sk + split - 1) / split * split - split, Sk) << "Sk " << Sk;
    }
  }
#if defined(__x86_64__)
  EXPECT_EQ(checked, 1);
#else
  EXPECT_EQ(checked, 0);
#endif
}

TEST(KernelContract, GpuSplitsAreTheTilesOfEachKernel) {
  for (const Pair& pair : tiling_pairs()) {
    if (pair.backend == "cpu") continue;
    SCOPED_TRACE(pair.prefill + " / " + pair.decode);
    for (int64_t Sq : {1, 2, 3, 100}) {
      const auto choice = attention::detail::choose_gpu_kernel(pair.prefill, pair.decode, Sq);
      ASSERT_EQ(choice.prefill, Sq > attention_contract::kDecodeMaxQueries);
      const auto& tiling =
          attention::detail::kernel_gpu_tiling(choice.prefill ? pair.prefill : pair.decode);
      // The register tiles have exactly split_keys keys; masked splits hold whole key blocks.
      ASSERT_EQ(choice.key_split, tiling.split_keys);
      ASSERT_EQ(choice.key_split % tiling.key_block, 0);
      ASSERT_EQ(choice.key_split % attention_contract::kGpuSplitKeyMultiple, 0);
      ASSERT_LE(attention_contract::gpu_shared_bytes(tiling), attention_contract::kGpuSharedBudget);
      ASSERT_EQ(attention_contract::gpu_tiling_error(tiling), "");
    }
  }
}

TEST(KernelContract, TilingParametersAreValidated) {
  using attention_contract::cpu_tiling_error;
  using attention_contract::with_overrides;
  // Every default tiling is one the schedule honours.
  for (bool wide : {true, false}) {
    for (auto [vector, registers] : {std::pair{16, 32}, {8, 16}, {4, 16}, {4, 32}}) {
      EXPECT_EQ(cpu_tiling_error(attention_contract::cpu_tiling(vector, registers, wide), registers,
                                 wide),
                "");
    }
    EXPECT_EQ(attention_contract::gpu_tiling_error(
                  attention_contract::gpu_tiling(attention_contract::GpuApi::CUDA, wide)),
              "");
  }
  const CpuTiling avx512 = attention_contract::cpu_tiling(16, 32, true);
  std::array<int, attention_contract::kCpuTilingParamCount> values{};
  values[0] = 20;  // score_queries: not whole vectors
  EXPECT_TRUE(
      contains(cpu_tiling_error(with_overrides(avx512, values), 32, true), "score_queries=20"));
  values = {};
  values[1] = 12;  // score_keys: 3 × 12 accumulators do not fit 32 registers
  EXPECT_TRUE(
      contains(cpu_tiling_error(with_overrides(avx512, values), 32, true), "score_keys=12"));
  values = {};
  values[5] = 40;  // query_tile: not whole 48-query score blocks
  EXPECT_TRUE(
      contains(cpu_tiling_error(with_overrides(avx512, values), 32, true), "query_tile=40"));
  values = {};
  values[1] = 4;  // a smaller block is fine, and lands in the field it names
  const CpuTiling smaller = with_overrides(avx512, values);
  EXPECT_EQ(smaller.score_keys, 4);
  EXPECT_EQ(cpu_tiling_error(smaller, 32, true), "");
  EXPECT_EQ(std::string(attention_contract::kCpuTilingParams[1].name), "score_keys");

  // GPU: the splits' kernel lays its threads out feature_block wide, so feature_block must divide
  // the block's Q·Kᵀ and P·V threads (128 and 256 at the prefill tiling: 12 does not; 8 does).
  std::array<int, attention_contract::kGpuTilingParamCount> gpu_values{};
  gpu_values[7] = 12;
  ASSERT_EQ(std::string(attention_contract::kGpuTilingParams[7].name), "gpu_feature_block");
  const auto prefill = attention_contract::gpu_tiling(attention_contract::GpuApi::CUDA, true);
  EXPECT_TRUE(contains(attention_contract::gpu_tiling_error(with_overrides(prefill, gpu_values)),
                       "gpu_feature_block=12: must divide the block's 128 Q·Kᵀ and 256 P·V"));
  gpu_values[7] = 8;
  EXPECT_EQ(attention_contract::gpu_tiling_error(with_overrides(prefill, gpu_values)), "");
}

}  // namespace
}  // namespace attention_test
