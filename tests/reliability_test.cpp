// Reproducibility and concurrency. Each work item of a kernel reduces in a fixed order on one
// thread, so results must be bit-identical run to run, whatever the thread count, and when many
// application threads call at once (changing the thread count meanwhile).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test_util.h"

namespace attention_test {
namespace {

// One problem with its inputs filled, and the output of one call.
struct Problem {
  Problem(const SdpaCase& c, uint64_t seed) : c(c), tensors(c, seed) {}

  // Runs the library and returns out's and logsumexp's storage (padding included).
  std::vector<float> run() {
    tensors.out.poison();
    tensors.lse.poison();
    attention::SdpaOptions options;
    options.scale = c.scale;
    if (c.logsumexp) options.logsumexp = tensors.lse.view();
    const attention::Status status = attention::scaled_dot_product_attention(
        tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out.view(), options);
    EXPECT_TRUE(status.ok()) << status.message();
    std::vector<float> result = tensors.out.storage();
    result.insert(result.end(), tensors.lse.storage().begin(), tensors.lse.storage().end());
    return result;
  }

  SdpaCase c;
  SdpaTensors tensors;
};

// Both kernels (decode for Sq <= 2), ragged tiles, GQA, strided layouts, D with and without the
// specialized sizes.
std::vector<SdpaCase> varied_cases() {
  return {
      sdpa_case(1, 4, 2, 100, 130, 64, 64).with_logsumexp(),
      sdpa_case(2, 2, 2, 1, 500, 128, 128),
      sdpa_case(1, 3, 3, 61, 47, 59, 80).layout(Layout::kPadded).with_logsumexp(),
      sdpa_case(2, 8, 1, 7, 200, 64, 32).layout(Layout::kBSHD),
      sdpa_case(1, 2, 2, 2, 333, 80, 80).with_logsumexp(),
      sdpa_case(3, 2, 1, 49, 17, 8, 8).layout(Layout::kSHBD),
      sdpa_case(1, 1, 1, 200, 200, 128, 64).with_scale(-0.5f),
      sdpa_case(2, 4, 4, 1, 1, 16, 16).with_logsumexp(),
      sdpa_case(1, 1, 1, 1, 3000, 64, 64).with_logsumexp(),  // decode in several key splits
  };
}

TEST(SdpaReproducibility, BitIdenticalAcrossRunsAndThreadCounts) {
  const DefaultThreadsOnExit restore;
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c : varied_cases()) {
    SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
    Problem problem(c, seed);
    attention::set_num_threads(1);
    const std::vector<float> expected = problem.run();
    for (int threads : {1, 2, 3, 4, 7}) {
      attention::set_num_threads(threads);
      EXPECT_TRUE(same_bits(problem.run(), expected)) << threads << " threads";
    }
  }
}

// 16 application threads, each running a different problem several times, while the thread count
// of the kernels' worker pool is changed underneath them: every result equals the single-threaded
// one bit for bit.
TEST(SdpaConcurrency, SixteenThreadsMatchSingleThreadedResults) {
  const DefaultThreadsOnExit restore;
  const uint64_t seed = seed_for_current_test();
  const std::vector<SdpaCase> cases = varied_cases();
  constexpr int kThreads = 16, kRounds = 4;
  std::vector<Problem> problems;
  std::vector<std::vector<float>> expected;
  attention::set_num_threads(1);
  for (int n = 0; n < kThreads; ++n) {
    problems.emplace_back(cases[n % cases.size()], seed + n);
    expected.push_back(problems.back().run());
  }
  attention::set_num_threads(0);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int n = 0; n < kThreads; ++n) {
    threads.emplace_back([&, n] {
      for (int round = 0; round < kRounds; ++round) {
        if (n % 4 == 0) attention::set_num_threads(1 + (n + round) % 3);
        if (!same_bits(problems[n].run(), expected[n])) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0) << "of " << kThreads * kRounds << " concurrent calls, "
                                  << seed_note(seed);
}

}  // namespace
}  // namespace attention_test
