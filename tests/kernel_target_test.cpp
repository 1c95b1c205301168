// attention::cpu_kernel_target(): the variant Halide's multi-target dispatch picks on this CPU must
// be the first target of the build's list (ATTENTION_TARGET_LIST from CMake, comma-separated) whose
// ISA features this CPU has, as the CPU itself reports them.
#include <attention/attention.h>
#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace attention_test {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// A Halide target as a set of words ("x86", "64", "linux", "avx2", ...): Halide writes features in
// its own order, the build lists them in ours. Build-only features are left out.
std::set<std::string> words(const std::string& target) {
  std::set<std::string> result;
  for (const std::string& word : split(target, '-'))
    if (word != "asan" && word != "user_context" && word != "no_runtime") result.insert(word);
  return result;
}

#if defined(__x86_64__)
// Whether this CPU runs code built with the Halide feature `word`; false for a feature the test
// does not know (so a new target in the list makes the test say so instead of passing).
bool cpu_has(const std::string& word) {
  if (word == "x86" || word == "64" || word == "linux") return true;
  if (word == "sse41") return __builtin_cpu_supports("sse4.1");
  if (word == "avx") return __builtin_cpu_supports("avx");
  if (word == "avx2") return __builtin_cpu_supports("avx2");
  if (word == "fma") return __builtin_cpu_supports("fma");
  if (word == "f16c") {  // clang 14's __builtin_cpu_supports does not know "f16c"
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }
  if (word == "avx512")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd");
  if (word == "avx512_skylake") {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  }
  ADD_FAILURE() << "the test does not know the target feature '" << word << "'";
  return false;
}
#else
bool cpu_has(const std::string&) { return true; }  // one baseline target per non-x86 build
#endif

TEST(CpuKernelTarget, IsTheFirstListedTargetThisCpuRuns) {
  const std::string target = attention::cpu_kernel_target();
  std::string expected;
  for (const std::string& listed : built_kernel_targets()) {
    bool runs = true;
    for (const std::string& word : words(listed)) runs = runs && cpu_has(word);
    if (runs) {
      expected = listed;
      break;
    }
  }
  ASSERT_FALSE(expected.empty()) << "no target of " << ATTENTION_TARGET_LIST << " runs here";
  EXPECT_EQ(words(target), words(expected)) << "ran " << target << ", expected " << expected;
  EXPECT_EQ(target.find("user_context"), std::string::npos) << target;
}

}  // namespace
}  // namespace attention_test
