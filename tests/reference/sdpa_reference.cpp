#include "reference/sdpa_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/half_reference.h"

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

// Element (b, h, i, j) of a [B|1, H|1, Sq, Sk] mask view (size-1 dims broadcast).
template <typename T>
T mask_at(const attention::TensorView& m, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t bb = m.shape[0] == 1 ? 0 : b, hh = m.shape[1] == 1 ? 0 : h;
  return static_cast<const T*>(
      m.data)[bb * m.strides[0] + hh * m.strides[1] + i * m.strides[2] + j * m.strides[3]];
}

int64_t length_at(const attention::TensorView& lengths, int64_t b, int64_t full) {
  if (lengths.data == nullptr) return full;
  return static_cast<const int32_t*>(lengths.data)[b * lengths.strides[0]];
}

// Whether key j is visible to query i, and its logit (from the scaled score) if it is.
struct MaskedLogit {
  bool visible;
  double logit;
};

MaskedLogit apply_mask(const attention::MaskOptions& m, const std::vector<double>& slopes,
                       double score, int64_t b, int64_t h, int64_t i, int64_t j, int64_t q_len,
                       int64_t kv_len) {
  using attention::Causal;
  const int64_t diag = m.causal == Causal::TopLeft ? i : i + kv_len - q_len;
  // Distances from the diagonal, so windows and reaches up to INT64_MAX cannot overflow.
  if (m.causal != Causal::None && j - diag > m.window_forward) return {false, 0};
  if (m.window >= 0 && diag - j > m.window) return {false, 0};
  if (j >= length_at(m.key_lengths, b, kv_len) || i >= length_at(m.query_lengths, b, q_len)) {
    return {false, 0};
  }
  if (m.bool_mask.data != nullptr && mask_at<uint8_t>(m.bool_mask, b, h, i, j) == 0) {
    return {false, 0};
  }
  double logit = score;
  if (m.softcap > 0) logit = m.softcap * std::tanh(logit / m.softcap);
  if (m.alibi) logit -= slopes[h] * std::abs(static_cast<double>(j - diag));
  if (m.additive_mask.data != nullptr) {
    const double add = mask_at<float>(m.additive_mask, b, h, i, j);
    if (add == -std::numeric_limits<double>::infinity()) return {false, 0};
    logit += add;
  }
  return {true, logit};
}

}  // namespace

std::vector<double> reference_alibi_slopes(int64_t heads) {
  auto geometric = [](int64_t n) {
    std::vector<double> s;
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(double(n)) - 3)));
    for (int64_t h = 0; h < n; ++h) s.push_back(start * std::pow(start, double(h)));
    return s;
  };
  const int64_t closest = int64_t(1) << static_cast<int>(std::floor(std::log2(double(heads))));
  std::vector<double> slopes = geometric(closest);
  const std::vector<double> extra = geometric(2 * closest);
  for (int64_t h = 0; int64_t(slopes.size()) < heads; h += 2) slopes.push_back(extra[h]);
  return slopes;
}

