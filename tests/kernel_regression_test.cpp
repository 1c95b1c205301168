// nadaraya_watson_attention against the double-precision loops of
// tests/reference/kernel_regression_reference.h, on fresh random inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "reference/kernel_regression_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::RegressionKernel;

constexpr RegressionKernel kKernels[] = {RegressionKernel::Gaussian, RegressionKernel::Boxcar,
                                         RegressionKernel::Epanechnikov};

const char* kernel_name(RegressionKernel kernel) {
  switch (kernel) {
    case RegressionKernel::Gaussian:
      return "Gaussian";
    case RegressionKernel::Boxcar:
      return "boxcar";
    case RegressionKernel::Epanechnikov:
      return "Epanechnikov";
  }
  return "?";
}

struct RegressionCase {
  int64_t B, Sq, Sk, D, Dv;
  Layout layout = Layout::kDense;
};

std::string describe(const RegressionCase& c, RegressionKernel kernel, float bandwidth) {
  return "B=" + std::to_string(c.B) + " Sq=" + std::to_string(c.Sq) +
         " Sk=" + std::to_string(c.Sk) + " D=" + std::to_string(c.D) +
         " Dv=" + std::to_string(c.Dv) + " " + layout_name(c.layout) + " " + kernel_name(kernel) +
         " bandwidth=" + std::to_string(bandwidth);
}

struct RegressionTensors {
  explicit RegressionTensors(const RegressionCase& c)
      : q({c.B, c.Sq, c.D}, c.layout),
        k({c.B, c.Sk, c.D}, c.layout),
        v({c.B, c.Sk, c.Dv}, c.layout),
        out({c.B, c.Sq, c.Dv}, c.layout),
        lws({c.B, c.Sq}, c.layout) {}
  Tensor q, k, v, out, lws;
};

// Runs the call on poisoned outputs and compares out and log_weight_sum with the reference.
void run_and_compare(RegressionTensors& t, RegressionKernel kernel, float bandwidth) {
  t.out.poison();
  t.lws.poison();
  attention::KernelRegressionOptions options;
  options.kernel = kernel;
  options.bandwidth = bandwidth;
  options.log_weight_sum = t.lws.view();
  const attention::Status status = attention::nadaraya_watson_attention(
      t.q.view(), t.k.view(), t.v.view(), t.out.view(), options);
  ASSERT_TRUE(status.ok()) << status.message();
  std::vector<double> expected_out, expected_lws;
  reference_nadaraya_watson(t.q.view(), t.k.view(), t.v.view(), kernel, bandwidth, &expected_out,
                            &expected_lws);
  EXPECT_TRUE(matches_reference(t.out.to_dense(), expected_out, t.out.shape())) << "in out";
  EXPECT_TRUE(matches_reference(t.lws.to_dense(), expected_lws, t.lws.shape(), Domain::Log))
      << "in log_weight_sum";
  EXPECT_TRUE(t.out.outside_view_holds(std::nanf(""))) << "in out's padding";
}

// Random multiples of 1/8 in [-1, 1]: squared distances are then exact multiples of 1/64 in fp32
// and double alike, so with bandwidth² = (n + 1/2) / 64 no pair sits on the boxcar's edge, where
// rounding would decide between weight 1 and 0.
void fill_grid(Tensor& t, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> step(-8, 8);
  t.fill([&](const Index&) { return step(rng) / 8.0f; });
}

// The bandwidth nearest `target` whose square is (n + 1/2) / 64.
float off_grid_bandwidth(double target) {
  return static_cast<float>(std::sqrt((std::floor(target * target * 64.0) + 0.5) / 64.0));
}

void expect_matches_reference(const RegressionCase& c, RegressionKernel kernel, float bandwidth,
                              uint64_t seed) {
  SCOPED_TRACE(describe(c, kernel, bandwidth) + ", " + seed_note(seed));
  RegressionTensors t(c);
  std::mt19937_64 rng(seed);
  fill_grid(t.q, rng);
  fill_grid(t.k, rng);
  t.v.fill_values(rng);
  run_and_compare(t, kernel, bandwidth);
}

// 1-D inputs (the classic demo), odd sizes, decode (Sq 1, 2), several prefill and decode key
// splits (the last one partial), decode's few-feature paths (D < 32, Dv < 8) and its wide ones,
// strided layouts; bandwidths from "few keys in reach" to "every key". Decode cases have several
// rows: log_weight_sum is often near 0 (weights summing to about 1), where a one-element relative
// L2 measures fp32's absolute rounding (3e-7 at -0.0125 failed it once) rather than the kernel.
TEST(NadarayaWatson, MatchesReference) {
  const uint64_t seed = seed_for_current_test();
  const RegressionCase cases[] = {
      {1, 50, 100, 1, 1},  {2, 37, 29, 3, 5, Layout::kPadded},
      {3, 1, 300, 4, 2},   {3, 2, 41, 2, 7},
      {1, 97, 1100, 5, 3}, {2, 60, 13, 17, 64},
      {1, 130, 70, 64, 9}, {3, 1, 5000, 3, 9},
      {1, 2, 2100, 40, 4}, {3, 1, 1500, 1, 1, Layout::kPadded},
  };
  for (const RegressionCase& c : cases) {
    for (RegressionKernel kernel : kKernels) {
      for (double bandwidth : {0.3, 1.0, 4.0}) {
        // Distances grow like sqrt(D): so does the reach that keeps a few keys in range.
        expect_matches_reference(c, kernel, off_grid_bandwidth(bandwidth * std::sqrt(double(c.D))),
                                 seed);
      }
    }
  }
}

