// A seeded random sweep over shapes, layouts, scales, logsumexp requests and (second sweep) masks,
// in shards so that
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

// Each mask piece independently present with probability ~1/3 (so most cases combine several).
MaskSpec draw_mask(std::mt19937_64& rng, const SdpaCase& c) {
  auto coin = [&](int in) { return std::uniform_int_distribution<int>(0, in - 1)(rng) == 0; };
  MaskSpec m;
  const int causal = std::uniform_int_distribution<int>(0, 2)(rng);
  m.causal = causal == 0   ? attention::Causal::None
             : causal == 1 ? attention::Causal::TopLeft
                           : attention::Causal::BottomRight;
  if (m.causal != attention::Causal::None && coin(3)) {
    m.window = std::uniform_int_distribution<int64_t>(0, c.Sk)(rng);
    if (coin(3)) m.window_forward = std::uniform_int_distribution<int64_t>(0, c.Sk)(rng);
  }
  m.key_lengths = coin(3);
  m.query_lengths = coin(4);
  m.bool_mask = coin(4);
  m.additive_mask = coin(4);
  m.mask_batch_broadcast = coin(2);
  m.mask_head_broadcast = coin(2);
  if (coin(3)) m.hidden_value = -3.0e38f;
  m.alibi = coin(4);
  m.custom_slopes = coin(2);
  if (coin(4)) m.softcap = std::uniform_real_distribution<float>(0.5f, 20.0f)(rng);
  return m;
}

class MaskedSdpaSweep : public ::testing::TestWithParam<int> {};

TEST_P(MaskedSdpaSweep, RandomMaskedCasesMatchReference) {
  std::mt19937_64 rng(seed_for_current_test());
  for (int i = 0; i < kCasesPerShard; ++i) {
    const SdpaCase c = draw_case(rng, kMaxWork);
    const MaskSpec m = draw_mask(rng, c);
    expect_masked_sdpa_matches_reference(c, m, rng());
    if (HasFailure()) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, MaskedSdpaSweep, ::testing::Range(0, kShards));

}  // namespace
}  // namespace attention_test
