#include "call/tensor_util.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "call/validate.h"

namespace attention::detail {
namespace {

// Calls visit_row(row, n, stride) for every innermost row of a rank <= 4 view; stops at the first
// row for which it returns false.
template <typename VisitRow>
bool for_each_row(const TensorView& t, VisitRow visit_row) {
  std::array<int64_t, kMaxRank> shape{1, 1, 1, 1}, strides{0, 0, 0, 0};
  const int pad = kMaxRank - t.rank;
  for (int d = 0; d < t.rank; ++d) {
    shape[pad + d] = t.shape[d];
    strides[pad + d] = t.strides[d];
  }
  // Outer dims laid out right after the row (dense views) join it: one long row, not many short.
  constexpr int kRow = kMaxRank - 1;
  if (strides[kRow] == 1) {
    for (int d = kRow - 1; d >= 0 && (shape[d] == 1 || strides[d] == shape[kRow]); --d) {
      shape[kRow] *= shape[d];
      shape[d] = 1;
    }
  }
  auto* base = static_cast<float*>(t.data);
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c) {
        float* row = base + a * strides[0] + b * strides[1] + c * strides[2];
        if (!visit_row(row, shape[3], strides[3])) return false;
      }
  return true;
}

// Whether a contiguous run holds no NaN/Inf (an all-ones exponent), without a branch per element,
// so the compiler vectorizes it (an early-exit isfinite loop ran at ~1 element/ns and took a
// quarter of a small-feature decode call).
bool run_finite(const float* x, int64_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad = 0;
  for (int64_t e = 0; e < n; ++e) {
    uint32_t bits;
    std::memcpy(&bits, x + e, sizeof bits);
    bad |= (bits & kExponent) == kExponent;
  }
  return bad == 0;
}

// The largest |x| of a contiguous run as bits (|x| orders like its bits; NaN and Inf have the
// largest), branch-free for the same reason as run_finite.
uint32_t run_max_abs_bits(const float* x, int64_t n) {
  uint32_t largest = 0;
  for (int64_t e = 0; e < n; ++e) {
    uint32_t bits;
    std::memcpy(&bits, x + e, sizeof bits);
    largest = std::max(largest, bits & 0x7fffffffu);
  }
  return largest;
}

}  // namespace

void fill(const TensorView& t, float value) {
  for_each_row(t, [value](float* row, int64_t n, int64_t stride) {
    for (int64_t e = 0; e < n; ++e) row[e * stride] = value;
    return true;
  });
}

bool all_finite(const TensorView& t) {
  return for_each_row(t, [](const float* row, int64_t n, int64_t stride) {
    if (stride == 1) return run_finite(row, n);
    for (int64_t e = 0; e < n; ++e) {
      if (!std::isfinite(row[e * stride])) return false;
    }
    return true;
  });
}

float max_abs(const TensorView& t) {
  uint32_t largest = 0;
  for_each_row(t, [&largest](const float* row, int64_t n, int64_t stride) {
    if (stride == 1) {
      largest = std::max(largest, run_max_abs_bits(row, n));
    } else {
      for (int64_t e = 0; e < n; ++e)
        largest = std::max(largest, run_max_abs_bits(row + e * stride, 1));
    }
    return true;
  });
  if (largest >= 0x7f800000u) return std::numeric_limits<float>::infinity();
  float value;
  std::memcpy(&value, &largest, sizeof value);
  return value;
}

void write_rows_without_keys(const TensorView& out, const TensorView& stats) {
  fill(out, 0.0f);
  if (stats.data != nullptr) fill(stats, -std::numeric_limits<float>::infinity());
}

void copy(const TensorView& from, const TensorView& to) {
  std::array<int64_t, kMaxRank> shape{1, 1, 1, 1}, in{0, 0, 0, 0}, out{0, 0, 0, 0};
  const int pad = kMaxRank - from.rank;
  for (int d = 0; d < from.rank; ++d) {
    shape[pad + d] = from.shape[d];
    in[pad + d] = from.strides[d];
    out[pad + d] = to.strides[d];
  }
  const auto* source = static_cast<const float*>(from.data);
  auto* target = static_cast<float*>(to.data);
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c) {
        const float* row = source + a * in[0] + b * in[1] + c * in[2];
        float* row_out = target + a * out[0] + b * out[1] + c * out[2];
        for (int64_t e = 0; e < shape[3]; ++e) row_out[e * out[3]] = row[e * in[3]];
      }
}

TensorView slice(const TensorView& t, int dim, int64_t begin, int64_t count) {
  TensorView view = t;
  view.data = static_cast<char*>(t.data) + begin * t.strides[dim] * dtype_size(t.dtype);
  view.shape[dim] = count;
  return view;
}

TensorView with_one_head(const TensorView& t) {
  TensorView view = t;
  view.rank = t.rank + 1;
  for (int d = t.rank; d >= 2; --d) {
    view.shape[d] = t.shape[d - 1];
    view.strides[d] = t.strides[d - 1];
  }
  view.shape[1] = 1;
  view.strides[1] = t.shape[1] * t.strides[1];  // any value: the dim has one index
  return view;
}

void average_heads(const TensorView& in, const TensorView& out) {
  const int64_t B = in.shape[0], H = in.shape[1], S = in.shape[2], X = in.shape[3];
  const auto* src = static_cast<const float*>(in.data);
  auto* dst = static_cast<float*>(out.data);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t x = 0; x < X; ++x) {
        float sum = 0.0f;
        for (int64_t h = 0; h < H; ++h) sum += src[((b * H + h) * S + s) * X + x];
        dst[b * out.strides[0] + s * out.strides[1] + x * out.strides[2]] =
            sum / static_cast<float>(H);
      }
}

}  // namespace attention::detail