// Queries far from every key: boxcar and Epanechnikov rows have no weight at all and output exact
// zeros with log_weight_sum -inf; the Gaussian still averages the nearest keys (its weights would
// underflow to 0/0 outside the log domain). Its far rows are only checked for finiteness: at
// distance 100 the fp32 rounding of u² (~1e-7 relative of 8e4) shifts weight between keys at
// nearly the same distance by more than the fp32 tolerance.
TEST(NadarayaWatson, QueriesOutOfReach) {
  const uint64_t seed = seed_for_current_test();
  const float bandwidth = off_grid_bandwidth(0.5);
  for (const RegressionCase& c :
       {RegressionCase{2, 40, 30, 2, 3}, RegressionCase{1, 1, 30, 2, 3}}) {
    for (RegressionKernel kernel : kKernels) {
      SCOPED_TRACE(describe(c, kernel, bandwidth) + ", " + seed_note(seed));
      RegressionTensors t(c);
      std::mt19937_64 rng(seed);
      fill_grid(t.k, rng);
      t.v.fill_uniform(rng, -1.0f, 1.0f);
      // Even query rows lie 100 units from every key, odd ones among the keys.
      auto far = [](int64_t i) { return i % 2 == 0; };
      t.q.fill([&](const Index& index) { return far(index[1]) ? 100.0f : 0.25f; });
      if (kernel != RegressionKernel::Gaussian) run_and_compare(t, kernel, bandwidth);
      attention::KernelRegressionOptions options;
      options.kernel = kernel;
      options.bandwidth = bandwidth;
      options.log_weight_sum = t.lws.view();
      ASSERT_TRUE(attention::nadaraya_watson_attention(t.q.view(), t.k.view(), t.v.view(),
                                                       t.out.view(), options)
                      .ok());
      const std::vector<float> out = t.out.to_dense(), lws = t.lws.to_dense();
      for (int64_t b = 0; b < c.B; ++b) {
        for (int64_t i = 0; i < c.Sq; i += 2) {
          const int64_t row = b * c.Sq + i;
          if (kernel == RegressionKernel::Gaussian) {
            EXPECT_TRUE(std::isfinite(lws[row])) << "row " << row;
            for (int64_t col = 0; col < c.Dv; ++col) {
              EXPECT_TRUE(std::isfinite(out[row * c.Dv + col])) << "row " << row;
            }
          } else {
            EXPECT_EQ(lws[row], -std::numeric_limits<float>::infinity()) << "row " << row;
            for (int64_t col = 0; col < c.Dv; ++col) EXPECT_EQ(out[row * c.Dv + col], 0.0f);
          }
        }
      }
    }
  }
}

// A NaN value at a key out of every row's reach never shows (its weight is exactly 0); a NaN query
// makes its own row NaN and no other.
TEST(NadarayaWatson, NonFiniteInputs) {
  const uint64_t seed = seed_for_current_test();
  const RegressionCase c{1, 5, 9, 2, 3};
  RegressionTensors t(c);
  std::mt19937_64 rng(seed);
  fill_grid(t.q, rng);
  t.k.fill([&](const Index& index) { return index[1] == 4 ? 50.0f : float(index[1]) / 8; });
  t.v.fill([&](const Index& index) { return index[1] == 4 ? NAN : 0.5f; });
  run_and_compare(t, RegressionKernel::Boxcar, off_grid_bandwidth(1.0));
  t.q.fill([&](const Index& index) { return index[1] == 2 ? NAN : 0.1f; });
  t.v.fill([&](const Index&) { return 0.5f; });
  t.out.poison();
  attention::KernelRegressionOptions options;
  ASSERT_TRUE(attention::nadaraya_watson_attention(t.q.view(), t.k.view(), t.v.view(), t.out.view(),
                                                   options)
                  .ok());
  const std::vector<float> out = t.out.to_dense();
  for (int64_t row = 0; row < c.Sq; ++row) {
    for (int64_t col = 0; col < c.Dv; ++col) {
      EXPECT_EQ(std::isnan(out[row * c.Dv + col]), row == 2) << "row " << row << " col " << col;
    }
  }
}

// Bad arguments: an error naming the argument, and nothing written.
TEST(NadarayaWatson, RejectsBadArguments) {
  const RegressionCase c{1, 4, 6, 2, 3};
  RegressionTensors t(c);
  t.q.fill_storage(0.0f);
  t.k.fill_storage(0.0f);
  t.v.fill_storage(0.0f);
  Tensor wrong_keys({1, 6, 3});
  wrong_keys.fill_storage(0.0f);
  struct Bad {
    float bandwidth;
    int kernel;
    bool wrong_keys;
    const char* names;
  };
  const Bad cases[] = {{0.0f, 0, false, "options.bandwidth"},
                       {-1.0f, 0, false, "options.bandwidth"},
                       {NAN, 1, false, "options.bandwidth"},
                       {INFINITY, 2, false, "options.bandwidth"},
                       {1e-30f, 0, false, "options.bandwidth"},
                       {1.0f, 3, false, "options.kernel"},
                       {1.0f, 0, true, "keys"}};
  for (const Bad& bad : cases) {
    t.out.poison();
    attention::KernelRegressionOptions options;
    options.bandwidth = bad.bandwidth;
    options.kernel = static_cast<RegressionKernel>(bad.kernel);
    const attention::Status status = attention::nadaraya_watson_attention(
        t.q.view(), bad.wrong_keys ? wrong_keys.view() : t.k.view(), t.v.view(), t.out.view(),
        options);
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.message().find(bad.names), std::string::npos) << status.message();
    EXPECT_TRUE(t.out.outside_view_holds(std::nanf("")));
    for (float x : t.out.to_dense()) EXPECT_TRUE(std::isnan(x));
  }
}

}  // namespace
}  // namespace attention_test
