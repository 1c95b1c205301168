#include "reference/kernel_regression_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace {

double at(const attention::TensorView& t, int64_t a, int64_t b, int64_t c) {
  return static_cast<const float*>(t.data)[a * t.strides[0] + b * t.strides[1] + c * t.strides[2]];
}

}  // namespace

void reference_nadaraya_watson(const attention::TensorView& q, const attention::TensorView& k,
                               const attention::TensorView& v, attention::RegressionKernel kernel,
                               double bandwidth, std::vector<double>* out,
                               std::vector<double>* log_weight_sum) {
  const int64_t B = q.shape[0], Sq = q.shape[1], D = q.shape[2], Sk = k.shape[1], Dv = v.shape[2];
  out->assign(static_cast<size_t>(B * Sq * Dv), 0.0);
  if (log_weight_sum) log_weight_sum->assign(static_cast<size_t>(B * Sq), 0.0);
  std::vector<double> u2(static_cast<size_t>(Sk)), weight(static_cast<size_t>(Sk));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < Sq; ++i) {
      double min_u2 = std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < Sk; ++j) {
        double sum = 0.0;
        for (int64_t d = 0; d < D; ++d) {
          const double diff = at(q, b, i, d) - at(k, b, j, d);
          sum += diff * diff;
        }
        u2[j] = sum / (bandwidth * bandwidth);
        min_u2 = std::min(min_u2, u2[j]);
      }
      // Gaussian weights relative to the nearest key: exp(-(u² - min u²)/2); log f adds back
      // -min u²/2.
      double total = 0.0, log_shift = 0.0;
      for (int64_t j = 0; j < Sk; ++j) {
        const double u = std::sqrt(u2[j]);
        switch (kernel) {
          case attention::RegressionKernel::Gaussian:
            weight[j] = std::exp(-0.5 * (u2[j] - min_u2));
            log_shift = -0.5 * min_u2;
            break;
          case attention::RegressionKernel::Boxcar:
            weight[j] = u <= 1.0 ? 1.0 : 0.0;
            break;
          case attention::RegressionKernel::Epanechnikov:
            weight[j] = std::max(0.0, 1.0 - u);
            break;
        }
        total += weight[j];
      }
      if (log_weight_sum) {
        (*log_weight_sum)[b * Sq + i] =
            total > 0.0 ? log_shift + std::log(total) : -std::numeric_limits<double>::infinity();
      }
      if (total == 0.0) continue;  // no key within reach: zeros
      for (int64_t c = 0; c < Dv; ++c) {
        double sum = 0.0;
        for (int64_t j = 0; j < Sk; ++j) {
          if (weight[j] != 0.0) sum += weight[j] * at(v, b, j, c);
        }
        (*out)[(b * Sq + i) * Dv + c] = sum / total;
      }
    }
  }
}
