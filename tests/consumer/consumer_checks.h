// What the consumer programs (consumer.cpp, consumer_mods.cpp) check with: fresh random inputs,
// the NaN poison for outputs, and the library's fp32 accuracy rule against a double reference,
// counting failures for the exit status.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace consumer_checks {

inline const float kPoison = std::numeric_limits<float>::quiet_NaN();
inline int failures = 0;

inline std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& x : values) x = dist(rng);
  return values;
}

// max |a - ref| <= 2e-5 · max(1, max |ref|) and relative L2 <= 1e-5 (the library's fp32 rule).
inline void expect_close(const char* what, const std::vector<float>& got,
                         const std::vector<double>& ref) {
  double max_err = 0, max_ref = 0, err2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(double(got[i]) - ref[i]);
    max_err = std::isnan(got[i]) ? INFINITY : std::max(max_err, e);
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    err2 += e * e;
    ref2 += ref[i] * ref[i];
  }
  const double rel_l2 = std::sqrt(err2 / std::max(ref2, 1e-300));
  const bool ok = max_err <= 2e-5 * std::max(1.0, max_ref) && rel_l2 <= 1e-5;
  std::printf("%-34s max abs error %.2e, relative L2 %.2e: %s\n", what, max_err, rel_l2,
              ok ? "ok" : "FAILED");
  failures += !ok;
}

}  // namespace consumer_checks
