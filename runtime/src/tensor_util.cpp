#include "tensor_util.h"

#include <array>
#include <cmath>

namespace attention::detail {
namespace {

// Calls visit(element) for every element of a rank <= 4 view, rows innermost.
template <typename Visit>
bool for_each_element(const TensorView& t, Visit visit) {
  std::array<int64_t, kMaxRank> shape{1, 1, 1, 1}, strides{0, 0, 0, 0};
  const int pad = kMaxRank - t.rank;
  for (int d = 0; d < t.rank; ++d) {
    shape[pad + d] = t.shape[d];
    strides[pad + d] = t.strides[d];
  }
  auto* base = static_cast<float*>(t.data);
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c) {
        float* row = base + a * strides[0] + b * strides[1] + c * strides[2];
        for (int64_t d = 0; d < shape[3]; ++d) {
          if (!visit(row[d * strides[3]])) return false;
        }
      }
  return true;
}

}  // namespace

void fill(const TensorView& t, float value) {
  for_each_element(t, [value](float& x) {
    x = value;
    return true;
  });
}

bool all_finite(const TensorView& t) {
  return for_each_element(t, [](float& x) { return std::isfinite(x); });
}

}  // namespace attention::detail
