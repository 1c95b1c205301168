// The row softmax of the OpenBLAS "math path" peers (SDPA and MHA benchmarks).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace bench {

// Frameworks use a vectorized exp (PyTorch: Sleef); glibc's expf is only vectorized under
// -ffast-math, which would also drop the benchmarks' NaN checks, so the exp is a plain polynomial
// gcc vectorizes by itself (with -fno-trapping-math, see bench/CMakeLists.txt).

// Cephes' expf: e^x = 2^n · e^r with n = round(x·log2 e), |r| <= ln2/2; ~1 ulp for x in [-87, 0].
inline float exp_poly(float x) {
  x = std::max(x, -87.f);  // inputs are <= 0 after the max-subtract; below -87 2^n would underflow
  const float n = std::floor(x * 1.44269504f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 split in two for exactness
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t two_n_bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &two_n_bits, sizeof two_n);
  return p * two_n;
}

// Folds a row with 16 partial lanes: without -ffast-math gcc may not reorder a float sum or max.
template <typename Op>
float reduce_row(const float* row, int64_t n, float init, Op op) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, init);
  const int64_t body = n - n % kLanes;
  for (int64_t j = 0; j < body; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = op(lane[l], row[j + l]);
  for (int64_t j = body; j < n; ++j) lane[j - body] = op(lane[j - body], row[j]);
  float total = init;
  for (int l = 0; l < kLanes; ++l) total = op(total, lane[l]);
  return total;
}

// mask: an additive [rows, cols] plane or null. A row the mask hides entirely becomes zeros.
inline void softmax_rows(float* scores, int64_t rows, int64_t cols, const float* mask) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scores + i * cols;
    if (mask != nullptr) {
      const float* mask_row = mask + i * cols;
      for (int64_t j = 0; j < cols; ++j) row[j] += mask_row[j];
    }
    const float max =
        reduce_row(row, cols, -INFINITY, [](float a, float b) { return std::max(a, b); });
    if (max == -INFINITY) {
      std::fill(row, row + cols, 0.f);
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) row[j] = exp_poly(row[j] - max);
    const float inv_sum = 1.f / reduce_row(row, cols, 0.f, [](float a, float b) { return a + b; });
    for (int64_t j = 0; j < cols; ++j) row[j] *= inv_sum;
  }
}

}  // namespace bench
