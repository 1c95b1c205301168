#include "reference/sdpa_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace {

// Start of row (b, h, s) of a rank-4 fp32 view; elements along the last dim are `strides[3]` apart.
const float* row(const attention::TensorView& view, int64_t b, int64_t h, int64_t s) {
  return static_cast<const float*>(view.data) + b * view.strides[0] + h * view.strides[1] +
         s * view.strides[2];
}

double dot(const attention::TensorView& a, const float* a_row, const attention::TensorView& b,
           const float* b_row, int64_t length) {
  double sum = 0.0;
  for (int64_t d = 0; d < length; ++d) {
    sum +=
        static_cast<double>(a_row[d * a.strides[3]]) * static_cast<double>(b_row[d * b.strides[3]]);
  }
  return sum;
}

}  // namespace

void reference_sdpa(const attention::TensorView& q, const attention::TensorView& k,
                    const attention::TensorView& v, double scale, std::vector<double>* out,
                    std::vector<double>* lse) {
  const int64_t batch = q.shape[0], heads = q.shape[1], q_len = q.shape[2], head_dim = q.shape[3];
  const int64_t kv_heads = k.shape[1], kv_len = k.shape[2], value_dim = v.shape[3];
  out->assign(static_cast<size_t>(batch * heads * q_len * value_dim), 0.0);
  if (lse != nullptr) {
    lse->assign(static_cast<size_t>(batch * heads * q_len),
                -std::numeric_limits<double>::infinity());
  }
  // Keyless rows keep the zeros and -inf assigned above; without heads there is no group size.
  if (kv_len == 0 || heads == 0 || kv_heads == 0) return;
  const int64_t group = heads / kv_heads;

  std::vector<double> weights(static_cast<size_t>(kv_len));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv_head = h / group;
      for (int64_t i = 0; i < q_len; ++i) {
        const float* q_row = row(q, b, h, i);
        double row_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < kv_len; ++j) {
          weights[j] = scale * dot(q, q_row, k, row(k, b, kv_head, j), head_dim);
          row_max = std::max(row_max, weights[j]);
        }
        double row_sum = 0.0;
        for (double& weight : weights) {
          weight = std::exp(weight - row_max);
          row_sum += weight;
        }
        const int64_t row_index = (b * heads + h) * q_len + i;
        for (int64_t d = 0; d < value_dim; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < kv_len; ++j) {
            acc += weights[j] * static_cast<double>(row(v, b, kv_head, j)[d * v.strides[3]]);
          }
          (*out)[row_index * value_dim + d] = acc / row_sum;
        }
        if (lse != nullptr) (*lse)[row_index] = row_max + std::log(row_sum);
      }
    }
  }
}
