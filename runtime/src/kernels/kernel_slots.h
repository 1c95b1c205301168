// The kernel table (kernel_table.h) described without the kernels' types, and what the build
// generated each kernel with: what tests/kernel_contract_test.cpp checks the table against.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attention::detail {

// One kernel as generators/CMakeLists.txt built it (attention_kernel_builds.inc).
struct KernelBuild {
  const char* name;
  const char* generator;
  const char* params;   // "key=value ..." as given; absent keys take the generator's defaults
  const char* targets;  // Halide targets, space-separated
};

// nullptr if the build made no kernel of that name.
const KernelBuild* find_kernel_build(std::string_view name);
// The value of GeneratorParam `key` in build.params, or "" when not given.
std::string build_param(const KernelBuild& build, std::string_view key);

// One slot of a config row: family "sdpa", "additive", "nadaraya_watson" or "mha"; backend
// "cpu", "cuda" or "opencl"; role "prefill", "decode", "masked_prefill", "masked_decode",
// "plain" or "masked"; the kernel's name.
struct KernelSlotInfo {
  std::string family, backend, role, kernel;
};
std::vector<KernelSlotInfo> kernel_slots();

// The tuned kernels built for the variant that runs here, whether or not they are on:
// {bucket, kernel name} (kernel_table.h).
std::vector<std::pair<std::string, std::string>> tuned_kernels_here();
// The name of the kernel that serves a CPU scaled_dot_product_attention call of that shape, with
// or without masks: tuned or default, as the call would pick it now.
std::string cpu_sdpa_kernel(bool masked, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D);

}  // namespace attention::detail
