// The kernels are compiled for several x86 instruction sets and Halide's multi-target wrapper picks
// one per call from the CPU's features. The rest of the suite exercises the best set this CPU has;
// these tests narrow the choice through Halide's dispatch hook so every lower variant the CPU can
// execute is checked against the reference too (AVX-512 only runs, and is only tested, on an
// AVX-512 CPU).
#include <HalideRuntime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "test_util.h"

namespace attention_test {
namespace {

std::atomic<int> dispatch_queries{0};

bool has_feature(int count, const uint64_t* features, halide_target_feature_t feature) {
  const int word = feature / 64;
  return word < count && (features[word] >> (feature % 64)) & 1;
}

// Refuses every variant that needs `forbidden`, otherwise asks Halide's default check.
template <halide_target_feature_t forbidden>
int without_feature(int count, const uint64_t* features) {
  ++dispatch_queries;
  if (has_feature(count, features, forbidden)) return 0;
  return halide_default_can_use_target_features(count, features);
}

// Whether this build made the SSE4.1-only variant (ATTENTION_TARGET_LIST, best first): the
// sanitizer job builds AVX2 only, to keep CI's kernel compiles down.
bool sse41_variant_built() {
  const std::vector<std::string> targets = built_kernel_targets();
  return std::find(targets.begin(), targets.end(), "x86-64-linux-sse41") != targets.end();
}

// Installs a dispatch hook for one test and restores the previous one afterwards.
class ScopedDispatchHook {
 public:
  explicit ScopedDispatchHook(halide_can_use_target_features_t hook)
      : previous_(halide_set_custom_can_use_target_features(hook)) {}
  ~ScopedDispatchHook() { halide_set_custom_can_use_target_features(previous_); }

 private:
  halide_can_use_target_features_t previous_;
};

// Shapes that reach both kernels (decode for Sq <= 2, prefill above), head dims with and without
// vector tails, GQA and strided views.
void expect_cases_match_reference() {
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c :
       {sdpa_case(1, 2, 2, 1, 300, 64, 64).with_logsumexp(), sdpa_case(2, 4, 2, 47, 61, 59, 80),
        sdpa_case(1, 2, 2, 100, 129, 128, 128).with_logsumexp(),
        sdpa_case(2, 8, 2, 1, 301, 128, 96).with_logsumexp(),  // GQA decode as rows
        sdpa_case(1, 4, 1, 130, 77, 8, 3).layout(Layout::kPadded),
        sdpa_case(2, 3, 3, 49, 50, 111, 17).layout(Layout::kBSHD)}) {
    expect_sdpa_matches_reference(c, seed);
  }
}

// The wrapper remembers its choice after a kernel's first call in a process, so the hook only takes
// effect while neither kernel has run yet: true under ctest (one process per test). When the binary
// runs all tests in one process, the later ones are skipped rather than passed silently.
bool hook_reaches_both_kernels() {
  for (int64_t queries : {1, 48}) {  // the decode and the prefill kernel (runtime/src/plan/sdpa_plan.cpp)
    const int before = dispatch_queries.load();
    expect_sdpa_matches_reference(sdpa_case(1, 1, 1, queries, 5, 8, 8), seed_for_current_test());
    if (dispatch_queries.load() == before) return false;
  }
  return true;
}

void expect_variant_matches_reference(halide_can_use_target_features_t hook) {
  const ScopedDispatchHook scoped(hook);
  if (!hook_reaches_both_kernels()) {
    GTEST_SKIP() << "the kernels were already dispatched in this process; run this test alone";
  }
  expect_cases_match_reference();
}

TEST(IsaDispatch, Sse41BaselineMatchesReference) {
  if (!sse41_variant_built()) GTEST_SKIP() << "this build has no SSE4.1 variant";
  expect_variant_matches_reference(without_feature<halide_target_feature_avx>);
}

// The half conversions without F16C (SSE4.1: Halide's software rounding) and with it.
void expect_variant_converts_like_reference(halide_can_use_target_features_t hook) {
  const ScopedDispatchHook scoped(hook);
  const int before = dispatch_queries.load();
  expect_conversions_match_reference(seed_for_current_test());
  if (dispatch_queries.load() == before) {
    GTEST_SKIP() << "the conversion kernels were already dispatched in this process; run this "
                    "test alone";
  }
}

TEST(IsaDispatch, Sse41ConversionsMatchReference) {
  if (!sse41_variant_built()) GTEST_SKIP() << "this build has no SSE4.1 variant";
  expect_variant_converts_like_reference(without_feature<halide_target_feature_avx>);
}

TEST(IsaDispatch, Avx2ConversionsMatchReference) {
  // (clang has no "f16c" here; Halide's dispatch checks F16C itself.)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "this CPU has no AVX2+FMA";
  }
  expect_variant_converts_like_reference(without_feature<halide_target_feature_avx512>);
}

TEST(IsaDispatch, Avx2VariantMatchesReference) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "this CPU has no AVX2+FMA";
  }
  expect_variant_matches_reference(without_feature<halide_target_feature_avx512>);
}

}  // namespace
}  // namespace attention_test
