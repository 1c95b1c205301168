// The kernel table (kernel_table.h) described without the kernels' types, and what the build
// generated each kernel with: what tests/kernel_contract_test.cpp checks the table against.
#pragma once

#include <string>
#include <string_view>
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

}  // namespace attention::detail
