// Several application threads calling the library at once, with different shapes (and so different
// kernels and scratch sizes), must each get their own correct result.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "test_util.h"

namespace attention_test {
namespace {

TEST(SdpaConcurrency, ThreadsCallingAtOnceMatchReference) {
  const std::vector<SdpaCase> cases = {
      sdpa_case(1, 4, 2, 100, 130, 64, 64).with_logsumexp(),
      sdpa_case(2, 2, 2, 1, 500, 128, 128),
      sdpa_case(1, 3, 3, 61, 47, 59, 80).layout(Layout::kPadded).with_logsumexp(),
      sdpa_case(2, 8, 1, 7, 200, 64, 32).layout(Layout::kBSHD),
  };
  const uint64_t seed = seed_for_current_test();
  constexpr int kRounds = 5;
  std::vector<std::thread> threads;
  for (size_t n = 0; n < cases.size(); ++n) {
    threads.emplace_back([&, n] {
      for (int round = 0; round < kRounds; ++round) {
        expect_sdpa_matches_reference(cases[n], seed + n * kRounds + round);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace
}  // namespace attention_test