namespace {

template <typename Score, typename Value>
void attention_core(const Score& score, int64_t heads, int64_t q_len, const Value& value,
                    const ValueShape& value_shape, std::vector<double>* out,
                    std::vector<double>* lse, const attention::MaskOptions* mask,
                    std::vector<double>* attention_weights,
                    attention::DType weights_storage = attention::DType::Float32) {
  const int64_t batch = value_shape.batch, kv_heads = value_shape.kv_heads;
  const int64_t kv_len = value_shape.kv_len, value_dim = value_shape.value_dim;
  out->assign(static_cast<size_t>(batch * heads * q_len * value_dim), 0.0);
  if (attention_weights != nullptr) {
    attention_weights->assign(static_cast<size_t>(batch * heads * q_len * kv_len), 0.0);
  }
  if (lse != nullptr) {
    lse->assign(static_cast<size_t>(batch * heads * q_len),
                -std::numeric_limits<double>::infinity());
  }
  // Keyless rows keep the zeros and -inf assigned above; without heads there is no group size.
  if (kv_len == 0 || heads == 0 || kv_heads == 0) return;
  const int64_t group = heads / kv_heads;
  std::vector<double> slopes;
  if (mask != nullptr && mask->alibi) {
    if (mask->alibi_slopes.data == nullptr) {
      slopes = reference_alibi_slopes(heads);
    } else {
      const auto* given = static_cast<const float*>(mask->alibi_slopes.data);
      for (int64_t h = 0; h < heads; ++h)
        slopes.push_back(given[h * mask->alibi_slopes.strides[0]]);
    }
  }
  std::vector<char> visible(static_cast<size_t>(kv_len), 1);

  std::vector<double> weights(static_cast<size_t>(kv_len));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv_head = h / group;
      for (int64_t i = 0; i < q_len; ++i) {
        double row_max = -std::numeric_limits<double>::infinity();
        bool any_visible = false;
        for (int64_t j = 0; j < kv_len; ++j) {
          if (mask != nullptr) {
            visible[j] = apply_mask(*mask, slopes, 0.0, b, h, i, j, q_len, kv_len).visible;
            if (!visible[j]) continue;  // a hidden key's k is never read
          }
          const double s = score(b, h, i, j);
          weights[j] =
              mask != nullptr ? apply_mask(*mask, slopes, s, b, h, i, j, q_len, kv_len).logit : s;
          row_max = std::max(row_max, weights[j]);
          any_visible = true;
        }
        if (!any_visible) continue;  // zeros and -inf, assigned above
        double row_sum = 0.0;
        for (int64_t j = 0; j < kv_len; ++j) {
          if (!visible[j]) continue;
          weights[j] = std::exp(weights[j] - row_max);
          row_sum += weights[j];
        }
        const int64_t row_index = (b * heads + h) * q_len + i;
        std::vector<double> stored = weights;
        if (weights_storage != attention::DType::Float32) {
          for (double& w : stored) w = round_to(weights_storage, static_cast<float>(w));
        }
        for (int64_t d = 0; d < value_dim; ++d) {
          // Neumaier's compensated sum: terms that cancel (two top keys with opposite values)
          // must not leave a plain double sum at an exact 0 that the true value is not. Once the
          // sum is inf or NaN it stays the plain sum (inf - inf in the correction would be NaN).
          double acc = 0.0, low = 0.0;
          for (int64_t j = 0; j < kv_len; ++j) {
            if (!visible[j]) continue;  // nor its v
            const double term = stored[j] * value(b, kv_head, j, d);
            const double sum = acc + term;
            if (std::isfinite(sum)) {
              low += std::abs(acc) >= std::abs(term) ? (acc - sum) + term : (term - sum) + acc;
            }
            acc = sum;
          }
          (*out)[row_index * value_dim + d] = (std::isfinite(acc) ? acc + low : acc) / row_sum;
        }
        if (lse != nullptr) (*lse)[row_index] = row_max + std::log(row_sum);
        if (attention_weights != nullptr) {
          for (int64_t j = 0; j < kv_len; ++j) {
            if (visible[j]) (*attention_weights)[row_index * kv_len + j] = weights[j] / row_sum;
          }
        }
      }
    }
  }
}

}  // namespace

void reference_attention(const PairScore& score, int64_t heads, int64_t q_len,
                         const attention::TensorView& v, std::vector<double>* out,
                         std::vector<double>* lse, const attention::MaskOptions* mask,
                         std::vector<double>* attention_weights) {
  // A lambda, not a ValueAt: inlined into the innermost loop.
  const auto value = [&v](int64_t b, int64_t kv_head, int64_t j, int64_t c) {
    return static_cast<double>(row(v, b, kv_head, j)[c * v.strides[3]]);
  };
  attention_core(score, heads, q_len, value, {v.shape[0], v.shape[1], v.shape[2], v.shape[3]}, out,
                 lse, mask, attention_weights);
}

void reference_attention(const PairScore& score, int64_t heads, int64_t q_len, const ValueAt& value,
                         const ValueShape& value_shape, std::vector<double>* out,
                         std::vector<double>* lse, const attention::MaskOptions* mask,
                         std::vector<double>* attention_weights) {
  attention_core(score, heads, q_len, value, value_shape, out, lse, mask, attention_weights);
}

void reference_sdpa(const attention::TensorView& q, const attention::TensorView& k,
                    const attention::TensorView& v, double scale, std::vector<double>* out,
                    std::vector<double>* lse, const attention::MaskOptions* mask,
                    attention::DType weights_storage) {
  const int64_t heads = q.shape[1], head_dim = q.shape[3];
  const int64_t group = k.shape[1] == 0 ? 1 : heads / k.shape[1];
  // Lambdas, not std::function: the demo times this as the naive loop.
  const auto score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return scale * dot(q, row(q, b, h, i), k, row(k, b, h / group, j), head_dim);
  };
  const auto value = [&v](int64_t b, int64_t kv_head, int64_t j, int64_t c) {
    return static_cast<double>(row(v, b, kv_head, j)[c * v.strides[3]]);
  };
  attention_core(score, heads, q.shape[2], value,
                 ValueShape{v.shape[0], v.shape[1], v.shape[2], v.shape[3]}, out, lse, mask,
                 nullptr, weights_storage);
}
