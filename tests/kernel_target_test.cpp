// attention::cpu_kernel_target(): the variant Halide's multi-target dispatch picks on this CPU,
// checked against the CPU's own feature bits (the kernels' target list,
// cmake/AttentionKernels.cmake: AVX-512 Skylake set, AVX2+FMA+F16C, SSE4.1 baseline on x86; the
// NEON baseline on aarch64).
#include <attention/attention.h>
#include <gtest/gtest.h>

#include <string>

namespace attention_test {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CpuKernelTarget, NamesThisArchitecture) {
  const std::string target = attention::cpu_kernel_target();
#if defined(__aarch64__)
  EXPECT_EQ(target.rfind("arm-64-linux", 0), 0u) << target;
#elif defined(__x86_64__)
  EXPECT_EQ(target.rfind("x86-64-linux", 0), 0u) << target;
#endif
  // Build-only features are not part of the name.
  EXPECT_FALSE(contains(target, "user_context")) << target;
  EXPECT_FALSE(contains(target, "no_runtime")) << target;
}

#if defined(__x86_64__)
TEST(CpuKernelTarget, IsTheBestVariantThisCpuRuns) {
  const std::string target = attention::cpu_kernel_target();
  const bool avx512_skylake =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (avx512_skylake) {
    EXPECT_TRUE(contains(target, "avx512_skylake")) << target;
  } else if (avx2) {
    EXPECT_TRUE(contains(target, "avx2") && !contains(target, "avx512")) << target;
  } else {
    EXPECT_TRUE(contains(target, "sse41") && !contains(target, "avx")) << target;
  }
}
#endif

}  // namespace
}  // namespace attention_test
