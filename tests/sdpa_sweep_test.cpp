// A seeded random sweep over shapes, layouts, scales and logsumexp requests, in shards so that
// ctest can run them side by side. Every failing configuration prints its case and the seed to
// rerun it.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "random_cases.h"
#include "test_util.h"

namespace attention_test {
namespace {

constexpr int kShards = 6;
constexpr int kCasesPerShard = 100;
// Bounds the naive reference's B·H·Sq·Sk·(D+Dv) work per case, keeping the sweep to seconds.
constexpr int64_t kMaxWork = 3'000'000;

class SdpaSweep : public ::testing::TestWithParam<int> {};

TEST_P(SdpaSweep, RandomCasesMatchReference) {
  std::mt19937_64 rng(seed_for_current_test());
  for (int i = 0; i < kCasesPerShard; ++i) {
    const SdpaCase c = draw_case(rng, kMaxWork);
    expect_sdpa_matches_reference(c, rng());
    // One failing case says enough; the rest would bury it.
    if (HasFailure()) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, SdpaSweep, ::testing::Range(0, kShards));

}  // namespace
}  // namespace attention_test
