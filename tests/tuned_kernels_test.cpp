// Tuned kernels (autoschedules/<target>.json, cmake/AttentionTuning.cmake): each one this machine
// runs serves the calls of its bucket and matches the reference there (on x86 also those of the
// AVX2 variant, through Halide's dispatch hook); with tuned kernels off the defaults serve the same
// calls. A machine whose CPU runs no tuned table's target skips, naming it.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "kernels/kernel_slots.h"
#include "test_util.h"

namespace attention_test {
namespace {

bool has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// A shape of `bucket` (kernel_contract.h, shape_bucket) with uneven sizes: partial tiles, splits
// and vectors at every edge.
SdpaCase case_in_bucket(const std::string& bucket) {
  const int64_t Sq = has(bucket, "decode") ? 1 : has(bucket, "long_q") ? 1030 : 37;
  const int64_t Sk = has(bucket, "long_k") ? 2051 : 100;
  const int64_t D = has(bucket, "d_le64") ? 64 : 80;
  return sdpa_case(1, 2, 2, Sq, Sk, D, D);
}

// Restores the process-wide setting whatever a test does.
class TunedKernels : public ::testing::Test {
 protected:
  void TearDown() override { attention::set_tuned_kernels(saved_); }
  bool saved_ = attention::tuned_kernels_enabled();
};

// Every tuned kernel of the variant that runs here serves a call of its bucket and matches the
// reference there.
void expect_tuned_kernels_match_reference() {
  const auto tuned = attention::detail::tuned_kernels_here();
  if (tuned.empty()) {
    GTEST_SKIP() << "the build has no tuned kernels for " << attention::cpu_kernel_target();
  }
  attention::set_tuned_kernels(true);
  EXPECT_EQ(attention::tuned_kernel_buckets().size(), tuned.size());
  for (const auto& [bucket, kernel] : tuned) {
    SCOPED_TRACE(bucket + ": " + kernel);
    const bool masked = has(bucket, ".masked");
    const SdpaCase c = case_in_bucket(bucket);
    ASSERT_EQ(attention::detail::cpu_sdpa_kernel(masked, c.B, c.H, c.Sq, c.Sk, c.D), kernel)
        << describe(c) << " is not served by its bucket's tuned kernel";
    const uint64_t seed = seed_for_current_test();
    if (masked) {
      MaskSpec causal;
      causal.causal = attention::Causal::TopLeft;
      expect_masked_sdpa_matches_reference(c, causal, seed);
    } else {
      expect_sdpa_matches_reference(c, seed);
    }
  }
}

TEST_F(TunedKernels, EachServesItsBucketAndMatchesReference) {
  expect_tuned_kernels_match_reference();
}

// An AVX-512 machine also runs the tuned kernels of the AVX2 variant's table: Halide's dispatch
// hook makes the AVX2 variant the one that runs (as on an AVX2-only CPU) before the first call.
TEST_F(TunedKernels, Avx2VariantsServeTheirBucketsAndMatchReference) {
  const Avx2VariantScope avx2;
  if (!avx2.skip_reason().empty()) GTEST_SKIP() << avx2.skip_reason();
  expect_tuned_kernels_match_reference();
}

TEST_F(TunedKernels, OffMeansTheDefaults) {
  attention::set_tuned_kernels(false);
  EXPECT_FALSE(attention::tuned_kernels_enabled());
  std::vector<std::pair<std::string, std::string>> buckets = {{"short_q.short_k.d_le64", "prefill"},
                                                              {"long_q.long_k.d_gt64", "prefill"},
                                                              {"decode.long_k.d_le64", "decode"}};
  for (const auto& [bucket, role] : buckets) {
    const SdpaCase c = case_in_bucket(bucket);
    for (const bool masked : {false, true}) {
      const std::string want = std::string(masked ? "masked_" : "") + role;
      std::string expected;
      for (const auto& slot : attention::detail::kernel_slots()) {
        if (slot.family == "sdpa" && slot.backend == "cpu" && slot.role == want) {
          expected = slot.kernel;
        }
      }
      ASSERT_FALSE(expected.empty()) << want;
      EXPECT_EQ(attention::detail::cpu_sdpa_kernel(masked, c.B, c.H, c.Sq, c.Sk, c.D), expected)
          << bucket << " " << want;
    }
  }
}

}  // namespace
}  // namespace attention_test
